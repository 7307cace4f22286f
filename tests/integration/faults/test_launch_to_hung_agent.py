"""A task launched onto a hung agent (SIGSTOP) that never reads the launch.

The master accepts the launch (the agent is still registered), the agent is then
marked unreachable (the task TASK_UNREACHABLE), and comes back without the task:
here it is killed while stopped and restarted, so it recovers without ever
having seen it. Re-registering, it does not report the task; the master asks it
(RECONCILE_TASKS) and the agent answers with a TASK_DROPPED of its own, reliable
(a uuid, acknowledged), as it does for a known agent's missing tasks; the master
no longer holds the task as unreachable. Found by the chaos soak (seed 100).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.integration.faults.workload import task, tid

from mesilla.testing.processes import http_json

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


SHORT_PINGS = ["--agent_ping_timeout=500ms", "--max_agent_ping_timeouts=2"]


async def test_task_the_hung_agent_never_received_ends_dropped(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster = make_cluster(master_flags=SHORT_PINGS)
    framework = await make_framework(cluster, name="aware", capabilities=["PARTITION_AWARE"])
    offer = await framework.offer()
    agent_id = cluster.await_agent_active(0)["id"]
    # The agent has its id checkpointed: restarted, it recovers as the same agent.
    cluster.agents[0].await_ready(lambda: cluster.agent_metrics(0)["slave/registered"], "registered agent")
    lost = task("lost", "sleep 3600")

    pid = cluster.agents[0].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        await framework.launch(offer, [lost])
        await framework.until_state([tid(lost)], "TASK_UNREACHABLE", 30)
        cluster.agents[0].kill()  # it dies stopped: the launch was never read
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    back_at = time.time()
    cluster.start_agent(0)
    assert cluster.await_agent_active(0, after=back_at)["id"] == agent_id
    await framework.until_state([tid(lost)], "TASK_DROPPED", 60)
    assert framework.states(tid(lost)) == ["TASK_UNREACHABLE", "TASK_DROPPED"], framework.summary()
    dropped = framework.distinct(tid(lost))[-1]
    assert dropped.uuid is not None, dropped.status  # the agent's own, acknowledged
    assert dropped.status["source"] == "SOURCE_AGENT", dropped.status
    assert dropped.reason == "REASON_RECONCILIATION", dropped.status
    tasks = http_json(f"{cluster.master_url}/api/v1", {"type": "GET_TASKS"})["get_tasks"]
    assert tasks.get("unreachable_tasks", []) == [], tasks
    assert tasks.get("tasks", []) == [], tasks

    # The master has nothing of it left in use, and no longer knows it (asked without an
    # agent id: Mesos's TASK_UNKNOWN).
    agent = cluster.await_agent_active(0)
    assert agent["used_resources"].get("cpus", 0) == 0, agent
    await framework.reconcile([tid(lost)])
    await framework.until(lambda: framework.reconciled(tid(lost)) is not None, 30, "answer to RECONCILE")
    answer = framework.reconciled(tid(lost))
    assert answer is not None and answer.state == "TASK_UNKNOWN", framework.summary()
    assert cluster.await_no_leftovers() == []
