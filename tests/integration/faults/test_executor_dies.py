"""An executor that dies on its own (`kill -9` of its process): its tasks fail, once each."""

from __future__ import annotations

import os
import signal

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.fixtures.images import PushedImage
from tests.integration.faults.workload import container, executor_pid, pod_executor, task, tid

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


async def test_executors_killed_by_a_signal_fail_their_tasks_once(
    make_cluster: MakeCluster, make_framework: MakeFramework, busybox_image: PushedImage
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster)
    command = task("cmd", "sleep 3600")
    pod = [task(f"pod{i}", "sleep 3600", container=container(busybox_image.name, "shared")) for i in range(2)]
    survivor = task("survivor", "sleep 3600")
    executor = pod_executor()
    offer = await framework.offer()
    await framework.launch_group(offer, executor, pod)
    await framework.launch(await framework.offer(), [command, survivor])
    everything = [command, *pod, survivor]
    await framework.until_state(map(tid, everything), "TASK_RUNNING", 120)

    for executor_id in (tid(command), executor["executor_id"]["value"]):
        os.kill(executor_pid(cluster, executor_id), signal.SIGKILL)
    victims = [command, *pod]
    await framework.until_state(map(tid, victims), "TERMINAL", 60)
    for t in victims:
        [end] = framework.terminal(tid(t))
        assert end.state == "TASK_FAILED", end.status
        assert end.reason == "REASON_EXECUTOR_TERMINATED", end.status
    # Another executor of the same framework is not touched.
    assert framework.states(tid(survivor)) == ["TASK_STARTING", "TASK_RUNNING"]
    await framework.kill(tid(survivor))
    await framework.until_state([tid(survivor)], "TASK_KILLED")
    for t in everything:
        assert len(framework.terminal(tid(t))) == 1, framework.summary()
    assert cluster.await_no_leftovers() == []
