"""`--recover=cleanup` after a `kill -9` of the agent: every old executor and
container is killed, the agent exits, and nothing of the workload is left."""

from __future__ import annotations

import time

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.fixtures.images import PushedImage
from tests.integration.faults.workload import container, pod_executor, task, tid

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


async def test_recover_cleanup_kills_every_old_container_and_exits(
    make_cluster: MakeCluster, make_framework: MakeFramework, busybox_image: PushedImage
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster)
    pod = [task(f"pod{i}", "sleep 3600", container=container(busybox_image.name, "shared")) for i in range(2)]
    await framework.launch_group(await framework.offer(), pod_executor(), pod)
    command = task("cmd", "sleep 3600")
    await framework.launch(await framework.offer(), [command])
    ids = [tid(command), *map(tid, pod)]
    await framework.until_state(ids, "TASK_RUNNING", 120)
    # The agent's containers: 2 executors (the pod's forked by the zygote), 2 nested.
    assert len(cluster.runtime_containers()) == 3
    assert len(cluster.forked_containers()) == 1
    agent = cluster.agents[0]
    agent.kill()

    agent.start("--recover=cleanup")
    assert agent.wait_exit(60) == 0, agent.log_tail()
    assert cluster.leftovers() == []

    # Started again as usual, the agent has nothing to recover; the framework
    # hears once of each task that it is gone.
    back_at = time.time()
    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=back_at)
    await framework.until_state(ids, "TERMINAL", 60)
    for task_id in ids:
        assert len(framework.terminal(task_id)) == 1, framework.summary()
    assert cluster.leftovers() == []
