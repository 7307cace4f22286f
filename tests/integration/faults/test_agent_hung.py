"""A hung agent (SIGSTOP): its stream to the master stays open, only the health checks tell.

After `--max_agent_ping_timeouts` unanswered pings the master marks it unreachable:
its task goes TASK_UNREACHABLE for a PARTITION_AWARE framework and TASK_LOST for
another, and the operator API no longer lists it. Once it runs again (SIGCONT) it
finds its stream closed, re-registers, and both tasks are running again.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.integration.faults.workload import task, tid

from mesilla.testing.processes import Cluster, http_json

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]

SHORT_PINGS = ["--agent_ping_timeout=500ms", "--max_agent_ping_timeouts=2"]


def master_call(cluster: Cluster, body: dict[str, object]) -> dict[str, object]:
    result: dict[str, object] = http_json(f"{cluster.master_url}/api/v1", body)
    return result


async def test_hung_agent_is_unreachable_then_comes_back(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster = make_cluster(master_flags=SHORT_PINGS)
    aware = await make_framework(cluster, name="aware", capabilities=["PARTITION_AWARE"])
    plain = await make_framework(cluster, name="plain")
    aware_task, plain_task = task("aware", "sleep 3600"), task("plain", "sleep 3600")
    await aware.launch(await aware.offer(), [aware_task])
    await plain.launch(await plain.offer(), [plain_task])
    await aware.until_state([tid(aware_task)], "TASK_RUNNING")
    await plain.until_state([tid(plain_task)], "TASK_RUNNING")
    agent_id = cluster.await_agent_active(0)["id"]

    pid = cluster.agents[0].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        await aware.until_state([tid(aware_task)], "TASK_UNREACHABLE", 30)
        await plain.until_state([tid(plain_task)], "TASK_LOST", 30)
        unreachable = aware.distinct(tid(aware_task))[-1]
        assert unreachable.reason == "REASON_AGENT_REMOVED", unreachable.status
        assert unreachable.status["source"] == "SOURCE_MASTER", unreachable.status
        assert unreachable.status.get("unreachable_time"), unreachable.status
        agents = master_call(cluster, {"type": "GET_AGENTS"})["get_agents"]
        assert agents.get("agents", []) == [], agents  # type: ignore[attr-defined]
        tasks = master_call(cluster, {"type": "GET_TASKS"})["get_tasks"]
        # Both wait for the agent to come back; only the PARTITION_AWARE framework was told so.
        unreachable_ids = sorted(t["task_id"]["value"] for t in tasks["unreachable_tasks"])  # type: ignore[index]
        assert unreachable_ids == sorted([tid(aware_task), tid(plain_task)]), tasks
        metrics = http_json(f"{cluster.master_url}/metrics/snapshot")
        assert metrics["master/slave_unreachable_completed"] == 1, metrics
        assert http_json(f"{cluster.master_url}/state")["unreachable_slaves"] == 1
    finally:
        os.kill(pid, signal.SIGCONT)

    back_at = time.time()
    assert cluster.await_agent_active(0, after=back_at)["id"] == agent_id
    for framework, t in ((aware, aware_task), (plain, plain_task)):
        await framework.until_state([tid(t)], "TASK_RUNNING", 30)
        back = framework.distinct(tid(t))[-1]
        assert back.reason == "REASON_AGENT_REREGISTERED", back.status
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
