"""Task and resource bookkeeping of the master, without HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from mesilla.common.flags import parse
from mesilla.common.resources import Resources
from mesilla.master.agent import Agent
from mesilla.master.framework import Framework
from mesilla.master.main import MASTER_FLAGS
from mesilla.master.master import Master, ip_as_int, parse_weights
from mesilla.master.registry import InMemoryRegistry
from mesilla.master.tasks import new_task_record
from mesilla.v1.mesos import (
    AgentID,
    AgentInfo,
    CommandInfo,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    TaskID,
    TaskInfo,
    TaskState,
    TaskStatus,
)


@pytest.fixture
def master(tmp_path: Any) -> Master:
    flags = parse(
        MASTER_FLAGS,
        [f"--work_dir={tmp_path}", "--max_completed_tasks_per_framework=2"],
        environ={},
    )
    return Master(flags, InMemoryRegistry())


def setup_task(master: Master, task_id: str = "t") -> tuple[Framework, Agent, Any]:
    framework = master.frameworks.get("fw") or master.book.add_framework(
        "fw", FrameworkInfo(user="u", name="n", id=FrameworkID(value="fw"))
    )
    agent = master.agents.get("a") or master.book.add_agent(
        AgentInfo(
            hostname="h",
            id=AgentID(value="a"),
            resources=Resources.parse("cpus:4;mem:1024").to_list(),
        ),
        "slave(1)@127.0.0.1:5051",
        version=None,
        capabilities=[],
        now=0.0,
    )
    info = TaskInfo(
        name=task_id,
        task_id=TaskID(value=task_id),
        agent_id=AgentID(value="a"),
        resources=Resources.parse("cpus:1;mem:128").to_list(),
        command=CommandInfo(value="true"),
    )
    record = new_task_record(framework, info)
    master.book.add_task(record)
    return framework, agent, record


def status(state: str, uuid: bytes | None = b"u" * 16, **extra: Any) -> TaskStatus:
    return TaskStatus(
        task_id=TaskID(value="t"), state=TaskState(state), uuid=uuid, **extra
    )


def test_a_new_task_is_staging_without_statuses(master: Master) -> None:
    _, _, task = setup_task(master)
    assert task.state is TaskState.TASK_STAGING and task.statuses == []
    assert task.user == "u"


def test_statuses_start_with_the_first_update_and_drop_duplicates_and_data(
    master: Master,
) -> None:
    _, _, task = setup_task(master)
    running = status("TASK_RUNNING", data=b"payload")
    master.tasks.update(task, running)
    master.tasks.update(task, running)  # an agent retry: same uuid
    assert [s.state for s in task.statuses] == [TaskState.TASK_RUNNING]
    assert task.statuses[0].data is None
    master.tasks.update(task, status("TASK_FINISHED", uuid=b"v" * 16))
    assert [s.state.value for s in task.statuses] == ["TASK_RUNNING", "TASK_FINISHED"]
    assert task.status_update_uuid == b"v" * 16


def test_latest_state_is_the_task_state(master: Master) -> None:
    _, _, task = setup_task(master)
    master.tasks.update(task, status("TASK_RUNNING"), TaskState.TASK_FAILED)
    assert task.state is TaskState.TASK_FAILED
    assert task.status_update_state is TaskState.TASK_RUNNING
    assert master.counters["master/tasks_failed"] == 1


def test_terminal_task_frees_its_resources_once(master: Master) -> None:
    framework, agent, task = setup_task(master)
    assert agent.used_resources() == {"fw": Resources.parse("cpus:1;mem:128")}
    assert framework.used_resources() == {"a": Resources.parse("cpus:1;mem:128")}
    master.tasks.update(task, status("TASK_KILLED"))
    master.tasks.update(task, status("TASK_KILLED", uuid=b"w" * 16))
    assert master.counters["master/tasks_killed"] == 1
    assert agent.used_resources() == {} and framework.used_resources() == {}


def test_removed_tasks_are_completed_and_bounded(master: Master) -> None:
    for name in ("t1", "t2", "t3"):
        framework, agent, task = setup_task(master, name)
        master.tasks.remove(task)
    assert [t.task_id.value for t in framework.completed_tasks] == ["t2", "t3"]
    assert framework.tasks == {} and agent.tasks == {}


def test_unreachable_tasks_wait_apart(master: Master) -> None:
    framework, _, task = setup_task(master)
    master.tasks.remove(task, unreachable=True)
    assert framework.unreachable_tasks == {"t": task}
    assert framework.task("t") is task
    assert list(master.book.tasks()) == [task]


def test_executors_count_as_used(master: Master) -> None:
    framework, agent, _ = setup_task(master)
    executor = ExecutorInfo(
        executor_id=ExecutorID(value="e"),
        resources=Resources.parse("cpus:0.5").to_list(),
    )
    master.book.add_executor("fw", "a", executor)
    assert agent.used_resources()["fw"] == Resources.parse("cpus:1.5;mem:128")
    assert master.tasks.recover_executor(agent, "fw", "e") == Resources.parse("cpus:0.5")
    assert framework.executors == {} and agent.executors == {}


def test_ids_and_addresses(master: Master) -> None:
    assert master.book.new_framework_id() == f"{master.id}-0000"
    assert master.book.new_framework_id() == f"{master.id}-0001"
    assert master.book.new_agent_id() == f"{master.id}-S0"
    assert master.book.new_offer_id() == f"{master.id}-O0"
    master.set_address("127.0.0.1", 5050)
    assert master.master_info.ip == ip_as_int("127.0.0.1") == 16777343
    assert master.master_info.pid == "master@127.0.0.1:5050"


def test_observers_are_told_and_a_failing_one_does_not_break_others(
    master: Master,
) -> None:
    seen: list[str] = []

    def broken(kind: str, payload: Any) -> None:
        raise RuntimeError("observer bug")

    master.add_observer(broken)
    master.add_observer(lambda kind, payload: seen.append(kind))
    _, _, task = setup_task(master)
    master.tasks.update(task, status("TASK_RUNNING"))
    assert seen == ["TASK_UPDATED"]
    master.remove_observer(broken)


def test_weights_flag() -> None:
    assert parse_weights("a=2,b=0.5") == {"a": 2.0, "b": 0.5}
    assert parse_weights(None) is None
    for bad in ("a", "a=x", "a=-1", "=2"):
        with pytest.raises(ValueError, match="role=weight"):
            parse_weights(bad)
