"""A pod executor that dies while its agent is down (`kill -9` of both), the master up.

The restarted agent finds the executor gone: its task ends, and the executor is
not in the agent's re-registration. The master, which still knows the agent
(it came back within the ping timeouts), never heard the executor exit (the
agent had no connection to tell it): as Mesos's `reconcileKnownSlave`, an
executor the re-registering agent does not report is removed, and its
resources with it. Found by the chaos run (seed 2).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.fixtures.images import PushedImage
from tests.integration.faults.workload import (
    alive,
    container,
    executor_pid,
    executors_in_master,
    idle_in_master,
    pod_executor,
    task,
    tid,
)

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


async def test_executor_that_died_with_its_agent_down_leaves_the_master(
    make_cluster: MakeCluster, make_framework: MakeFramework, busybox_image: PushedImage
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster)
    executor = pod_executor()
    executor_id = executor["executor_id"]["value"]
    pod = task("pod", "sleep 3600", container=container(busybox_image.name))
    await framework.launch_group(await framework.offer(), executor, [pod])
    await framework.until_state([tid(pod)], "TASK_RUNNING", 120)
    assert executors_in_master(cluster) == [executor_id]

    pid = executor_pid(cluster, executor_id)
    cluster.agents[0].kill()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while alive(pid):
        assert time.monotonic() < deadline, f"executor {pid} still alive"
        time.sleep(0.05)
    back_at = time.time()
    cluster.start_agent(0)
    cluster.await_agent_active(0, after=back_at)

    await framework.until_state([tid(pod)], "TERMINAL", 60)
    [end] = framework.terminal(tid(pod))
    assert end.uuid is not None, end.status

    # The executor's end is the agent's business: polled, not timed (in a thread: the
    # framework acknowledges meanwhile).
    agent = await asyncio.to_thread(
        cluster.agents[0].await_ready, lambda: idle_in_master(cluster), "master without the executor", 30
    )
    assert agent["used_resources"].get("mem", 0) == 0, agent
    assert cluster.await_no_leftovers() == []
