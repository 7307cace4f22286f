"""`kill -9` of the agent while pods and command tasks run, restart with the same flags.

The framework (checkpointing, acknowledging) must see each task's real fate
exactly once; every container must still run as the same process, and once the
workload is over nothing of it may be left on the host.
"""

from __future__ import annotations

import time
import uuid

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.fixtures.images import PushedImage
from tests.integration.faults.workload import (
    await_gone,
    container,
    container_of,
    executor_sandbox,
    http_health_check,
    pod_executor,
    restart_on_failure,
    task,
    tid,
)

from mesilla.common import procfs
from mesilla.testing.cluster import free_port
from mesilla.testing.processes import Cluster

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


def identities(cluster: Cluster) -> dict[str, tuple[int | None, int | None]]:
    """Every container but transient check containers -> (pid, that process's start time)."""
    return {
        name: (pid, procfs.start_time(pid) if pid else None)
        for name, pid in cluster.container_pids().items()
        if "check-" not in name
    }


def executor_processes(cluster: Cluster) -> set[tuple[int, int | None]]:
    return {
        (pid, procfs.start_time(pid))
        for pid, cmd in cluster.processes().items()
        if "mesilla.executor" in cmd
    }


async def test_agent_killed_and_restarted_keeps_every_container(
    make_cluster: MakeCluster, make_framework: MakeFramework, busybox_image: PushedImage
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster, capabilities=["TASK_RESTARTING_STATE"])
    marker = uuid.uuid4().hex[:8]

    # A pod with an image: a health-checked server of the shared volume, a reader of it,
    # a task that failed once and was restarted, and one that ends during the outage.
    image = busybox_image.name
    port = free_port()
    writer = task("writer", f"date > shared/now; exec busybox httpd -f -p 127.0.0.1:{port} -h shared",
                  container=container(image, "shared"), health_check=http_health_check(port, "/now"))
    reader = task("reader", "while true; do cat shared/now > /dev/null; sleep 0.2; done",
                  container=container(image, "shared"))
    flaky = task("flaky", "[ -e shared/failed-once ] || { touch shared/failed-once; exit 3; }; sleep 3600",
                 container=container(image, "shared"), restart_policy=restart_on_failure())
    pod_ender = task("podend", f"until [ -e shared/stop ]; do sleep 0.1; done; echo {marker}-pod; exit 0",
                     container=container(image, "shared"))
    executor = pod_executor()
    # Command tasks (the command executor): one runs on, one fails with status 7 during the outage.
    sleeper = task("sleeper", "sleep 3600")
    cmd_ender = task("cmdend", f"until [ -e stop ]; do sleep 0.1; done; echo {marker}-cmd; exit 7")
    pod = [writer, reader, flaky, pod_ender]

    offer = await framework.offer()
    await framework.launch_group(offer, executor, pod)
    await framework.launch(await framework.offer(), [sleeper, cmd_ender])
    everything = [*pod, sleeper, cmd_ender]
    await framework.until_state(map(tid, everything), "TASK_RUNNING", 120)
    await framework.until(
        lambda: any(u.status.get("healthy") for u in framework.updates if u.task_id == tid(writer)),
        60,
        "healthy writer",
    )
    restarted = ["TASK_STARTING", "TASK_RUNNING", "TASK_RESTARTING", "TASK_RUNNING"]
    await framework.until(lambda: framework.states(tid(flaky)) == restarted, 60, "restart of the flaky task")
    before = identities(cluster)
    executors_before = executor_processes(cluster)
    cluster_before = cluster.containers()
    assert len(before) == 1 + len(pod) + 2, before  # the pod executor, its tasks, 2 command executors
    fw_id = framework.framework_id["value"]  # type: ignore[index]
    pod_sandbox = executor_sandbox(cluster, fw_id, executor["executor_id"]["value"])
    cmd_sandbox = executor_sandbox(cluster, fw_id, tid(cmd_ender))
    updates_before = len(framework.updates)
    # The leak check at the end sees the workload (so it can fail).
    assert any(item.startswith("process ") for item in cluster.leftovers())

    killed_at = time.time()
    assert cluster.agents[0].kill() == -9
    # While the agent is down two tasks end: their executors see it, the agent does not.
    (pod_sandbox / "shared" / "stop").touch()
    (cmd_sandbox / "stop").touch()
    await_gone(cluster, f"{marker}-pod")
    await_gone(cluster, f"{marker}-cmd")

    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=killed_at)
    await framework.until_state([tid(pod_ender), tid(cmd_ender)], "TERMINAL", 60)
    [pod_end] = framework.terminal(tid(pod_ender))
    assert pod_end.state == "TASK_FINISHED", pod_end.status
    [cmd_end] = framework.terminal(tid(cmd_ender))
    assert cmd_end.state == "TASK_FAILED", cmd_end.status
    assert "status 7" in cmd_end.status.get("message", ""), cmd_end.status

    # Every other container is the very same process; the ended ones may linger until reaped.
    after = identities(cluster)
    # No executor was started twice: the restarted agent re-attached to the same ones.
    assert executor_processes(cluster) <= executors_before
    ended = {container_of(framework, cluster_before, tid(t)) for t in (pod_ender, cmd_ender)}
    for name, identity in before.items():
        if name not in ended:
            assert after.get(name) == identity, f"container {name} changed: {identity} -> {after.get(name)}"
    # The rest kept running through the restart: no new state but the ones of the enders.
    later = framework.updates[updates_before:]
    others = {u.task_id: u.state for u in later if u.task_id not in (tid(pod_ender), tid(cmd_ender))}
    assert set(others.values()) <= {"TASK_RUNNING"}, others

    for task_info in (writer, reader, flaky, sleeper):
        await framework.kill(tid(task_info))
    await framework.until_state(map(tid, everything), "TERMINAL", 60)
    for task_info in everything:
        ends = framework.terminal(tid(task_info))
        assert len(ends) == 1, (tid(task_info), framework.summary())
    assert {framework.state(tid(t)) for t in (writer, reader, flaky, sleeper)} == {"TASK_KILLED"}
    left = cluster.await_no_leftovers()
    assert not left, "\n".join([*left, str(framework.summary())])


async def test_agent_killed_and_restarted_ends_tasks_of_frameworks_without_checkpointing(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster, checkpoint=False)
    ephemeral = task("ephemeral", "sleep 3600")
    await framework.launch(await framework.offer(), [ephemeral])
    await framework.until_state([tid(ephemeral)], "TASK_RUNNING")

    killed_at = time.time()
    cluster.agents[0].kill()
    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=killed_at)
    # Nothing of it was checkpointed. As in Mesos, the master declares the task lost as
    # soon as the agent disconnects (once), and its executor does not linger.
    await framework.until_state([tid(ephemeral)], "TERMINAL", 60)
    [end] = framework.terminal(tid(ephemeral))
    assert (end.state, end.reason, end.status["source"]) == (
        "TASK_LOST", "REASON_AGENT_DISCONNECTED", "SOURCE_MASTER"
    ), end.status
    left = cluster.await_no_leftovers()
    assert not left, "\n".join([*left, str(framework.summary())])
