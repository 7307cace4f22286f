"""A task group is checkpointed and recovered as one unit, whatever instant the agent dies at.

A crash is simulated by stopping the file-system work at its n-th mutating
call (what a kill -9 at that instant leaves on disk), for every n until the
work completes; recovery must then see every task of the group or none.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mesilla.agent import checkpoints, launches, paths, recovery, terminations
from mesilla.agent.agent import Agent, AgentStatus
from mesilla.agent.flags import AgentFlags
from mesilla.agent.main import AGENT_FLAGS
from mesilla.agent.master_events import MasterEvents
from mesilla.agent.state import ExecutorState
from mesilla.common.flags import parse
from mesilla.containerizer.types import ContainerTermination
from mesilla.v1 import executor as ev
from mesilla.v1.mesos import (
    AgentID,
    AgentInfo,
    ContainerID,
    ContainerStatus,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    Reason,
    Task,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
    TaskState,
)

AGENT, FW, EX, CID = "A1", "F", "E", "C"
GROUP = ["t0", "t1", "t2"]


class Crash(Exception):
    """The process died here."""


# Every call that changes what is on disk; a crash lands between two of them.
_MUTATING = [(os, "replace"), (os, "unlink"), (os, "fsync"), (os, "symlink"), (shutil, "rmtree")]


@contextmanager
def crash_at(step: int) -> Iterator[list[int]]:
    """Raises `Crash` instead of the `step`-th mutating call; yields [calls made]."""
    calls = [0]

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if calls[0] == step:
                raise Crash
            calls[0] += 1
            return real(*args, **kwargs)

        return call

    with pytest.MonkeyPatch.context() as mp:
        for module, name in _MUTATING:
            mp.setattr(module, name, wrap(getattr(module, name)))
        yield calls


async def until_no_crash(work: Callable[[int], Awaitable[None]]) -> int:
    """Runs `work(step)` with a crash at step 0, 1, ... until one run completes; the steps."""
    for step in range(1000):
        try:
            await work(step)
        except Crash:
            continue
        return step
    raise AssertionError("the work never completed")


def _task(task_id: str) -> Task:
    return Task(
        name=task_id,
        task_id=TaskID(value=task_id),
        framework_id=FrameworkID(value=FW),
        agent_id=AgentID(value=AGENT),
        state=TaskState.TASK_STAGING,
    )


def _agent_tree(work_dir: str) -> checkpoints.MetaDir:
    """A checkpointed agent, framework and executor run that already has a lone task."""
    checkpoints.checkpoint_agent(work_dir, AgentInfo(hostname="h", id=AgentID(value=AGENT)))
    meta = checkpoints.MetaDir(work_dir, AGENT)
    framework = FrameworkInfo(user="u", name="n", id=FrameworkID(value=FW), checkpoint=True)
    executor = ExecutorInfo(executor_id=ExecutorID(value=EX))
    meta.launch(EX, CID, [_task("lone")], framework=framework, executor=executor).write()
    return meta


def _recovered_tasks(work_dir: str) -> set[str]:
    state = checkpoints.recover_agent(work_dir, strict=True)
    assert state is not None
    run = state.frameworks[FW].executors[EX].runs[CID]
    assert all(t.task is not None for t in run.tasks.values())
    return set(run.tasks)


def _pending(work_dir: str) -> bool:
    return os.path.exists(paths.pending_task_group_path(work_dir, AGENT, FW, EX, CID))


async def test_a_crash_while_checkpointing_a_group_leaves_all_or_none(tmp_path: Path) -> None:
    outcomes: set[frozenset[str]] = set()

    async def checkpoint_group(step: int) -> None:
        work_dir = str(tmp_path / f"write-{step}")
        meta = _agent_tree(work_dir)
        try:
            with crash_at(step):
                meta.launch(EX, CID, [_task(t) for t in GROUP]).write()
        finally:
            recovered = _recovered_tasks(work_dir)
            assert recovered in ({"lone"}, {"lone", *GROUP}), (step, recovered)
            assert not _pending(work_dir)  # recovery finished the discarding
            assert _recovered_tasks(work_dir) == recovered  # and it is stable
            outcomes.add(frozenset(recovered))

    steps = await until_no_crash(checkpoint_group)
    assert steps > len(GROUP)  # every task.info write was interrupted once
    # Early crashes lose the group, late ones keep it: both are seen.
    assert outcomes == {frozenset({"lone"}), frozenset({"lone", *GROUP})}


async def test_a_crash_while_discarding_a_half_written_group_is_repaired_by_the_next_recovery(
    tmp_path: Path,
) -> None:
    def half_written(work_dir: str) -> None:
        meta = _agent_tree(work_dir)
        # After the marker (fsync, rename, fsync of the directory), the group's three
        # fsyncs and t0's rename.
        with pytest.raises(Crash), crash_at(7):
            meta.launch(EX, CID, [_task(t) for t in GROUP]).write()
        tasks_dir = os.path.dirname(paths.task_meta_dir(work_dir, AGENT, FW, EX, CID, "t0"))
        assert "t0" in os.listdir(tasks_dir) and _pending(work_dir)
        assert os.path.exists(paths.task_info_path(work_dir, AGENT, FW, EX, CID, "t0"))

    async def recover_twice(step: int) -> None:
        work_dir = str(tmp_path / f"recover-{step}")
        half_written(work_dir)
        try:
            with crash_at(step):
                checkpoints.recover_agent(work_dir, strict=True)
        finally:
            assert _recovered_tasks(work_dir) == {"lone"}
            assert not _pending(work_dir)

    assert await until_no_crash(recover_twice) > 1


def test_an_unreadable_pending_marker_is_a_checkpoint_error(tmp_path: Path) -> None:
    work_dir = str(tmp_path)
    _agent_tree(work_dir)
    pending = paths.pending_task_group_path(work_dir, AGENT, FW, EX, CID)
    with open(pending, "wb") as f:
        f.write(b'{"not": "a list"}')
    with pytest.raises(checkpoints.CheckpointError, match=r"task_group\.pending"):
        checkpoints.recover_agent(work_dir, strict=True)
    state = checkpoints.recover_agent(work_dir, strict=False)
    assert state is not None and state.errors == 1


def test_a_lone_task_writes_no_marker(tmp_path: Path) -> None:
    work_dir = str(tmp_path)
    _agent_tree(work_dir)
    run = paths.run_meta_dir(work_dir, AGENT, FW, EX, CID)
    # Mesos's layout, nothing more, for ordinary tasks.
    assert sorted(os.listdir(run)) == ["tasks"]
    assert os.listdir(os.path.join(run, "tasks", "lone")) == ["task.info"]


# --- the agent: launching a pod, dying, recovering ------------------------------------


class NoContainers:
    """A containerizer whose containers are all gone (below the agent, the interface under
    test): what the agent finds after dying before its executor's container started."""

    async def recover(self, checkpointed: set[ContainerID]) -> None:
        return None

    def containers(self) -> list[ContainerID]:
        return []

    async def wait(self, container_id: ContainerID) -> ContainerTermination | None:
        return None

    async def update(self, container_id: ContainerID, resources: Any, limits: Any) -> None:
        return None


class RunningContainers(NoContainers):
    """Containers that start and keep running."""

    async def launch(self, container_id: ContainerID, config: Any) -> None:
        return None

    async def status(self, container_id: ContainerID) -> ContainerStatus:
        return ContainerStatus()

    async def wait(self, container_id: ContainerID) -> ContainerTermination | None:
        await asyncio.Event().wait()
        return None


async def _new_agent(work_dir: str, agent_id: str | None, containerizer: Any = None) -> Agent:
    flags = parse(AGENT_FLAGS, ["--master=127.0.0.1:1", f"--work_dir={work_dir}"], environ={})
    info = AgentInfo(hostname="h", id=AgentID(value=agent_id) if agent_id else None)
    agent = Agent(AgentFlags.from_flags(flags), containerizer or NoContainers(), info)
    return agent


def _pod(*task_ids: str) -> TaskGroupInfo:
    agent_id = AgentID(value=AGENT)
    return TaskGroupInfo(
        tasks=[TaskInfo(name=t, task_id=TaskID(value=t), agent_id=agent_id) for t in task_ids]
    )


Fates = dict[str, tuple[TaskState, Reason | None]]  # a task's end and its reason
FRAMEWORK = FrameworkInfo(user="u", name="n", id=FrameworkID(value=FW), checkpoint=True)
EXECUTOR = ExecutorInfo(executor_id=ExecutorID(value=EX), type="DEFAULT")


async def _recover(work_dir: str) -> Fates:
    """Restarts the agent on `work_dir`; what it reports of each task once its executors ended."""
    agent = await _new_agent(work_dir, None)
    try:
        await recovery.recover(agent)
        for _ in range(100):  # the executors' waits answer at once
            await asyncio.sleep(0)
        executors = [e for f in agent.frameworks.values() for e in f.executors.values()]
        assert all(e.state is ExecutorState.TERMINATED for e in executors)
        tasks = MasterEvents(agent).register_call().tasks
        return {t.task_id.value: (t.state, t.statuses[-1].reason) for t in tasks}
    finally:
        await agent.close()


async def _checkpointed(agent: Agent) -> None:
    """Waits for the launch checkpoints the agent writes in a worker thread (and their Crash)."""
    for framework in agent.frameworks.values():
        for executor in framework.executors.values():
            if executor.in_flight is not None:
                await executor.in_flight


def _assert_one_fate(reported: Fates, group: list[str]) -> bool:
    """The group's tasks are all unknown to the agent (the master then reports each one
    LOST the same way) or all end alike; True if they are known."""
    known = [t for t in group if t in reported]
    assert known in ([], group), reported
    assert len({reported[t] for t in known}) <= 1, reported
    return bool(known)


# A lone task too: its framework, executor and task are written in one batch.
@pytest.mark.parametrize("group", [GROUP, ["solo"]])
async def test_an_agent_killed_during_a_pod_launch_recovers_the_pod_as_one(
    tmp_path: Path, group: list[str]
) -> None:
    known: set[bool] = set()

    async def launch_then_recover(step: int) -> None:
        work_dir = str(tmp_path / f"pod-{step}")
        checkpoints.checkpoint_agent(work_dir, AgentInfo(hostname="h", id=AgentID(value=AGENT)))
        agent = await _new_agent(work_dir, AGENT)
        try:
            with crash_at(step):
                launches.run_task_group(agent, FRAMEWORK, EXECUTOR, _pod(*group))
                await _checkpointed(agent)
        finally:
            await agent.close()  # dead: nothing it spawned runs
            reported = await _recover(work_dir)
            if _assert_one_fate(reported, group):
                assert {s for s, _ in reported.values()} == {TaskState.TASK_FAILED}
            known.add(bool(reported))

    await until_no_crash(launch_then_recover)
    assert known == {False, True}


async def test_an_agent_killed_while_adding_a_pod_to_a_running_executor(tmp_path: Path) -> None:
    known: set[bool] = set()

    async def add_then_recover(step: int) -> None:
        work_dir = str(tmp_path / f"pod-{step}")
        checkpoints.checkpoint_agent(work_dir, AgentInfo(hostname="h", id=AgentID(value=AGENT)))
        agent = await _new_agent(work_dir, AGENT)
        try:
            launches.run_task_group(agent, FRAMEWORK, EXECUTOR, _pod("first"))
            await _checkpointed(agent)
            # As if the executor had subscribed and got the first pod.
            executor = agent.frameworks[FW].executors[EX]
            executor.launch_queued()
            executor.state = ExecutorState.RUNNING
            with crash_at(step):
                launches.run_task_group(agent, FRAMEWORK, EXECUTOR, _pod(*GROUP))
                await _checkpointed(agent)
        finally:
            await agent.close()
            reported = await _recover(work_dir)
            assert "first" in reported
            known.add(_assert_one_fate(reported, GROUP))

    await until_no_crash(add_then_recover)
    assert known == {False, True}


async def test_an_executor_hears_of_tasks_once_they_are_checkpointed_and_in_order(
    tmp_path: Path,
) -> None:
    work_dir = str(tmp_path)
    checkpoints.checkpoint_agent(work_dir, AgentInfo(hostname="h", id=AgentID(value=AGENT)))
    agent = await _new_agent(work_dir, AGENT, RunningContainers())
    agent.status = AgentStatus.RUNNING
    sent: list[tuple[ev.EventType, list[str], bool]] = []

    class Stream:
        """The executor's end of its SUBSCRIBE stream: what it hears, and whether the tasks
        it hears of were checkpointed by then."""

        def __init__(self, container_id: str) -> None:
            self.container_id = container_id

        async def send(self, event: ev.Event) -> None:
            if event.launch_group is not None:
                ids = [t.task_id.value for t in event.launch_group.task_group.tasks]
            else:
                assert event.kill is not None
                ids = [event.kill.task_id.value]
            durable = all(
                os.path.exists(paths.task_info_path(work_dir, AGENT, FW, EX, self.container_id, t))
                for t in ids
            )
            sent.append((event.type, ids, durable))

        def close(self) -> None:
            pass

    try:
        launches.run_task_group(agent, FRAMEWORK, EXECUTOR, _pod("first"))
        await _checkpointed(agent)
        executor = agent.frameworks[FW].executors[EX]
        executor.launch_queued()
        executor.state = ExecutorState.RUNNING
        executor.stream = Stream(executor.container_id.value)  # type: ignore[assignment]
        launches.run_task_group(agent, FRAMEWORK, EXECUTOR, _pod("a1", "a2"))
        launches.run_task_group(agent, FRAMEWORK, EXECUTOR, _pod("b1"))
        terminations.kill_task(agent, FrameworkID(value=FW), "a1", None)
        await _checkpointed(agent)
    finally:
        await agent.close()
    group = ev.EventType.LAUNCH_GROUP
    kill = ev.EventType.KILL
    assert sent == [(group, ["a1", "a2"], True), (group, ["b1"], True), (kill, ["a1"], True)]


async def test_a_terminated_executor_is_left_out_of_the_reregistration(tmp_path: Path) -> None:
    """As Mesos (`Slave::doReliableRegistration`): an executor that terminated, and waits only
    for its tasks' updates to be acknowledged, is not reported as running (its tasks are),
    or a master adopting it would hold it and its resources forever. Found by the chaos
    run (tests/chaos, seed 2): an executor exiting during the agent's recovery."""
    work_dir = str(tmp_path)
    checkpoints.checkpoint_agent(work_dir, AgentInfo(hostname="h", id=AgentID(value=AGENT)))
    agent = await _new_agent(work_dir, AGENT)
    try:
        launches.run_task_group(agent, FRAMEWORK, EXECUTOR, _pod("t0"))
        await _checkpointed(agent)
    finally:
        await agent.close()
    agent = await _new_agent(work_dir, None)
    try:
        await recovery.recover(agent)
        for _ in range(100):  # the executor's wait answers at once: it is gone
            await asyncio.sleep(0)
        executors = [e for f in agent.frameworks.values() for e in f.executors.values()]
        assert [e.state for e in executors] == [ExecutorState.TERMINATED]
        register = MasterEvents(agent).register_call()
        assert [t.task_id.value for t in register.tasks] == ["t0"]
        assert register.executor_infos == []
    finally:
        await agent.close()
