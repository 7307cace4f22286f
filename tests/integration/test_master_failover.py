"""Failures through an in-process master: framework failover and teardown, agents that
disconnect, become unreachable and re-register, and a master restart that recovers its registry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from tests.integration.master_harness import (
    PARTITION_AWARE,
    FakeAgent,
    Scheduler,
    agent_and_scheduler,
    base_url,
    command_task,
    new_uuid,
    reported_task,
    running_master,
    running_task,
    until,
)

from mesilla.master.main import MasterServer

pytestmark = pytest.mark.integration


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[MasterServer]:
    async with running_master(tmp_path) as server:
        yield server


async def test_failover_within_timeout_keeps_tasks(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    agent, first = await agent_and_scheduler(
        session, server, {"failover_timeout": 3600}
    )
    await running_task(first, agent)

    second = Scheduler(session, base_url(server))
    event = await second.subscribe(
        {"failover_timeout": 3600, "id": {"value": first.framework_id}}
    )
    assert event["type"] == "SUBSCRIBED"
    assert second.framework_id == first.framework_id
    error = await first.next_event("ERROR", skip=("HEARTBEAT", "OFFERS", "RESCIND"))
    assert error["error"]["message"] == "Framework failed over"
    assert first.stream is not None and await first.stream.ended()
    # The old stream id is dead, the new one works, and the task survived.
    assert (await first.call("REVIVE", {})).status == 403
    await second.call("RECONCILE", {"tasks": [{"task_id": {"value": "t"}}]})
    assert (await second.update("t"))["state"] == "TASK_RUNNING"
    await second.close()
    await agent.disconnect()


async def test_disconnected_framework_is_removed_after_its_failover_timeout(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    agent, scheduler = await agent_and_scheduler(
        session, server, {"failover_timeout": 0.2}
    )
    await running_task(scheduler, agent)
    await scheduler.close()
    shutdown = await agent.next_event("SHUTDOWN_FRAMEWORK")
    assert (
        shutdown["shutdown_framework"]["framework_id"]["value"]
        == scheduler.framework_id
    )
    completed = [
        f for f in server.master.completed_frameworks if f.id == scheduler.framework_id
    ]
    assert completed and completed[0].completed_tasks[0].state.value == "TASK_KILLED"

    again = Scheduler(session, base_url(server))
    event = await again.subscribe({"id": {"value": scheduler.framework_id}})
    assert event["type"] == "ERROR"
    assert event["error"]["message"] == "Framework has been removed"
    # Updates for the removed framework are acknowledged so the agent stops retrying.
    await agent.send_status(scheduler.framework_id or "", "t", "TASK_KILLED")
    await agent.next_event("ACKNOWLEDGE")
    await agent.disconnect()


async def test_teardown_kills_tasks_and_ends_the_stream(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    agent, scheduler = await agent_and_scheduler(
        session, server, {"failover_timeout": 3600}
    )
    await running_task(scheduler, agent)
    assert (await scheduler.call("TEARDOWN")).status == 202
    assert scheduler.stream is not None and await scheduler.stream.ended()
    await agent.next_event("SHUTDOWN_FRAMEWORK")
    assert scheduler.framework_id not in server.master.frameworks
    assert server.master.allocator.allocation(scheduler.framework_id or "") == {}
    response = await scheduler.call("REVIVE", {})
    assert response.status == 400
    await agent.disconnect()


async def test_disconnected_agent_becomes_unreachable_and_comes_back(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with running_master(
        tmp_path, "--agent_ping_timeout=50ms", "--max_agent_ping_timeouts=2"
    ) as server:
        # Checkpointing frameworks: the tasks of others are lost at the disconnection.
        agent, aware = await agent_and_scheduler(session, server, {**PARTITION_AWARE, "checkpoint": True})
        await running_task(aware, agent, "aware-task")
        plain = Scheduler(session, base_url(server))
        await plain.subscribe({"checkpoint": True})
        await running_task(plain, agent, "plain-task")

        await agent.disconnect()
        unreachable = await aware.update("aware-task")
        assert unreachable["state"] == "TASK_UNREACHABLE"
        assert unreachable["reason"] == "REASON_AGENT_REMOVED"
        assert unreachable["unreachable_time"]["nanoseconds"] > 0
        lost = await plain.update("plain-task")
        assert lost["state"] == "TASK_LOST"
        agent_id = agent.agent_id["value"]  # type: ignore[index]
        lost_agent = await aware.next_event("FAILURE", skip=("HEARTBEAT", "OFFERS", "RESCIND"))
        assert lost_agent["failure"] == {"agent_id": {"value": agent_id}}
        assert (
            agent_id in server.master.unreachable_agents
            and agent_id not in server.master.agents
        )
        framework = server.master.frameworks[aware.framework_id or ""]
        assert "aware-task" in framework.unreachable_tasks

        task = reported_task(
            "aware-task",
            aware.framework_id,
            agent.agent_id,
            resources=command_task("x", agent.agent_id)["resources"],
        )
        event = await agent.register(tasks=[task])
        assert event["type"] == "REGISTERED"
        assert "aware-task" in framework.tasks and not framework.unreachable_tasks
        assert framework.tasks["aware-task"].state.value == "TASK_RUNNING"
        assert (
            agent_id in server.master.agents
            and agent_id not in server.master.unreachable_agents
        )
        await aware.call("RECONCILE", {"tasks": [{"task_id": {"value": "aware-task"}}]})
        assert (await aware.update("aware-task"))["state"] == "TASK_RUNNING"
        for scheduler in (aware, plain):
            await scheduler.close()
        await agent.disconnect()


async def test_disconnected_agent_offers_are_rescinded(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    agent, scheduler = await agent_and_scheduler(session, server)
    offer = await scheduler.offer()
    await agent.disconnect()
    rescind = await scheduler.next_event("RESCIND")
    assert rescind["rescind"]["offer_id"] == offer["id"]
    assert not server.master.offers
    await scheduler.close()


async def test_reregistering_agent_reconciles_tasks_it_does_not_know(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    agent, scheduler = await agent_and_scheduler(session, server, {"checkpoint": True})
    await running_task(scheduler, agent)
    await agent.disconnect()
    await until(
        lambda: not server.master.agents[agent.agent_id["value"]].connected,
        "disconnection",
    )  # type: ignore[index]
    await agent.register(tasks=[])
    # As Mesos, the master asks the agent, which answers for the tasks it does not know
    # with a reliable update of its own (a uuid, acknowledged), rather than inventing one.
    reconcile = (await agent.next_event("RECONCILE_TASKS"))["reconcile_tasks"]
    assert reconcile["framework_id"]["value"] == scheduler.framework_id
    assert reconcile["task_ids"] == [{"value": "t"}]
    assert reconcile["framework_info"]["id"]["value"] == scheduler.framework_id
    assert server.master.frameworks[scheduler.framework_id or ""].tasks["t"].state.value == "TASK_RUNNING"
    sent = await agent.send_status(
        scheduler.framework_id or "", "t", "TASK_LOST", source="SOURCE_AGENT",
        reason="REASON_RECONCILIATION", message="Reconciliation: task unknown to the agent",
    )  # fmt: skip
    status = await scheduler.update("t")
    assert status["state"] == "TASK_LOST" and status["reason"] == "REASON_RECONCILIATION"
    assert status["uuid"] == sent
    ack_call = {"agent_id": agent.agent_id, "task_id": {"value": "t"}, "uuid": sent}
    assert (await scheduler.call("ACKNOWLEDGE", ack_call)).status == 202
    ack = (await agent.next_event("ACKNOWLEDGE"))["acknowledge"]
    assert ack["task_id"]["value"] == "t" and ack["uuid"] == sent
    await until(
        lambda: "t" not in server.master.frameworks[scheduler.framework_id or ""].tasks,
        "the task gone from the master",
    )
    await scheduler.close()
    await agent.disconnect()


async def test_one_status_update_call_carries_many_updates_in_order(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    agent, scheduler = await agent_and_scheduler(session, server)
    assert agent.stream is not None
    offer = await scheduler.offer()
    tasks = [command_task(f"t{i}", offer["agent_id"]) for i in range(3)]
    assert (await scheduler.launch(offer, *tasks)).status == 202
    for _ in tasks:
        await agent.next_event("RUN_TASK")
    framework_id = {"value": scheduler.framework_id}
    updates = [
        {
            "framework_id": framework_id,
            "status": {
                "task_id": {"value": task_id},
                "state": state,
                "uuid": new_uuid(),
                "source": "SOURCE_EXECUTOR",
                "agent_id": agent.agent_id,
            },
        }
        for task_id, state in [("t0", "TASK_RUNNING"), ("t1", "TASK_RUNNING"), ("t0", "TASK_FINISHED")]
    ]
    url, headers = f"{base_url(server)}/internal/agent", {"Mesos-Stream-Id": agent.stream.stream_id or ""}
    # One update in `status_update`, the rest in `status_updates`: all applied, in order.
    call = {
        "type": "STATUS_UPDATE",
        "agent_id": agent.agent_id,
        "status_update": updates[0],
        "status_updates": updates[1:],
    }
    async with session.post(url, json=call, headers=headers) as r:
        assert r.status == 202, await r.text()
    statuses = [await scheduler.update(task_id) for task_id in ("t0", "t1", "t0")]
    seen = [(status["task_id"]["value"], status["state"]) for status in statuses]
    assert seen == [("t0", "TASK_RUNNING"), ("t1", "TASK_RUNNING"), ("t0", "TASK_FINISHED")]
    tasks_now = server.master.frameworks[scheduler.framework_id or ""].tasks
    assert tasks_now["t0"].state.value == "TASK_FINISHED" and tasks_now["t1"].state.value == "TASK_RUNNING"
    assert tasks_now["t2"].state.value == "TASK_STAGING"
    # A batched update without a uuid is refused whole, naming it.
    del updates[1]["status"]["uuid"]
    call = {"type": "STATUS_UPDATE", "agent_id": agent.agent_id, "status_updates": updates[1:2]}
    async with session.post(url, json=call, headers=headers) as r:
        assert r.status == 400 and "status_updates[0].status.uuid" in await r.text()
    await scheduler.close()
    await agent.disconnect()


async def test_agent_api_status_codes(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    url = f"{base_url(server)}/internal/agent"
    bad_resources = {
        "type": "REGISTER",
        "register": {
            "agent_info": {
                "hostname": "h",
                "resources": [{"name": "cpus", "type": "SCALAR"}],
            }
        },
    }
    async with session.post(url, json=bad_resources) as r:
        assert r.status == 400 and "cpus" in await r.text()
    unknown = {
        "type": "STATUS_UPDATE",
        "agent_id": {"value": "nobody"},
        "status_update": {
            "framework_id": {"value": "f"},
            "status": {
                "task_id": {"value": "t"},
                "state": "TASK_RUNNING",
                "uuid": "AAAA",
            },
        },
    }
    async with session.post(url, json=unknown) as r:
        assert r.status == 403
    agent = FakeAgent(session, base_url(server))
    await agent.register()
    unknown["agent_id"] = agent.agent_id
    async with session.post(
        url, json=unknown, headers={"Mesos-Stream-Id": "stale"}
    ) as r:
        assert r.status == 403 and "re-register" in await r.text()
    no_uuid = {
        "type": "STATUS_UPDATE",
        "agent_id": agent.agent_id,
        "status_update": {
            "framework_id": {"value": "f"},
            "status": {"task_id": {"value": "t"}, "state": "TASK_RUNNING"},
        },
    }
    async with session.post(url, json=no_uuid) as r:
        assert r.status == 400 and "uuid" in await r.text()
    async with session.post(url, json={"type": "STATUS_UPDATE"}) as r:
        assert r.status == 400 and "status_update" in await r.text()
    await agent.disconnect()


async def test_restarted_master_recovers_agents_and_frameworks(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with running_master(tmp_path) as server:
        agent, scheduler = await agent_and_scheduler(
            session, server, {"failover_timeout": 3600, "name": "survivor"}
        )
        await running_task(scheduler, agent)
        await scheduler.close()
        await agent.disconnect()
    framework_id = scheduler.framework_id or ""
    agent_id = agent.agent_id["value"]  # type: ignore[index]

    async with running_master(tmp_path) as server:
        master = server.master
        assert agent_id in master.recovered_agents
        assert master.frameworks[framework_id].recovered
        assert master.frameworks[framework_id].info.name == "survivor"
        # While the agent has not re-registered, reconciliation of its tasks waits.
        agent = FakeAgent(session, base_url(server))
        agent.agent_id = {"value": agent_id}
        task = reported_task(
            "t",
            framework_id,
            agent.agent_id,
            resources=command_task("x", agent.agent_id)["resources"],
        )
        await agent.register(
            tasks=[task],
            frameworks=[
                {"user": "root", "name": "survivor", "id": {"value": framework_id}}
            ],
        )
        assert agent_id in master.agents and agent_id not in master.recovered_agents
        again = Scheduler(session, base_url(server))
        event = await again.subscribe(
            {
                "failover_timeout": 3600,
                "name": "survivor",
                "id": {"value": framework_id},
            }
        )
        assert event["type"] == "SUBSCRIBED"
        assert not master.frameworks[framework_id].recovered
        await again.call("RECONCILE", {})
        assert (await again.update("t"))["state"] == "TASK_RUNNING"
        # The running task's resources are not offered again.
        offer = await again.offer()
        cpus = {r["name"]: r["scalar"]["value"] for r in offer["resources"]}["cpus"]
        assert cpus == pytest.approx(1.9)
        await again.close()
        await agent.disconnect()


async def test_agents_that_do_not_reregister_become_unreachable(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with running_master(tmp_path) as server:
        agent = FakeAgent(session, base_url(server))
        await agent.register()
        await agent.disconnect()
    agent_id = agent.agent_id["value"]  # type: ignore[index]
    async with running_master(tmp_path, "--agent_reregister_timeout=100ms") as server:
        await until(
            lambda: agent_id in server.master.unreachable_agents,
            "the agent to be unreachable",
        )
        assert agent_id not in server.master.recovered_agents
    async with running_master(tmp_path) as server:
        assert agent_id in server.master.unreachable_agents


async def test_reregistering_agent_is_told_to_shut_down_removed_frameworks(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    agent, scheduler = await agent_and_scheduler(session, server)
    await running_task(scheduler, agent)
    await agent.disconnect()
    await scheduler.call("TEARDOWN")
    task = reported_task("t", scheduler.framework_id, agent.agent_id)
    await agent.register(tasks=[task])
    shutdown = await agent.next_event("SHUTDOWN_FRAMEWORK")
    assert (
        shutdown["shutdown_framework"]["framework_id"]["value"]
        == scheduler.framework_id
    )
    assert scheduler.framework_id not in server.master.frameworks
    await scheduler.close()
    await agent.disconnect()


async def test_agent_marked_gone_is_shut_down_and_its_tasks_are_gone(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    agent, scheduler = await agent_and_scheduler(session, server, PARTITION_AWARE)
    await running_task(scheduler, agent)
    agent_id = agent.agent_id["value"]  # type: ignore[index]
    await server.master.mark_agent_gone(agent_id)
    assert (await agent.next_event("SHUTDOWN"))["shutdown"]["message"]
    status = await scheduler.update("t")
    assert status["state"] == "TASK_GONE_BY_OPERATOR"
    assert status["reason"] == "REASON_AGENT_REMOVED_BY_OPERATOR"
    assert (
        agent_id in server.master.gone_agents and agent_id not in server.master.agents
    )
    again = await agent.register()
    assert again["type"] == "SHUTDOWN"
    await scheduler.close()
    await agent.disconnect()


async def test_roles_flag_limits_the_roles_frameworks_may_use(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with running_master(tmp_path, "--roles=web") as server:
        denied = Scheduler(session, base_url(server))
        event = await denied.subscribe({"role": "batch"})
        assert event["type"] == "ERROR" and "--roles" in event["error"]["message"]
        allowed = Scheduler(session, base_url(server))
        assert (await allowed.subscribe({"role": "web"}))["type"] == "SUBSCRIBED"
        await allowed.close()
        await denied.close()


async def test_unregistering_agent_takes_its_tasks_with_it(
    session: aiohttp.ClientSession, server: MasterServer
) -> None:
    agent, scheduler = await agent_and_scheduler(session, server, PARTITION_AWARE)
    await running_task(scheduler, agent)
    response = await agent.session.post(
        agent.url,
        json={"type": "UNREGISTER", "agent_id": agent.agent_id},
        headers={"Mesos-Stream-Id": agent.stream.stream_id if agent.stream else ""},
    )
    assert response.status == 202
    status = await scheduler.update("t")
    assert status["state"] == "TASK_LOST" and status["reason"] == "REASON_AGENT_REMOVED"
    agent_id = agent.agent_id["value"]  # type: ignore[index]
    assert agent_id not in server.master.agents
    assert agent_id not in (await server.master.registry.recover()).agents
    assert agent.stream is not None and await agent.stream.ended()
    await scheduler.close()
