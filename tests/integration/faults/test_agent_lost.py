"""An agent that stops answering (`kill -9`, not restarted within the master's timeouts).

Its tasks become TASK_UNREACHABLE for a PARTITION_AWARE framework and TASK_LOST
for another, once each, after `--agent_ping_timeout` x `--max_agent_ping_timeouts`;
its executors shut themselves down after `--recovery_timeout`.
When it does come back, both tasks are running again, and both frameworks are
told so by the master (REASON_AGENT_REREGISTERED), as in Mesos 1.11.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.integration.faults.workload import task, tid

from mesilla.testing.processes import Cluster, http_json
from mesilla.testing.scheduler import Framework, Json

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]

SHORT_PINGS = ["--agent_ping_timeout=500ms", "--max_agent_ping_timeouts=2"]
# How long executors wait for an agent that went away (MESOS_RECOVERY_TIMEOUT).
RECOVERY_TIMEOUT = 3


async def unreachable_agent(
    make_cluster: MakeCluster, make_framework: MakeFramework, *agent_flags: str
) -> tuple[Cluster, Framework, Json, Framework, Json]:
    """A PARTITION_AWARE and a plain framework, a task each; the agent killed and declared
    unreachable (their tasks TASK_UNREACHABLE and TASK_LOST)."""
    cluster = make_cluster(master_flags=SHORT_PINGS, agent_flags=list(agent_flags))
    aware = await make_framework(cluster, name="aware", capabilities=["PARTITION_AWARE"])
    plain = await make_framework(cluster, name="plain")
    aware_task, plain_task = task("aware", "sleep 3600"), task("plain", "sleep 3600")
    await aware.launch(await aware.offer(), [aware_task])
    await plain.launch(await plain.offer(), [plain_task])
    await aware.until_state([tid(aware_task)], "TASK_RUNNING")
    await plain.until_state([tid(plain_task)], "TASK_RUNNING")

    cluster.agents[0].kill()
    await aware.until_state([tid(aware_task)], "TASK_UNREACHABLE", 30)
    await plain.until_state([tid(plain_task)], "TASK_LOST", 30)
    return cluster, aware, aware_task, plain, plain_task


async def test_agent_that_does_not_return_in_time(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster, aware, aware_task, plain, plain_task = await unreachable_agent(
        make_cluster, make_framework, f"--recovery_timeout={RECOVERY_TIMEOUT}secs"
    )
    [unreachable] = aware.distinct(tid(aware_task))[2:]
    assert unreachable.state == "TASK_UNREACHABLE" and unreachable.status.get("unreachable_time"), (
        unreachable.status
    )
    assert unreachable.status["source"] == "SOURCE_MASTER", unreachable.status
    [lost] = plain.terminal(tid(plain_task))
    assert lost.status["source"] == "SOURCE_MASTER", lost.status
    assert [a for a in http_json(f"{cluster.master_url}/slaves")["slaves"] if a.get("active")] == []
    # Reconciliation agrees; a plain framework hears of a task of an unreachable agent as lost.
    await aware.reconcile([tid(aware_task)])
    await plain.reconcile([tid(plain_task)])
    await aware.until(lambda: aware.reconciled(tid(aware_task)) is not None, 30, "reconciliation answer")
    await plain.until(lambda: plain.reconciled(tid(plain_task)) is not None, 30, "reconciliation answer")
    assert aware.reconciled(tid(aware_task)).state == "TASK_UNREACHABLE"  # type: ignore[union-attr]
    assert plain.reconciled(tid(plain_task)).state == "TASK_LOST"  # type: ignore[union-attr]
    # The executors give up on their agent after the recovery timeout and end with their
    # tasks. (Their containers' runtime state and cgroups wait for an agent to clean them.)
    deadline = time.monotonic() + RECOVERY_TIMEOUT + 30
    while cluster.processes() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert cluster.processes() == {}


async def test_unreachable_agent_that_comes_back(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster, aware, aware_task, plain, plain_task = await unreachable_agent(make_cluster, make_framework)
    # The agent comes back (same work_dir: it recovers its executors). As Mesos 1.11 does,
    # the master tells each connected framework the state of its re-added task (the
    # task of the framework that was told TASK_LOST is not killed).
    back_at = time.time()
    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=back_at)
    for framework, t in ((aware, aware_task), (plain, plain_task)):
        await framework.until_state([tid(t)], "TASK_RUNNING", 30)
        back = framework.distinct(tid(t))[-1]
        assert back.reason == "REASON_AGENT_REREGISTERED" and back.status["source"] == "SOURCE_MASTER", (
            back.status
        )
    await aware.reconcile([tid(aware_task)])
    await aware.until(lambda: aware.reconciled(tid(aware_task)) is not None, 30, "reconciliation answer")
    assert aware.reconciled(tid(aware_task)).state == "TASK_RUNNING"  # type: ignore[union-attr]

    for framework, t in ((aware, aware_task), (plain, plain_task)):
        await framework.kill(tid(t))
        await framework.until_state([tid(t)], "TASK_KILLED")
    assert aware.states(tid(aware_task)) == [
        "TASK_STARTING", "TASK_RUNNING", "TASK_UNREACHABLE", "TASK_RUNNING", "TASK_KILLED"
    ], aware.summary()
    assert plain.states(tid(plain_task)) == [
        "TASK_STARTING", "TASK_RUNNING", "TASK_LOST", "TASK_RUNNING", "TASK_KILLED"
    ], plain.summary()
    assert cluster.await_no_leftovers() == []
