"""`kill -9` of the master while a framework launches tasks; the master restarts.

The framework re-subscribes with its id, the agent re-registers, and then what
the framework knows (updates, and RECONCILE answers for the rest) must be the
truth the agent holds: no task lost, none duplicated, each end seen once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from mesilla.testing.processes import Cluster
from mesilla.testing.scheduler import TERMINAL_STATES, Framework
from tests.integration.faults.workload import task, tid

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]

MakeCluster = Callable[..., Cluster]
MakeFramework = Callable[..., Awaitable[Framework]]


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


async def test_master_killed_while_a_framework_launches(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster)
    # Running before the failover.
    settled = [task(f"settled{i}", "sleep 3600") for i in range(3)]
    await framework.launch(await framework.offer(), settled)
    await framework.until_state(map(tid, settled), "TASK_RUNNING")
    # Launched just before the master dies: they may or may not reach the agent.
    inflight = [task(f"inflight{i}", "sleep 3600") for i in range(3)]
    await framework.launch(await framework.offer(), inflight)
    killed_at = time.time()
    cluster.master.kill()
    launched = [*settled, *inflight]

    cluster.start_master()
    await framework.subscribe(timeout=60)
    assert framework.subscriptions == 2
    cluster.await_agent_active(0, after=killed_at)

    # Updates of in-flight tasks the agent got come through the new master; once they
    # did, RECONCILE must tell the truth about every task.
    truth = await settled_tasks(cluster)
    assert all(len(states) == 1 for states in truth.values()), truth
    ids = [tid(t) for t in launched]
    running = [i for i in ids if i in truth]
    await framework.until_state(running, "TASK_RUNNING")
    await framework.reconcile(ids)
    await framework.until(lambda: all(framework.reconciled(i) for i in ids), 30, "reconciliation answers")
    for task_id in ids:
        answer = framework.reconciled(task_id)
        assert answer is not None
        if task_id in truth:
            assert answer.state == truth[task_id][0] == "TASK_RUNNING", (task_id, answer.status, truth)
        else:
            # Never reached the agent: the master does not know it either.
            assert answer.state in ("TASK_LOST", "TASK_UNKNOWN"), answer.status
    for t in settled:
        assert tid(t) in truth and framework.terminal(tid(t)) == [], framework.summary()
        assert framework.states(tid(t)) == ["TASK_STARTING", "TASK_RUNNING"], framework.summary()
    # No update claims a task runs that the agent does not run.
    for t in inflight:
        if tid(t) not in truth:
            assert "TASK_RUNNING" not in framework.states(tid(t)), framework.summary()

    # The framework still controls its tasks through the new master.
    for task_id in running:
        await framework.kill(task_id)
    await framework.until_state(running, "TASK_KILLED")
    for task_id in ids:
        ends = framework.terminal(task_id)
        assert len(ends) <= 1, framework.summary()
        assert (len(ends) == 1) == (task_id in running or framework.state(task_id) in TERMINAL_STATES)
    # The new master offers what the killed tasks freed.
    await asyncio.wait_for(framework.offer(), 30)
    assert cluster.await_no_leftovers() == []
