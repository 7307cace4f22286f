"""A framework that goes away: back within its failover_timeout it keeps its tasks;
away for longer, the master removes it and the agent kills its tasks."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.fixtures.images import PushedImage
from tests.integration.faults.workload import container, pod_executor, task, tid

from mesilla.testing.processes import http_json
from mesilla.testing.scheduler import Framework, FrameworkError

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


async def launch_workload(framework: Framework, image: str) -> list[str]:
    """A command task and a pod of two, all running."""
    pod = [task(f"pod{i}", "sleep 3600", container=container(image)) for i in range(2)]
    await framework.launch_group(await framework.offer(), pod_executor(), pod)
    command = task("cmd", "sleep 3600")
    await framework.launch(await framework.offer(), [command])
    ids = [tid(command), *map(tid, pod)]
    await framework.until_state(ids, "TASK_RUNNING", 120)
    return ids


async def test_framework_back_within_its_failover_timeout_keeps_its_tasks(
    make_cluster: MakeCluster, make_framework: MakeFramework, busybox_image: PushedImage
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster, failover_timeout=60.0)
    ids = await launch_workload(framework, busybox_image.name)
    pids = cluster.container_pids()

    await framework.disconnect()
    fw_id = framework.framework_id["value"]  # type: ignore[index]
    master_frameworks = http_json(f"{cluster.master_url}/frameworks")["frameworks"]
    assert [f["id"] for f in master_frameworks] == [fw_id]  # still there, waiting for it
    await framework.subscribe()
    assert framework.subscriptions == 2 and framework.framework_id["value"] == fw_id  # type: ignore[index]
    await framework.reconcile(ids)
    await framework.until(lambda: all(framework.reconciled(i) for i in ids), 30, "reconciliation answers")
    assert {framework.reconciled(i).state for i in ids} == {"TASK_RUNNING"}  # type: ignore[union-attr]
    assert cluster.container_pids() == pids
    for task_id in ids:
        await framework.kill(task_id)
    await framework.until_state(ids, "TASK_KILLED")
    for task_id in ids:
        assert len(framework.terminal(task_id)) == 1, framework.summary()
    assert cluster.await_no_leftovers() == []


async def test_framework_away_beyond_its_failover_timeout_is_removed_and_its_tasks_killed(
    make_cluster: MakeCluster, make_framework: MakeFramework, busybox_image: PushedImage
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster, failover_timeout=1.0)
    ids = await launch_workload(framework, busybox_image.name)
    fw_id = framework.framework_id["value"]  # type: ignore[index]

    await framework.disconnect()
    deadline = time.monotonic() + 30
    while True:
        completed = http_json(f"{cluster.master_url}/frameworks")["completed_frameworks"]
        removed = next((f for f in completed if f["id"] == fw_id), None)
        if removed is not None:
            break
        assert time.monotonic() < deadline, "the framework was not removed after its failover_timeout"
        await asyncio.sleep(0.1)
    # The master records each task killed; the agent kills every container of it.
    states = {t["id"]: t["state"] for t in removed.get("completed_tasks", [])}
    assert states == {i: "TASK_KILLED" for i in ids}, removed
    assert cluster.await_no_leftovers() == []
    # The removed framework cannot come back under its id.
    with pytest.raises(FrameworkError):
        await framework.subscribe(timeout=3)
    assert any(e["type"] == "ERROR" for e in framework.events) or framework.error is not None
