"""The executor's task bookkeeping: queued -> launched -> terminated -> completed."""

from __future__ import annotations

import pytest

from mesilla.agent.state import Executor, TaskStateError
from mesilla.common.resources import Resources
from mesilla.v1.mesos import (
    AgentID,
    ContainerID,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
    TaskState,
    TaskStatus,
)


def executor() -> Executor:
    return Executor(
        info=ExecutorInfo(executor_id=ExecutorID(value="e")),
        framework_id=FrameworkID(value="f"),
        agent_id=AgentID(value="a"),
        container_id=ContainerID(value="c"),
        directory="/sandbox",
        checkpoint=False,
    )


def info(task_id: str) -> TaskInfo:
    return TaskInfo(name=task_id, task_id=TaskID(value=task_id), agent_id=AgentID(value="a"))


def status(task_id: str, state: TaskState, data: bytes | None = None) -> TaskStatus:
    return TaskStatus(task_id=TaskID(value=task_id), state=state, data=data)


def test_a_task_moves_through_its_lifecycle() -> None:
    e = executor()
    e.queue_task(info("t"))
    lone, groups = e.launch_queued()
    assert [t.task_id.value for t in lone] == ["t"] and groups == []
    assert e.ever_sent_task and e.launched_tasks["t"].state is TaskState.TASK_STAGING
    e.update_task_state(status("t", TaskState.TASK_RUNNING, data=b"big"))
    assert e.launched_tasks["t"].statuses[-1].data is None  # kept without its data
    e.update_task_state(status("t", TaskState.TASK_FINISHED))
    assert "t" in e.terminated_tasks and e.incomplete_tasks()
    with pytest.raises(TaskStateError, match="already TASK_FINISHED"):
        e.update_task_state(status("t", TaskState.TASK_FAILED))
    e.complete_task("t")
    assert not e.incomplete_tasks() and e.completed_tasks[-1].task_id.value == "t"


def test_groups_are_delivered_whole_and_killed_whole() -> None:
    e = executor()
    e.queue_group(TaskGroupInfo(tasks=[info("a"), info("b")]))
    e.queue_task(info("lone"))
    assert e.queued_group_of("b") is not None and e.queued_group_of("lone") is None
    e.update_task_state(status("a", TaskState.TASK_KILLED))
    e.update_task_state(status("b", TaskState.TASK_KILLED))
    assert e.queued_groups == []  # no empty group is ever delivered
    lone, groups = e.launch_queued()
    assert [t.task_id.value for t in lone] == ["lone"] and groups == []


def test_queued_tasks_only_end() -> None:
    e = executor()
    e.queue_task(info("t"))
    with pytest.raises(TaskStateError, match="terminal"):
        e.update_task_state(status("t", TaskState.TASK_RUNNING))
    with pytest.raises(TaskStateError, match="unknown"):
        e.update_task_state(status("nope", TaskState.TASK_RUNNING))


def test_allocated_resources_follow_the_tasks() -> None:
    e = executor()
    e.info.resources = Resources.parse("cpus:0.1").to_list()
    task = info("t")
    task.resources = Resources.parse("cpus:1").to_list()
    e.queue_task(task)
    assert Resources.from_list(e.allocated_resources()).scalar("cpus") == 1.1
    e.launch_queued()
    e.update_task_state(status("t", TaskState.TASK_FINISHED))
    assert Resources.from_list(e.allocated_resources()).scalar("cpus") == 0.1
