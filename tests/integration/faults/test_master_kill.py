"""`kill -9` of the master while frameworks launch tasks; the master restarts.

The frameworks re-subscribe with their ids, the agent re-registers, and then
what each framework knows (updates, and RECONCILE answers for the rest) must be
the truth the agent holds: no task lost, none duplicated, each end seen once.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.integration.faults.workload import task, tid

from mesilla.testing.processes import Cluster
from mesilla.testing.scheduler import Framework

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


def agent_tasks(cluster: Cluster) -> dict[str, list[str]]:
    """What the agent holds: task id -> its states there (a task twice would show twice)."""
    body = cluster.agent_call({"type": "GET_TASKS"})["get_tasks"]
    found: dict[str, list[str]] = {}
    for kind in ("pending_tasks", "queued_tasks", "launched_tasks", "terminated_tasks", "completed_tasks"):
        for t in body.get(kind, []):
            found.setdefault(t["task_id"]["value"], []).append(t["state"])
    return found


async def settled_tasks(cluster: Cluster, timeout: float = 60.0) -> dict[str, list[str]]:
    """The agent's tasks once none is still staging or starting."""
    deadline = time.monotonic() + timeout
    while True:
        truth = agent_tasks(cluster)
        if not any(s in ("TASK_STAGING", "TASK_STARTING") for states in truth.values() for s in states):
            return truth
        assert time.monotonic() < deadline, f"tasks still starting after {timeout}s: {truth}"
        await asyncio.sleep(0.05)


async def check_against_the_agent(
    framework: Framework, launched: list[str], truth: dict[str, list[str]]
) -> None:
    """RECONCILE answers what the agent holds; no update claims a task the agent does not run."""
    running = [i for i in launched if i in truth]
    await framework.until_state(running, "TASK_RUNNING")
    await framework.reconcile(launched)
    await framework.until(
        lambda: all(framework.reconciled(i) for i in launched), 30, "reconciliation answers"
    )
    for task_id in launched:
        answer = framework.reconciled(task_id)
        assert answer is not None
        if task_id in truth:
            assert answer.state == truth[task_id][0] == "TASK_RUNNING", (task_id, answer.status, truth)
            assert framework.states(task_id) == ["TASK_STARTING", "TASK_RUNNING"], framework.summary()
        else:
            # Never reached the agent: the new master does not know it either.
            assert answer.state in ("TASK_LOST", "TASK_UNKNOWN"), answer.status
            assert "TASK_RUNNING" not in framework.states(task_id), framework.summary()


async def test_master_killed_while_frameworks_launch(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster = make_cluster()
    frameworks = [
        await make_framework(cluster, name="plain"),
        await make_framework(cluster, name="aware", capabilities=["PARTITION_AWARE"]),
    ]
    launched: dict[Framework, list[str]] = {}
    for framework in frameworks:  # running before the failover
        settled = [task(f"settled{i}", "sleep 3600") for i in range(2)]
        await framework.launch(await framework.offer(), settled)
        await framework.until_state(map(tid, settled), "TASK_RUNNING")
        await framework.decline_offers()
        launched[framework] = [tid(t) for t in settled]
    # Launched just before the master dies (one agent: one offer at a time): the last
    # ones may or may not reach the agent.
    for framework in frameworks:
        inflight = [task(f"inflight{i}", "sleep 3600") for i in range(2)]
        await framework.launch(await framework.offer(), inflight)
        launched[framework] += [tid(t) for t in inflight]
    killed_at = time.time()
    cluster.master.kill()

    cluster.start_master()
    for framework in frameworks:
        framework_id = framework.framework_id
        await framework.subscribe(timeout=60)
        assert framework.subscriptions == 2 and framework.framework_id == framework_id
    cluster.await_agent_active(0, after=killed_at)

    # Updates of in-flight tasks the agent got come through the new master; then
    # RECONCILE must tell the truth about every task, and no task runs twice.
    truth = await settled_tasks(cluster)
    assert all(len(states) == 1 for states in truth.values()), truth
    for framework in frameworks:
        await check_against_the_agent(framework, launched[framework], truth)

    # The frameworks still control their tasks through the new master: each end once.
    for framework in frameworks:
        running = [i for i in launched[framework] if i in truth]
        for task_id in running:
            await framework.kill(task_id)
        await framework.until_state(running, "TASK_KILLED")
        for task_id in launched[framework]:
            assert len(framework.terminal(task_id)) == (1 if task_id in running else 0), framework.summary()
    # The new master offers what the killed tasks freed.
    await asyncio.wait_for(frameworks[0].offer(), 30)
    assert cluster.await_no_leftovers() == []
