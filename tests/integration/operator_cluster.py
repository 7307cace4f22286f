"""A master with operator-API clients for the operator tests.

`Cluster` runs a real master in-process on a free port and opens, through
`tests.integration.master_harness`, the schedulers and fake agents a test
needs; `Stream` reads the operator SUBSCRIBE stream. Everything opened is
closed when the `cluster` fixture ends, even on failure.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.master_harness import (
    FakeAgent,
    Scheduler,
    command_task,
    running_master,
)

from mesilla.common.recordio import Decoder
from mesilla.master.main import MasterServer

Json = dict[str, Any]
TIMEOUT = 20


class Stream:
    """An operator event stream (RecordIO), read as the test asks for events."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self._decoder = Decoder()
        self._pending: list[Json] = []

    async def next(self) -> Json:
        while not self._pending:
            chunk = await asyncio.wait_for(self.response.content.readany(), TIMEOUT)
            if not chunk:
                raise EOFError("stream ended")
            self._pending.extend(json.loads(r) for r in self._decoder.feed(chunk))
        return self._pending.pop(0)

    async def next_of(self, *types: str) -> Json:
        """The next event of one of `types`, skipping the others (heartbeats...)."""
        while True:
            event = await self.next()
            if event["type"] in types:
                return event

    def close(self) -> None:
        self.response.close()


class Cluster:
    """A master on a free port, a client session and what the test opened on it."""

    def __init__(self, server: MasterServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session
        self.base = f"http://127.0.0.1:{server.port}"
        self.streams: list[Stream] = []
        self.clients: list[Scheduler | FakeAgent] = []

    async def post(self, path: str, body: Json) -> aiohttp.ClientResponse:
        response = await self.session.post(self.base + path, json=body)
        await response.read()
        return response

    async def subscribe(self) -> tuple[Stream, aiohttp.ClientResponse]:
        response = await self.session.post(self.base + "/api/v1", json={"type": "SUBSCRIBE"})
        assert response.status == 200, await response.text()
        stream = Stream(response)
        self.streams.append(stream)
        return stream, response

    async def call(self, call_type: str, **fields: Any) -> Json:
        response = await self.post("/api/v1", {"type": call_type, **fields})
        assert response.status == 200, await response.text()
        answer: Json = await response.json()
        return answer

    async def get(self, path: str) -> Json:
        async with self.session.get(self.base + path) as response:
            assert response.status == 200, await response.text()
            body: Json = await response.json()
            return body

    def agent(self) -> FakeAgent:
        agent = FakeAgent(self.session, self.base, cpus=4, mem=4096)
        self.clients.append(agent)
        return agent

    def scheduler(self) -> Scheduler:
        scheduler = Scheduler(self.session, self.base)
        self.clients.append(scheduler)
        return scheduler

    async def close(self) -> None:
        for stream in self.streams:
            stream.close()
        for client in self.clients:
            if isinstance(client, Scheduler):
                await client.close()
            else:
                await client.disconnect()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with running_master(tmp_path, "--registry=in_memory") as server, aiohttp.ClientSession() as session:
        c = Cluster(server, session)
        try:
            yield c
        finally:
            await c.close()


async def running_task(cluster: Cluster) -> tuple[FakeAgent, Scheduler]:
    """An agent, a framework and its task `t1` (1 cpu, 128 mem), reported TASK_RUNNING."""
    agent = cluster.agent()
    await agent.register()
    scheduler = cluster.scheduler()
    await scheduler.subscribe()
    offer = await scheduler.offer()
    response = await scheduler.launch(offer, command_task("t1", offer["agent_id"], cpus=1, mem=128))
    assert response.status == 202, await response.text()
    await agent.next_event("RUN_TASK")
    assert scheduler.framework_id is not None
    await agent.send_status(scheduler.framework_id, "t1", "TASK_RUNNING", timestamp=1000.0)
    assert (await scheduler.update("t1"))["state"] == "TASK_RUNNING"
    return agent, scheduler


def agent_id(agent: FakeAgent) -> str:
    assert agent.agent_id is not None
    value: str = agent.agent_id["value"]
    return value
