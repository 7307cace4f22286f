"""Clients for testing the master in-process through its HTTP APIs.

`Scheduler` speaks the v1 scheduler API as a framework does; `FakeAgent`
speaks the internal agent protocol (`mesilla.v1.internal`) as an agent does,
answering the master's PINGs, without running anything: it is a fake below the
interface under test, the master. Both read their event streams in the background into queues, and
`next_event` waits (bounded) for the next event of a given type.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from mesilla.common import recordio
from mesilla.common.flags import parse
from mesilla.master.main import MASTER_FLAGS, MasterServer, serve

Json = dict[str, Any]

# Upper bound on waiting for an event; tests never assert on timing.
EVENT_TIMEOUT = 10.0

# FrameworkInfo fields of a framework that handles TASK_UNREACHABLE and friends.
PARTITION_AWARE: Json = {"capabilities": [{"type": "PARTITION_AWARE"}]}


@asynccontextmanager
async def running_master(work_dir: Path, *extra: str) -> AsyncIterator[MasterServer]:
    flags = parse(
        MASTER_FLAGS,
        [f"--work_dir={work_dir}", "--port=0", "--allocation_interval=50ms", *extra],
        environ={},
    )
    async with serve(flags) as server:
        yield server


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Waits (bounded) for state that changes in the background."""

    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), EVENT_TIMEOUT)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def base_url(server: MasterServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def scalar(name: str, value: float) -> Json:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


def new_uuid() -> str:
    return base64.b64encode(uuid.uuid4().bytes).decode()


class _Stream:
    """A RecordIO event stream read in the background; `intercept` (if given) sees each
    event first and keeps it out of `events` by returning True."""

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        intercept: Callable[[_Stream, Json], Awaitable[bool]] | None = None,
    ) -> None:
        self.response = response
        self.stream_id = response.headers.get("Mesos-Stream-Id")
        self.events: asyncio.Queue[Json | None] = asyncio.Queue()
        self._intercept = intercept
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        decoder = recordio.Decoder()
        try:
            async for chunk in self.response.content.iter_any():
                for record in decoder.feed(chunk):
                    event = json.loads(record)
                    if self._intercept is None or not await self._intercept(self, event):
                        await self.events.put(event)
        except (aiohttp.ClientError, asyncio.CancelledError):
            pass
        finally:
            await self.events.put(None)

    async def next_event(
        self, *types: str, skip: tuple[str, ...] = ("HEARTBEAT",)
    ) -> Json:
        """The next event (of one of `types` if given, skipping others in `skip`)."""
        while True:
            event = await asyncio.wait_for(self.events.get(), EVENT_TIMEOUT)
            if event is None:
                raise ConnectionError("the stream ended")
            if types and event["type"] not in types:
                if event["type"] in skip or skip == ("*",):
                    continue
                raise AssertionError(f"expected one of {types}, got {event}")
            if not types and event["type"] in skip:
                continue
            return event

    async def ended(self) -> bool:
        """True once the master closes the stream (bounded wait)."""
        while True:
            event = await asyncio.wait_for(self.events.get(), EVENT_TIMEOUT)
            if event is None:
                return True

    async def close(self) -> None:
        self._reader.cancel()
        self.response.close()
        await asyncio.gather(self._reader, return_exceptions=True)


class _Subscriber:
    """A client whose event stream is open after it subscribes (or registers)."""

    stream: _Stream | None = None

    async def next_event(
        self, *types: str, skip: tuple[str, ...] = ("HEARTBEAT",)
    ) -> Json:
        assert self.stream is not None
        return await self.stream.next_event(*types, skip=skip)


class Scheduler(_Subscriber):
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.url = f"{base}/api/v1/scheduler"
        self.framework_id: str | None = None
        # Offers that arrived while a test waited for something else.
        self.pending_offers: list[Json] = []

    async def subscribe(
        self, framework_info: Json | None = None, **subscribe: Any
    ) -> Json:
        info = {"user": "root", "name": "test-framework", **(framework_info or {})}
        call: Json = {
            "type": "SUBSCRIBE",
            "subscribe": {"framework_info": info, **subscribe},
        }
        if "id" in info:
            call["framework_id"] = info["id"]
        response = await self.session.post(self.url, json=call)
        assert response.status == 200, await response.text()
        self.stream = _Stream(response)
        event = await self.stream.next_event()
        if event["type"] == "SUBSCRIBED":
            self.framework_id = event["subscribed"]["framework_id"]["value"]
        return event

    async def call(
        self, type_: str, body: Json | None = None, *, stream_id: str | None = None
    ) -> aiohttp.ClientResponse:
        assert self.stream is not None
        call: Json = {"type": type_, "framework_id": {"value": self.framework_id}}
        if body is not None:
            call[type_.lower()] = body
        headers = {"Mesos-Stream-Id": stream_id or self.stream.stream_id or ""}
        response = await self.session.post(self.url, json=call, headers=headers)
        await response.read()
        return response

    async def offer(self) -> Json:
        if self.pending_offers:
            return self.pending_offers.pop(0)
        event = await self.next_event("OFFERS")
        offer: Json = event["offers"]["offers"][0]
        return offer

    async def update(self, task_id: str | None = None) -> Json:
        while True:
            event = await self.next_event(
                "UPDATE", "OFFERS", skip=("HEARTBEAT", "RESCIND")
            )
            if event["type"] == "OFFERS":
                self.pending_offers.extend(event["offers"]["offers"])
                continue
            status: Json = event["update"]["status"]
            if task_id is None or status["task_id"]["value"] == task_id:
                return status

    async def launch(
        self, offer: Json, *tasks: Json, filters: Json | None = None
    ) -> aiohttp.ClientResponse:
        accept: Json = {
            "offer_ids": [offer["id"]],
            "operations": [{"type": "LAUNCH", "launch": {"task_infos": list(tasks)}}],
        }
        if filters is not None:
            accept["filters"] = filters
        return await self.call("ACCEPT", accept)

    async def close(self) -> None:
        if self.stream is not None:
            await self.stream.close()


def command_task(
    task_id: str, agent_id: Json, cpus: float = 0.1, mem: float = 32, **extra: Any
) -> Json:
    return {
        "name": task_id,
        "task_id": {"value": task_id},
        "agent_id": agent_id,
        "resources": [scalar("cpus", cpus), scalar("mem", mem)],
        "command": {"value": "sleep 1000"},
        **extra,
    }


class FakeAgent(_Subscriber):
    """Speaks the agent side of `mesilla.v1.internal`; runs nothing."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base: str,
        *,
        cpus: float = 2,
        mem: float = 1024,
        disk: float = 1024,
        hostname: str = "agent.test",
    ) -> None:
        self.session = session
        self.url = f"{base}/internal/agent"
        self.resources = [
            scalar("cpus", cpus),
            scalar("mem", mem),
            scalar("disk", disk),
        ]
        self.hostname = hostname
        self.agent_id: Json | None = None
        #: False: PINGs go unanswered, as from a hung agent whose stream stays open.
        self.answer_pings = True
        self.pings = 0
        #: PONGs the master accepted.
        self.pongs = 0

    async def register(
        self, *, tasks: list[Json] | None = None, frameworks: list[Json] | None = None
    ) -> Json:
        info: Json = {
            "hostname": self.hostname,
            "port": 5051,
            "resources": self.resources,
        }
        if self.agent_id is not None:
            info["id"] = self.agent_id
        body: Json = {"agent_info": info, "version": "1.11.0"}
        if tasks:
            body["tasks"] = tasks
        if frameworks:
            body["frameworks"] = frameworks
        response = await self.session.post(
            self.url, json={"type": "REGISTER", "register": body}
        )
        assert response.status == 200, await response.text()
        self.stream = _Stream(response, self._intercept)
        return await self.stream.next_event()

    async def _intercept(self, stream: _Stream, event: Json) -> bool:
        """Learns the agent id from REGISTERED here: the first PING may follow in the same read."""
        if event["type"] == "REGISTERED":
            self.agent_id = event["registered"]["agent_id"]
            return False
        if event["type"] != "PING":
            return False
        self.pings += 1
        if self.answer_pings:
            response = await self.session.post(
                self.url,
                json={"type": "PONG", "agent_id": self.agent_id},
                headers={"Mesos-Stream-Id": stream.stream_id or ""},
            )
            await response.read()
            self.pongs += response.status == 202
        return True

    async def call(self, type_: str, body: Json) -> aiohttp.ClientResponse:
        assert self.stream is not None
        call = {"type": type_, "agent_id": self.agent_id, type_.lower(): body}
        response = await self.session.post(
            self.url,
            json=call,
            headers={"Mesos-Stream-Id": self.stream.stream_id or ""},
        )
        await response.read()
        return response

    async def send_status(
        self, framework_id: str, task_id: str, state: str, **extra: Any
    ) -> str:
        """Sends a STATUS_UPDATE as the agent's status update manager would; returns its uuid."""
        status_uuid = new_uuid()
        status = {
            "task_id": {"value": task_id},
            "state": state,
            "uuid": status_uuid,
            "source": "SOURCE_EXECUTOR",
            "agent_id": self.agent_id,
            **extra,
        }
        response = await self.call(
            "STATUS_UPDATE", {"framework_id": {"value": framework_id}, "status": status}
        )
        assert response.status == 202, await response.text()
        return status_uuid

    async def disconnect(self) -> None:
        if self.stream is not None:
            await self.stream.close()
            self.stream = None


async def agent_and_scheduler(
    session: aiohttp.ClientSession,
    server: MasterServer,
    framework_info: Json | None = None,
) -> tuple[FakeAgent, Scheduler]:
    """A registered agent, then a subscribed scheduler (so its first offer is the agent's)."""
    agent = FakeAgent(session, base_url(server))
    await agent.register()
    scheduler = Scheduler(session, base_url(server))
    await scheduler.subscribe(framework_info)
    return agent, scheduler


def reported_task(
    task_id: str, framework_id: str | None, agent_id: Json | None, **extra: Any
) -> Json:
    """A running task as a re-registering agent reports it in REGISTER's `tasks`."""
    return {
        "name": task_id,
        "task_id": {"value": task_id},
        "framework_id": {"value": framework_id},
        "agent_id": agent_id,
        "state": "TASK_RUNNING",
        **extra,
    }


async def running_task(
    scheduler: Scheduler, agent: FakeAgent, task_id: str = "t"
) -> None:
    """Launches a command task on the next offer; the agent reports it TASK_RUNNING."""
    offer = await scheduler.offer()
    await scheduler.launch(offer, command_task(task_id, offer["agent_id"]))
    await agent.next_event("RUN_TASK")
    await agent.send_status(scheduler.framework_id or "", task_id, "TASK_RUNNING")
    await scheduler.update(task_id)
