"""`kill -9` of the agent in the middle of a pod launch and in the middle of a task kill.

Whatever instant the agent dies at, after its restart the framework must see a
consistent story for each task, exactly once: it ran and then ended, or it
ended without running; never silence, never two ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.fixtures.images import PushedImage
from tests.integration.faults.workload import (
    container,
    executor_sandbox,
    pod_executor,
    task,
    tid,
)

from mesilla.testing.processes import Cluster
from mesilla.testing.scheduler import TERMINAL_STATES, Framework

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


async def poll(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Waits for state on the host (files, processes), which sends no event."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        await asyncio.sleep(0.01)


def checkpointed_executor(cluster: Cluster, executor_id: str) -> bool:
    return any(cluster.agent_dir(0).glob(f"meta/slaves/*/frameworks/*/executors/{executor_id}/runs/*"))


def assert_one_consistent_end(framework: Framework, task_id: str) -> None:
    """One terminal update; and TASK_KILLED (what we asked for) only after the task ran."""
    ends = framework.terminal(task_id)
    assert len(ends) == 1, (task_id, framework.summary())
    states = framework.states(task_id)
    terminal_at = states.index(ends[0].state)
    assert all(s not in TERMINAL_STATES for s in states[:terminal_at]), states
    if ends[0].state == "TASK_KILLED":
        assert "TASK_RUNNING" in states[:terminal_at] or "TASK_STARTING" in states[:terminal_at], states


@pytest.mark.parametrize("moment", ["executor checkpointed", "first task starting"])
async def test_agent_killed_during_a_pod_launch(
    make_cluster: MakeCluster, make_framework: MakeFramework, busybox_image: PushedImage, moment: str
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster)
    pod = [task(f"t{i}", "sleep 3600", container=container(busybox_image.name, "shared")) for i in range(3)]
    executor = pod_executor()
    executor_id = executor["executor_id"]["value"]
    await framework.launch_group(await framework.offer(), executor, pod)
    if moment == "executor checkpointed":
        await poll(lambda: checkpointed_executor(cluster, executor_id), "checkpointed executor")
    else:
        await framework.until(lambda: any(framework.states(tid(t)) for t in pod), 60, "first update")
    killed_at = time.time()
    cluster.agents[0].kill()

    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=killed_at)
    # Each task either runs (then we kill it) or ends on its own; either way exactly once.
    await framework.until(
        lambda: all(framework.state(tid(t)) in TERMINAL_STATES | {"TASK_RUNNING"} for t in pod), 90,
        "every task running or ended",
    )
    for t in pod:
        if framework.state(tid(t)) == "TASK_RUNNING":
            await framework.kill(tid(t))
    await framework.until_state(map(tid, pod), "TERMINAL", 60)
    for t in pod:
        assert_one_consistent_end(framework, tid(t))
    # The tasks of one pod share a fate up to the kill: all ran, or none did.
    ran = {"TASK_RUNNING" in framework.states(tid(t)) for t in pod}
    assert len(ran) == 1, framework.summary()
    assert cluster.await_no_leftovers() == []
    # And one end: all killed, or all ended alike without running, as the agent checkpoints
    # and recovers a task group as one unit.
    ends = [framework.terminal(tid(t))[0] for t in pod]
    assert len({(e.state, None if ran == {True} else e.reason) for e in ends}) == 1, framework.summary()


async def test_agent_killed_before_a_command_task_reaches_its_executor(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    """The executor's checkpoint is written, the agent dies before the task is delivered: on
    restart the task is lost ("Task launched during agent restart") and, as Mesos derives
    from the tasks (MESOS-8411), the idle executor is shut down instead of kept forever."""
    cluster = make_cluster()
    framework = await make_framework(cluster)
    sleeper = task("undelivered", "sleep 3600")
    await framework.launch(await framework.offer(), [sleeper])
    # Its container is up (the agent checkpoints its pid), its task not yet sent.
    await poll(lambda: any(cluster.agent_dir(0).glob(
        f"meta/slaves/*/frameworks/*/executors/{tid(sleeper)}/runs/*/pids/forked.pid")), "executor pid")
    killed_at = time.time()
    cluster.agents[0].kill()

    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=killed_at)
    await framework.until(
        lambda: framework.state(tid(sleeper)) in TERMINAL_STATES | {"TASK_RUNNING"}, 90,
        "the task running or ended",
    )
    if framework.state(tid(sleeper)) == "TASK_RUNNING":  # delivered before the kill after all
        await framework.kill(tid(sleeper))
    await framework.until_state([tid(sleeper)], "TERMINAL", 60)
    assert_one_consistent_end(framework, tid(sleeper))
    assert cluster.await_no_leftovers() == []


def stdout_of(sandbox: Path, task_id: str | None = None) -> str:
    path = sandbox / "tasks" / task_id / "stdout" if task_id else sandbox / "stdout"
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


IGNORES_TERM = "trap 'echo got-term' TERM; echo started; while true; do sleep 0.1; done"


@pytest.mark.parametrize("kind", ["command task", "pod task"])
async def test_agent_killed_during_a_kill_grace_period(
    make_cluster: MakeCluster, make_framework: MakeFramework, busybox_image: PushedImage, kind: str
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster)
    stubborn = task("stubborn", IGNORES_TERM)
    if kind == "pod task":
        executor = pod_executor()
        await framework.launch_group(await framework.offer(), executor, [stubborn])
        executor_id, task_id = executor["executor_id"]["value"], tid(stubborn)
    else:
        await framework.launch(await framework.offer(), [stubborn])
        executor_id, task_id = tid(stubborn), None
    await framework.until_state([tid(stubborn)], "TASK_RUNNING")
    sandbox = executor_sandbox(cluster, framework.framework_id["value"], executor_id)  # type: ignore[index]
    await poll(lambda: "started" in stdout_of(sandbox, task_id), "task output")

    await framework.kill(tid(stubborn), grace_seconds=4)
    await poll(lambda: "got-term" in stdout_of(sandbox, task_id), "SIGTERM reaching the task")
    killed_at = time.time()
    cluster.agents[0].kill()
    assert framework.state(tid(stubborn)) == "TASK_RUNNING"  # the grace period is not over

    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=killed_at)
    await framework.until_state([tid(stubborn)], "TERMINAL", 60)
    [end] = framework.terminal(tid(stubborn))
    assert end.state == "TASK_KILLED", end.status
    assert_one_consistent_end(framework, tid(stubborn))
    assert cluster.await_no_leftovers() == []
