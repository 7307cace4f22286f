"""While the agent recovers, its APIs answer 503 "Agent has not finished recovery" (as Mesos)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from mesilla.agent import agent_api, container_api, endpoints, executor_api
from mesilla.agent.agent import Agent, AgentStatus
from mesilla.agent.flags import AgentFlags
from mesilla.agent.main import AGENT_FLAGS
from mesilla.common.flags import parse
from mesilla.common.http import Router, make_app
from mesilla.v1.mesos import AgentInfo


class NoContainers:
    """A containerizer with nothing in it (below the interface under test)."""

    def containers(self) -> list[Any]:
        return []


@pytest.fixture
async def agent(tmp_path: Any) -> AsyncIterator[Agent]:
    flags = parse(AGENT_FLAGS, ["--master=127.0.0.1:1", f"--work_dir={tmp_path}"], environ={})
    agent = Agent(AgentFlags.from_flags(flags), NoContainers(), AgentInfo(hostname="h"))
    yield agent
    await agent.close()


@pytest.fixture
async def client(agent: Agent) -> AsyncIterator[TestClient]:
    assert agent.status is AgentStatus.RECOVERING
    router = Router("slave(1)")
    executor_api.install(router, agent)
    container_api.install(agent_api.install(router, agent, agent.files), agent)
    endpoints.install(router, agent)
    async with TestClient(TestServer(make_app(router))) as c:
        yield c


@pytest.mark.parametrize("call", ["GET_STATE", "GET_TASKS", "GET_CONTAINERS", "GET_AGENT"])
async def test_state_calls_wait_for_recovery(client: TestClient, call: str) -> None:
    r = await client.post("/api/v1", json={"type": call})
    assert r.status == 503 and "Agent has not finished recovery" in await r.text()


async def test_health_version_and_flags_answer_at_once(client: TestClient) -> None:
    for call in ("GET_HEALTH", "GET_VERSION", "GET_FLAGS"):
        assert (await client.post("/api/v1", json={"type": call})).status == 200
    assert (await client.get("/state")).status == 503
    assert (await client.get("/health")).status == 200


async def test_executors_may_only_resubscribe(client: TestClient, agent: Agent) -> None:
    ids = {"framework_id": {"value": "f"}, "executor_id": {"value": "e"}}
    r = await client.post(
        "/api/v1/executor", json={**ids, "type": "MESSAGE", "message": {"data": ""}}
    )
    assert r.status == 503
    # A SUBSCRIBE is held until recovery knows the executors, then answered.
    subscribe = asyncio.create_task(
        client.post("/api/v1/executor", json={**ids, "type": "SUBSCRIBE", "subscribe": {}})
    )
    await asyncio.sleep(0.2)
    assert not subscribe.done()
    agent.executors_recovered.set()
    r = await subscribe
    assert r.status == 400 and "Framework cannot be found" in await r.text()
