"""The master's health checks of agents through its HTTP APIs: PING on the agent's stream,
PONG as an agent call, and a hung agent (stream open, pings unanswered) marked unreachable."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from tests.integration.master_harness import (
    PARTITION_AWARE,
    Scheduler,
    agent_and_scheduler,
    base_url,
    command_task,
    reported_task,
    running_master,
    running_task,
    until,
)

pytestmark = pytest.mark.integration

MAX_PINGS = 3
SHORT_PINGS = ("--agent_ping_timeout=50ms", f"--max_agent_ping_timeouts={MAX_PINGS}")


async def test_an_agent_that_pongs_stays_registered(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    # Pings less short: three PONGs in a row late would fail the test.
    pings = ("--agent_ping_timeout=100ms", f"--max_agent_ping_timeouts={MAX_PINGS}")
    async with running_master(tmp_path, *pings) as server:
        agent, scheduler = await agent_and_scheduler(session, server)
        await until(lambda: agent.pongs >= 3 * MAX_PINGS, "pongs")
        agent_id = agent.agent_id["value"]  # type: ignore[index]
        assert server.master.agents[agent_id].connected
        assert agent_id not in server.master.unreachable_agents
        await scheduler.close()
        await agent.disconnect()


async def test_a_pong_on_another_stream_is_refused(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with running_master(tmp_path) as server:
        agent, scheduler = await agent_and_scheduler(session, server)
        response = await session.post(
            f"{base_url(server)}/internal/agent",
            json={"type": "PONG", "agent_id": agent.agent_id},
            headers={"Mesos-Stream-Id": "not-the-stream"},
        )
        assert response.status == 403, await response.text()
        await scheduler.close()
        await agent.disconnect()


async def test_a_hung_agent_becomes_unreachable_and_comes_back(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with running_master(tmp_path, *SHORT_PINGS) as server:
        agent, aware = await agent_and_scheduler(session, server, PARTITION_AWARE)
        await running_task(aware, agent, "aware-task")
        plain = Scheduler(session, base_url(server))
        await plain.subscribe()
        await running_task(plain, agent, "plain-task")
        agent_id = agent.agent_id["value"]  # type: ignore[index]

        agent.answer_pings = False  # its stream stays open: only the pings tell
        unreachable = await aware.update("aware-task")
        assert unreachable["state"] == "TASK_UNREACHABLE"
        assert unreachable["reason"] == "REASON_AGENT_REMOVED"
        assert unreachable["source"] == "SOURCE_MASTER"
        assert (await plain.update("plain-task"))["state"] == "TASK_LOST"
        # After the tasks' updates, every framework hears the agent is lost (slaveLost), as Mesos.
        for scheduler in (aware, plain):
            failure = await scheduler.next_event("FAILURE", skip=("HEARTBEAT", "OFFERS", "RESCIND"))
            assert failure["failure"] == {"agent_id": {"value": agent_id}}
        assert agent.stream is not None and await agent.stream.ended()
        # At least: a PONG that comes late (a loaded machine) also covers the next ping.
        assert agent.pings - agent.pongs >= MAX_PINGS
        response = await session.post(
            f"{base_url(server)}/api/v1", json={"type": "GET_AGENTS"}
        )
        assert (await response.json())["get_agents"].get("agents", []) == []
        state = await (await session.get(f"{base_url(server)}/state")).json()
        assert state["unreachable_slaves"] == 1

        agent.answer_pings = True
        task = reported_task(
            "aware-task",
            aware.framework_id,
            agent.agent_id,
            resources=command_task("x", agent.agent_id)["resources"],
        )
        assert (await agent.register(tasks=[task]))["type"] == "REGISTERED"
        back = await aware.update("aware-task")
        assert back["state"] == "TASK_RUNNING"
        assert back["reason"] == "REASON_AGENT_REREGISTERED"
        assert agent_id in server.master.agents
        assert agent_id not in server.master.unreachable_agents
        for scheduler in (aware, plain):
            await scheduler.close()
        await agent.disconnect()


async def test_tasks_asked_of_a_returning_agent_are_asked_again_until_it_answers(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """A task its agent, back from unreachable, does not report leaves the master and is asked
    of the agent; an agent that dies before it answers is asked again when it returns (the
    chaos soak's seed 205 saw such a task never reach an end)."""
    async with running_master(tmp_path, *SHORT_PINGS) as server:
        agent, aware = await agent_and_scheduler(session, server, PARTITION_AWARE)
        await running_task(aware, agent, "lost-launch")
        agent.answer_pings = False
        assert (await aware.update("lost-launch"))["state"] == "TASK_UNREACHABLE"
        await aware.next_event("FAILURE", skip=("HEARTBEAT", "OFFERS", "RESCIND"))
        assert agent.stream is not None and await agent.stream.ended()
        agent.answer_pings = True

        asked = {"framework_id": {"value": aware.framework_id}, "task_ids": [{"value": "lost-launch"}]}
        for _ in range(2):  # back without the task, then dead before it answers, then back again
            assert (await agent.register())["type"] == "REGISTERED"
            ask = (await agent.next_event("RECONCILE_TASKS"))["reconcile_tasks"]
            assert {k: ask[k] for k in asked} == asked
            await agent.disconnect()

        assert (await agent.register())["type"] == "REGISTERED"
        await agent.next_event("RECONCILE_TASKS")
        await agent.send_status(
            aware.framework_id or "", "lost-launch", "TASK_DROPPED",
            source="SOURCE_AGENT", reason="REASON_RECONCILIATION",
        )  # fmt: skip
        assert (await aware.update("lost-launch"))["state"] == "TASK_DROPPED"
        assert server.master.book.asked_tasks == {}  # answered: not asked again
        await aware.close()
        await agent.disconnect()
