"""A full disk under the agent's sandboxes (a small tmpfs the test mounts there).

A launch that cannot create its sandbox ends, as in Mesos, with TASK_DROPPED
(REASON_EXECUTOR_TERMINATED, "Failed to create executor directory: ...") from
the agent, which stays connected to its master; once the disk has room again
the next launch runs. Found by the chaos run (tests/chaos): the OSError used to
drop the agent's connection to the master, and the task became a TASK_DROPPED
of reconciliation without a reason. A pod's executor that could not be created
is reported exited (EXITED_EXECUTOR, as Mesos), so that the master, which added
it for the launch, lets its resources go (the soak, seed 102).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.integration.faults.workload import idle_in_master, pod_executor, task, tid

from mesilla.testing.chaos.inject import FILL, fill, mount_disks
from mesilla.testing.processes import Cluster

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


@pytest.fixture
def on_small_disk(make_cluster: MakeCluster) -> Iterator[tuple[Cluster, Path]]:
    """A started cluster whose agent keeps its sandboxes on a small tmpfs (the chaos
    harness's), and that disk, unmounted at the end."""
    cluster = make_cluster(start=False)
    [disk] = mount_disks(cluster)
    try:
        cluster.start()
        yield cluster, disk
    finally:
        subprocess.run(["umount", str(disk)], check=False, capture_output=True)


async def test_a_full_sandbox_disk_drops_the_launch_and_the_agent_goes_on(
    on_small_disk: tuple[Cluster, Path], make_framework: MakeFramework
) -> None:
    cluster, disk = on_small_disk
    registered = cluster.await_agent_active(0)
    framework = await make_framework(cluster, capabilities=["PARTITION_AWARE"])
    fill(disk)
    starved = task("starved", "sleep 3600")
    await framework.launch(await framework.offer(), [starved])
    await framework.until_state([tid(starved)], "TERMINAL")
    [end] = framework.terminal(tid(starved))
    assert (end.state, end.reason, end.status["source"]) == (
        "TASK_DROPPED", "REASON_EXECUTOR_TERMINATED", "SOURCE_AGENT"
    ), end.status
    assert "Failed to create executor directory" in end.status["message"], end.status
    assert "No space left on device" in end.status["message"], end.status

    (disk / FILL).unlink()
    fed = task("fed", "sleep 3600")
    await framework.launch(await framework.offer(), [fed])
    await framework.until_state([tid(fed)], "TASK_RUNNING")
    # The same registration all along: the full disk never cost the agent its master.
    agent = cluster.await_agent_active(0)
    assert agent.get("reregistered_time") == registered.get("reregistered_time"), agent
    await framework.kill(tid(fed))
    await framework.until_state([tid(fed)], "TASK_KILLED")
    assert [item for item in cluster.await_no_leftovers() if item != f"mount {disk}"] == []


async def test_a_pod_whose_sandbox_cannot_be_created_leaves_the_master(
    on_small_disk: tuple[Cluster, Path], make_framework: MakeFramework
) -> None:
    cluster, disk = on_small_disk
    framework = await make_framework(cluster, capabilities=["PARTITION_AWARE"])
    fill(disk)
    starved = task("starved", "sleep 3600")
    await framework.launch_group(await framework.offer(), pod_executor(), [starved])
    await framework.until_state([tid(starved)], "TASK_DROPPED")

    # The executor's exit reaches the master asynchronously: polled, in a thread (the
    # framework acknowledges meanwhile).
    agent = await asyncio.to_thread(
        cluster.agents[0].await_ready, lambda: idle_in_master(cluster), "master without the executor", 30
    )
    assert agent["used_resources"].get("mem", 0) == 0, agent
    assert [item for item in cluster.await_no_leftovers() if item != f"mount {disk}"] == []
