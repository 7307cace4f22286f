"""Offers, launches, status updates, kills and reconciliation through an in-process master."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.master_harness import (
    PARTITION_AWARE,
    FakeAgent,
    Scheduler,
    agent_and_scheduler,
    base_url,
    command_task,
    running_master,
    running_task,
    scalar,
)

from mesilla.master.main import MasterServer

pytestmark = pytest.mark.integration


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[MasterServer]:
    async with running_master(tmp_path, "--offer_timeout=1hrs") as server:
        yield server


@pytest.fixture
async def cluster(
    master: MasterServer, session: aiohttp.ClientSession
) -> AsyncIterator[tuple[Scheduler, FakeAgent]]:
    agent, scheduler = await agent_and_scheduler(session, master)
    yield scheduler, agent
    await scheduler.close()
    await agent.disconnect()


async def test_offer_has_the_agents_resources_and_address(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    assert offer["framework_id"]["value"] == scheduler.framework_id
    assert offer["agent_id"] == agent.agent_id
    assert offer["hostname"] == "agent.test"
    assert offer["url"] == {
        "scheme": "http",
        "address": {"hostname": "agent.test", "ip": "127.0.0.1", "port": 5051},
        "path": "/slave(1)",
    }
    assert offer["allocation_info"] == {"role": "*"}
    by_name = {r["name"]: r for r in offer["resources"]}
    assert by_name["cpus"]["scalar"]["value"] == 2
    assert by_name["mem"]["allocation_info"] == {"role": "*"}
    assert offer["id"]["value"] in master.master.offers


async def test_launch_update_and_acknowledge(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    task = command_task("t1", offer["agent_id"], data="aGVsbG8=")
    assert (await scheduler.launch(offer, task)).status == 202
    run = (await agent.next_event("RUN_TASK"))["run_task"]
    # Command tasks go without an executor: the agent builds the command executor.
    assert "executor" not in run["task"]
    assert run["task"]["command"]["value"] == "sleep 1000"
    assert run["framework_info"]["id"]["value"] == scheduler.framework_id
    record = master.master.frameworks[scheduler.framework_id or ""].tasks["t1"]
    assert record.state.value == "TASK_STAGING" and record.statuses == []

    running = await agent.send_status(
        scheduler.framework_id or "", "t1", "TASK_RUNNING", data="eA=="
    )
    status = await scheduler.update("t1")
    assert status["state"] == "TASK_RUNNING" and status["uuid"] == running
    assert status["agent_id"] == agent.agent_id
    assert [s.state.value for s in record.statuses] == ["TASK_RUNNING"]
    assert record.statuses[0].data is None  # kept without data, as Mesos does

    assert (
        await scheduler.call(
            "ACKNOWLEDGE",
            {
                "agent_id": agent.agent_id,
                "task_id": {"value": "t1"},
                "uuid": running,
            },
        )
    ).status == 202
    ack = (await agent.next_event("ACKNOWLEDGE"))["acknowledge"]
    assert ack == {
        "framework_id": {"value": scheduler.framework_id},
        "task_id": {"value": "t1"},
        "uuid": running,
    }

    finished = await agent.send_status(
        scheduler.framework_id or "", "t1", "TASK_FINISHED"
    )
    assert (await scheduler.update("t1"))["state"] == "TASK_FINISHED"
    framework = master.master.frameworks[scheduler.framework_id or ""]
    assert "t1" in framework.tasks  # until the terminal update is acknowledged
    await scheduler.call(
        "ACKNOWLEDGE",
        {"agent_id": agent.agent_id, "task_id": {"value": "t1"}, "uuid": finished},
    )
    await agent.next_event("ACKNOWLEDGE")
    assert "t1" not in framework.tasks
    assert [t.task_id.value for t in framework.completed_tasks] == ["t1"]
    assert master.master.counters["master/tasks_finished"] == 1


async def test_acknowledge_with_a_bad_uuid_is_rejected(
    cluster: tuple[Scheduler, FakeAgent],
) -> None:
    scheduler, agent = cluster
    response = await scheduler.call(
        "ACKNOWLEDGE",
        {
            "agent_id": agent.agent_id,
            "task_id": {"value": "t1"},
            "uuid": "AAAA",
        },
    )
    assert response.status == 400
    assert "uuid" in await response.text()


async def test_latest_state_runs_ahead_of_the_forwarded_update(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    await scheduler.launch(offer, command_task("t1", offer["agent_id"]))
    await agent.next_event("RUN_TASK")
    status = {
        "task_id": {"value": "t1"},
        "state": "TASK_RUNNING",
        "uuid": "AAAAAAAAAAAAAAAAAAAAAA==",
    }
    await agent.call(
        "STATUS_UPDATE",
        {
            "framework_id": {"value": scheduler.framework_id},
            "status": status,
            "latest_state": "TASK_FAILED",
        },
    )
    await scheduler.update("t1")
    task = master.master.frameworks[scheduler.framework_id or ""].tasks["t1"]
    assert task.state.value == "TASK_FAILED"
    assert (
        task.status_update_state is not None
        and task.status_update_state.value == "TASK_RUNNING"
    )


async def test_invalid_tasks_get_task_error(
    cluster: tuple[Scheduler, FakeAgent],
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    aid = offer["agent_id"]
    both = command_task(
        "both", aid, executor={"executor_id": {"value": "e"}, "command": {"value": "x"}}
    )
    greedy = command_task("greedy", aid, cpus=100)
    neither = {**command_task("neither", aid)}
    del neither["command"]
    first = command_task("dup", aid)
    dup = command_task("dup", aid)
    empty = {**command_task("empty", aid), "resources": []}
    await scheduler.launch(offer, both, greedy, neither, first, dup, empty)
    errors = {}
    for _ in range(5):
        status = await scheduler.update()
        assert status["state"] == "TASK_ERROR", status
        assert status["reason"] == "REASON_TASK_INVALID"
        assert status["source"] == "SOURCE_MASTER"
        errors[status["task_id"]["value"]] = status["message"]
    assert "not both" in errors["both"] and "not both" in errors["neither"]
    assert "more resources" in errors["greedy"]
    assert "duplicate ID" in errors["dup"]
    assert "no resources" in errors["empty"]
    run = (await agent.next_event("RUN_TASK"))["run_task"]
    assert run["task"]["task_id"]["value"] == "dup"


async def test_invalid_offers_lose_the_tasks(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    scheduler, _ = cluster
    offer = await scheduler.offer()
    stale = {**offer, "id": {"value": "no-such-offer"}}
    await scheduler.launch(stale, command_task("t", offer["agent_id"]))
    status = await scheduler.update("t")
    assert status["state"] == "TASK_LOST"
    assert status["reason"] == "REASON_INVALID_OFFERS"
    assert "no longer valid" in status["message"]


async def test_invalid_offers_drop_tasks_of_partition_aware_frameworks(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    _, agent = cluster
    async with aiohttp.ClientSession() as session:
        scheduler = Scheduler(session, base_url(master))
        await scheduler.subscribe(PARTITION_AWARE)
        offer = {"id": {"value": "gone"}, "agent_id": agent.agent_id}
        await scheduler.launch(offer, command_task("t", agent.agent_id or {}))
        assert (await scheduler.update("t"))["state"] == "TASK_DROPPED"
        await scheduler.close()


async def test_unused_resources_are_offered_again_and_decline_filters(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    await scheduler.launch(
        offer,
        command_task("t", offer["agent_id"], cpus=0.5),
        filters={"refuse_seconds": 0},
    )
    await agent.next_event("RUN_TASK")
    again = await scheduler.offer()
    cpus = {
        r["name"]: r["scalar"]["value"]
        for r in again["resources"]
        if r["type"] == "SCALAR"
    }["cpus"]
    assert cpus == 1.5  # exact arithmetic: 2 - 0.5
    assert (
        await scheduler.call(
            "DECLINE", {"offer_ids": [again["id"]], "filters": {"refuse_seconds": 3600}}
        )
    ).status == 202
    assert again["id"]["value"] not in master.master.offers
    assert (await scheduler.call("REVIVE", {})).status == 202
    revived = await scheduler.offer()
    assert revived["id"] != again["id"]


async def test_suppress_and_revive_roles(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    scheduler, _ = cluster
    offer = await scheduler.offer()
    assert (await scheduler.call("SUPPRESS", {"roles": ["*"]})).status == 202
    framework = master.master.frameworks[scheduler.framework_id or ""]
    assert framework.suppressed_roles == {"*"}
    bad = await scheduler.call("SUPPRESS", {"roles": ["other"]})
    assert bad.status == 400 and "not subscribed to role" in await bad.text()
    await scheduler.call(
        "DECLINE", {"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 0}}
    )
    assert (await scheduler.call("REVIVE", {"roles": ["*"]})).status == 202
    assert framework.suppressed_roles == set()
    await scheduler.offer()


async def test_offer_timeout_rescinds(tmp_path: Path) -> None:
    async with (
        running_master(tmp_path, "--offer_timeout=100ms") as server,
        aiohttp.ClientSession() as session,
    ):
        agent, scheduler = await agent_and_scheduler(session, server)
        offer = await scheduler.offer()
        rescind = await scheduler.next_event("RESCIND")
        assert rescind["rescind"]["offer_id"] == offer["id"]
        await scheduler.close()
        await agent.disconnect()


async def test_kill_known_and_unknown_tasks(
    cluster: tuple[Scheduler, FakeAgent],
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    await scheduler.launch(offer, command_task("t", offer["agent_id"]))
    await agent.next_event("RUN_TASK")
    policy = {"grace_period": {"nanoseconds": 1000}}
    assert (
        await scheduler.call("KILL", {"task_id": {"value": "t"}, "kill_policy": policy})
    ).status == 202
    kill = (await agent.next_event("KILL_TASK"))["kill_task"]
    assert kill == {
        "framework_id": {"value": scheduler.framework_id},
        "task_id": {"value": "t"},
        "kill_policy": policy,
    }
    await scheduler.call("KILL", {"task_id": {"value": "ghost"}})
    status = await scheduler.update("ghost")
    assert (
        status["state"] == "TASK_LOST" and status["reason"] == "REASON_RECONCILIATION"
    )
    assert "uuid" not in status


async def test_reconcile_explicit_and_implicit(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    await scheduler.launch(
        offer,
        command_task("a", offer["agent_id"]),
        command_task("b", offer["agent_id"]),
    )
    await agent.next_event("RUN_TASK")
    await agent.next_event("RUN_TASK")
    await agent.send_status(scheduler.framework_id or "", "a", "TASK_RUNNING")
    await scheduler.update("a")
    await scheduler.call(
        "RECONCILE",
        {
            "tasks": [
                {"task_id": {"value": "a"}},
                {"task_id": {"value": "x"}, "agent_id": agent.agent_id},
                {"task_id": {"value": "y"}, "agent_id": {"value": "unknown-agent"}},
            ]
        },
    )
    states = {}
    for _ in range(3):
        status = await scheduler.update()
        assert status["reason"] == "REASON_RECONCILIATION" and "uuid" not in status
        states[status["task_id"]["value"]] = status["state"]
    assert states == {"a": "TASK_RUNNING", "x": "TASK_LOST", "y": "TASK_LOST"}
    await scheduler.call("RECONCILE", {})
    implicit = {}
    for _ in range(2):
        status = await scheduler.update()
        implicit[status["task_id"]["value"]] = status["state"]
    assert implicit == {"a": "TASK_RUNNING", "b": "TASK_STAGING"}


async def test_partition_aware_reconciliation_states(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    _, agent = cluster
    async with aiohttp.ClientSession() as session:
        scheduler = Scheduler(session, base_url(master))
        await scheduler.subscribe(PARTITION_AWARE)
        await scheduler.call(
            "RECONCILE",
            {
                "tasks": [
                    {"task_id": {"value": "x"}, "agent_id": agent.agent_id},
                    {"task_id": {"value": "y"}},
                ]
            },
        )
        got = {}
        for _ in range(2):
            status = await scheduler.update()
            got[status["task_id"]["value"]] = status["state"]
        assert got == {"x": "TASK_GONE", "y": "TASK_UNKNOWN"}
        await scheduler.close()


async def test_messages_shutdown_and_executor_failure(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    executor = {
        "executor_id": {"value": "e"},
        "command": {"value": "run-executor"},
        "type": "CUSTOM",
        "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
    }
    task = command_task("t", offer["agent_id"], executor=executor)
    del task["command"]
    await scheduler.launch(offer, task)
    run = (await agent.next_event("RUN_TASK"))["run_task"]
    assert run["task"]["executor"]["framework_id"]["value"] == scheduler.framework_id
    framework_id = {"value": scheduler.framework_id}

    await scheduler.call(
        "MESSAGE",
        {"agent_id": agent.agent_id, "executor_id": {"value": "e"}, "data": "aGk="},
    )
    message = (await agent.next_event("FRAMEWORK_MESSAGE"))["framework_message"]
    assert message == {
        "framework_id": framework_id,
        "executor_id": {"value": "e"},
        "data": "aGk=",
    }

    await agent.call(
        "EXECUTOR_MESSAGE",
        {"framework_id": framework_id, "executor_id": {"value": "e"}, "data": "eW8="},
    )
    event = await scheduler.next_event("MESSAGE", skip=("HEARTBEAT", "OFFERS"))
    assert event["message"] == {
        "agent_id": agent.agent_id,
        "executor_id": {"value": "e"},
        "data": "eW8=",
    }

    await scheduler.call(
        "SHUTDOWN", {"executor_id": {"value": "e"}, "agent_id": agent.agent_id}
    )
    shutdown = (await agent.next_event("SHUTDOWN_EXECUTOR"))["shutdown_executor"]
    assert shutdown == {"framework_id": framework_id, "executor_id": {"value": "e"}}

    await agent.call(
        "EXITED_EXECUTOR",
        {"framework_id": framework_id, "executor_id": {"value": "e"}, "status": 256},
    )
    failure = (await scheduler.next_event("FAILURE", skip=("HEARTBEAT", "OFFERS")))[
        "failure"
    ]
    assert failure == {
        "agent_id": agent.agent_id,
        "executor_id": {"value": "e"},
        "status": 256,
    }
    assert not master.master.agents[agent.agent_id["value"]].executors  # type: ignore[index]

    # An agent that leaves the status out (an executor that never ran): -1, as Mesos.
    await agent.call("EXITED_EXECUTOR", {"framework_id": framework_id, "executor_id": {"value": "e2"}})
    failure = (await scheduler.next_event("FAILURE", skip=("HEARTBEAT", "OFFERS")))["failure"]
    assert failure["status"] == -1


def _group(
    agent_id: Any, *, disk: float = 10, tasks: int = 2, **task_extra: Any
) -> dict[str, Any]:
    executor = {
        "executor_id": {"value": "default"},
        "type": "DEFAULT",
        "resources": [scalar("cpus", 0.1), scalar("mem", 32)]
        + ([scalar("disk", disk)] if disk else []),
    }
    return {
        "executor": executor,
        "task_group": {
            "tasks": [
                {**command_task(f"g{i}", agent_id), **task_extra} for i in range(tasks)
            ]
        },
    }


async def test_launch_group_goes_to_the_agent_whole(
    master: MasterServer, cluster: tuple[Scheduler, FakeAgent]
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    await scheduler.call(
        "ACCEPT",
        {
            "offer_ids": [offer["id"]],
            "operations": [
                {"type": "LAUNCH_GROUP", "launch_group": _group(offer["agent_id"])},
            ],
        },
    )
    group = (await agent.next_event("RUN_TASK_GROUP"))["run_task_group"]
    assert group["executor_info"]["executor_id"] == {"value": "default"}
    assert group["executor_info"]["framework_id"] == {"value": scheduler.framework_id}
    assert [t["task_id"]["value"] for t in group["task_group"]["tasks"]] == ["g0", "g1"]
    assert all(
        t["executor"]["executor_id"] == {"value": "default"}
        for t in group["task_group"]["tasks"]
    )
    framework = master.master.frameworks[scheduler.framework_id or ""]
    assert {t.executor_id.value for t in framework.tasks.values() if t.executor_id} == {
        "default"
    }


async def test_invalid_launch_group_fails_whole(
    cluster: tuple[Scheduler, FakeAgent],
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    await scheduler.call(
        "ACCEPT",
        {
            "offer_ids": [offer["id"]],
            "operations": [
                {
                    "type": "LAUNCH_GROUP",
                    "launch_group": _group(offer["agent_id"], disk=0),
                },
                {
                    "type": "LAUNCH",
                    "launch": {
                        "task_infos": [command_task("after", offer["agent_id"])]
                    },
                },
            ],
        },
    )
    for _ in range(2):
        status = await scheduler.update()
        assert status["state"] == "TASK_ERROR"
        assert status["reason"] == "REASON_TASK_GROUP_INVALID"
        assert "disk" in status["message"]
    # Nothing of the group reached the agent; the next operation still ran.
    run = await agent.next_event("RUN_TASK", "RUN_TASK_GROUP")
    assert run["type"] == "RUN_TASK"


async def test_default_executor_without_cpus_and_mem_gets_the_defaults(
    cluster: tuple[Scheduler, FakeAgent],
) -> None:
    scheduler, agent = cluster
    offer = await scheduler.offer()
    # The whole offer's cpus (2) go to tasks: the executor's default 0.1 cpus do not fit.
    greedy = _group(offer["agent_id"], tasks=2)
    greedy["executor"]["resources"] = [scalar("disk", 10)]
    for task in greedy["task_group"]["tasks"]:
        task["resources"] = [scalar("cpus", 1), scalar("mem", 32)]
    fitting = _group(offer["agent_id"], tasks=1)
    fitting["executor"]["resources"] = [scalar("disk", 10)]
    fitting["executor"]["executor_id"] = {"value": "default-2"}
    fitting["task_group"]["tasks"][0]["task_id"] = {"value": "fits"}
    fitting["task_group"]["tasks"][0]["resources"] = [scalar("cpus", 1.9), scalar("mem", 960)]
    await scheduler.call(
        "ACCEPT",
        {
            "offer_ids": [offer["id"]],
            "operations": [
                {"type": "LAUNCH_GROUP", "launch_group": greedy},
                {"type": "LAUNCH_GROUP", "launch_group": fitting},
            ],
        },
    )
    for _ in range(2):
        status = await scheduler.update()
        assert status["state"] == "TASK_ERROR"
        assert "more resources" in status["message"]
    group = (await agent.next_event("RUN_TASK_GROUP"))["run_task_group"]
    assert [t["task_id"]["value"] for t in group["task_group"]["tasks"]] == ["fits"]
    by_name = {r["name"]: r for r in group["executor_info"]["resources"]}
    assert by_name["cpus"]["scalar"] == {"value": 0.1}
    assert by_name["mem"]["scalar"] == {"value": 32}
    # Allocated and reserved as the executor's own resources.
    assert by_name["cpus"].get("allocation_info") == by_name["disk"].get("allocation_info")
    assert by_name["mem"].get("reservations") == by_name["disk"].get("reservations")
    assert group["task_group"]["tasks"][0]["executor"]["resources"] == group["executor_info"][
        "resources"
    ]


async def test_observers_see_tasks_agents_and_frameworks(master: MasterServer) -> None:
    seen: list[tuple[str, Any]] = []
    master.master.add_observer(lambda kind, payload: seen.append((kind, payload)))
    async with aiohttp.ClientSession() as session:
        agent, scheduler = await agent_and_scheduler(session, master)
        await running_task(scheduler, agent)
        await scheduler.call("TEARDOWN")
        await agent.next_event("SHUTDOWN_FRAMEWORK")
        await scheduler.close()
        await agent.disconnect()
    kinds = [kind for kind, _ in seen]
    assert kinds[:4] == ["AGENT_ADDED", "FRAMEWORK_ADDED", "TASK_ADDED", "TASK_UPDATED"]
    assert "FRAMEWORK_REMOVED" in kinds
    framework_id, _status, state = seen[3][1]
    assert (
        framework_id.value == scheduler.framework_id and state.value == "TASK_RUNNING"
    )


async def test_teardown_reaches_every_agent_even_those_without_its_tasks(master: MasterServer) -> None:
    """As Mesos: an agent may run an executor of the framework the master never saw (its
    task was lost in an agent restart); only a shutdown sent to every agent ends it."""
    async with aiohttp.ClientSession() as session:
        agent, scheduler = await agent_and_scheduler(session, master)
        other = FakeAgent(session, base_url(master), hostname="other.test")
        await other.register()
        await running_task(scheduler, agent)
        await scheduler.call("TEARDOWN")
        for each in (agent, other):
            shutdown = await each.next_event("SHUTDOWN_FRAMEWORK")
            assert shutdown["shutdown_framework"]["framework_id"]["value"] == scheduler.framework_id
        await scheduler.close()
        for each in (agent, other):
            await each.disconnect()


async def test_a_task_with_an_id_that_climbs_is_task_error_never_sent(master: MasterServer) -> None:
    """As Mesos: the ACCEPT is taken and the task is invalid (TASK_ERROR); it never reaches
    an agent, where its id would become a sandbox's name."""
    async with aiohttp.ClientSession() as session:
        agent, scheduler = await agent_and_scheduler(session, master)
        offer = await scheduler.offer()
        response = await scheduler.launch(offer, command_task("../../etc", offer["agent_id"]))
        assert response.status == 202, await response.text()
        status = await scheduler.update("../../etc")
        assert status["state"] == "TASK_ERROR" and status["reason"] == "REASON_TASK_INVALID"
        assert "'task_id' is invalid" in status["message"]
        await running_task(scheduler, agent, "fine")  # the agent's first event is the next task
        await scheduler.close()
        await agent.disconnect()
