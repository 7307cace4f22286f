"""Tasks and executors on the master: the one way to add, update and remove them.

A task is TASK_STAGING from launch until its first update; `Task.statuses`
holds the real updates only (without their `data`). A terminal task gives its
resources back to the allocator at once but stays in `Framework.tasks` until
the framework acknowledges the terminal update, as Mesos does; updates the
master makes itself (`master_status`: reconciliation, lost agents) carry no
uuid and need no ACK.

`Tasks` changes the `Book` and does what follows from each change: the
allocator gets resources back, the metrics count terminal states, the
operator API's observers hear of it. A launch (`launch.Launcher`) and an
agent's re-registration (`agents.AgentLinks`) both add tasks through `add`.
"""

from __future__ import annotations

import time

from mesilla.common.protobuf_utils import create_task
from mesilla.common.resources import Resources
from mesilla.master.agent import Agent
from mesilla.master.framework import Framework
from mesilla.master.outbox import TaskUpdated
from mesilla.master.parts import Parts
from mesilla.v1.mesos import (
    AgentID,
    AllocationInfo,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    Reason,
    StatusSource,
    Task,
    TaskID,
    TaskInfo,
    TaskState,
    TaskStatus,
    TimeInfo,
)


def master_status(
    task_id: str,
    state: TaskState,
    reason: Reason,
    message: str,
    *,
    agent_id: str | None = None,
    executor_id: ExecutorID | None = None,
    unreachable_time: float | None = None,
) -> TaskStatus:
    """A status the master makes itself (SOURCE_MASTER, no uuid: frameworks do not ACK it)."""
    return TaskStatus(
        task_id=TaskID(value=task_id),
        state=state,
        source=StatusSource.SOURCE_MASTER,
        reason=reason,
        message=message,
        agent_id=AgentID(value=agent_id) if agent_id else None,
        executor_id=executor_id,
        timestamp=time.time(),
        unreachable_time=(TimeInfo(nanoseconds=int(unreachable_time * 1e9)) if unreachable_time else None),
    )


def task_status(
    task: Task, state: TaskState, reason: Reason, message: str, unreachable_time: float | None = None
) -> TaskStatus:
    """`master_status` for one of the master's task records, on its agent and executor."""
    return master_status(
        task.task_id.value,
        state,
        reason,
        message,
        agent_id=task.agent_id.value,
        executor_id=task.executor_id,
        unreachable_time=unreachable_time,
    )


def task_state_metric(state: TaskState) -> str:
    """Mesos's counter of tasks that reached `state`, e.g. ``master/tasks_finished``."""
    return "master/tasks_" + state.value.removeprefix("TASK_").lower()


def inject_allocation_info(task: TaskInfo | ExecutorInfo, role: str | None) -> None:
    """As Mesos's `injectAllocationInfo` at ACCEPT: every resource of a launched task (and of its
    executor) that the scheduler left without `allocation_info` is allocated to the offer's role,
    so that the task's `role` in /state, /tasks and GET_TASKS, on the master and on its agent,
    is the role it was launched under ("*" for a framework without roles)."""
    if role is None:
        return
    for resource in task.resources:
        if resource.allocation_info is None:
            resource.allocation_info = AllocationInfo(role=role)
    if isinstance(task, TaskInfo) and task.executor is not None:
        inject_allocation_info(task.executor, role)


def new_task_record(framework: Framework, task: TaskInfo) -> Task:
    """The master's Task for a TaskInfo; TASK_STAGING, with no statuses yet."""
    user = (task.command.user if task.command is not None else None) or framework.info.user or None
    return create_task(task, TaskState.TASK_STAGING, FrameworkID(value=framework.id), task.agent_id, user)


class Tasks:
    def __init__(self, parts: Parts) -> None:
        self._parts = parts

    def add(self, task: Task) -> None:
        """A live task on a registered agent: launched, or reported by its agent."""
        self._parts.book.add_task(task)
        self._parts.outbox.notify("TASK_ADDED", task)

    def add_executor(self, framework_id: str, agent_id: str, executor: ExecutorInfo) -> None:
        self._parts.book.add_executor(framework_id, agent_id, executor)

    def update(
        self,
        task: Task,
        status: TaskStatus,
        latest: TaskState | None = None,
        *,
        recover: bool = True,
    ) -> None:
        """Applies `status` to `task`; `latest` is the agent's newest state when it is ahead.
        `recover`: a task that became terminal gives its resources back to the allocator
        (not when the allocator forgets them anyway: its agent or framework is removed)."""
        if self._parts.book.update_task(task, status, latest):
            self._parts.counters[task_state_metric(task.state)] += 1
            if recover:
                self._parts.allocator.recover_resources(
                    task.framework_id.value, task.agent_id.value, Resources.from_list(task.resources)
                )
        self._parts.outbox.notify("TASK_UPDATED", TaskUpdated(task.framework_id, status, task.state))

    def remove(self, task: Task, *, unreachable: bool = False) -> None:
        """Off its agent; into its framework's `unreachable_tasks` or `completed_tasks`."""
        self._parts.book.remove_task(task, unreachable=unreachable)

    async def lose(
        self,
        framework: Framework,
        task: Task,
        state: TaskState,
        reason: Reason,
        message: str,
        unreachable_time: float | None = None,
    ) -> None:
        """A task whose agent left: `state` (TASK_LOST for frameworks not PARTITION_AWARE) to its
        framework, and unreachable (waiting for the agent) when `state` is TASK_UNREACHABLE."""
        unreachable = state is TaskState.TASK_UNREACHABLE
        was_terminal = task.state.terminal
        if not was_terminal:
            sent = state if framework.partition_aware else TaskState.TASK_LOST
            status = task_status(task, sent, reason, message, unreachable_time)
            self.update(task, status, state if unreachable else None, recover=False)
            await self._parts.outbox.update(framework, status)
        self.remove(task, unreachable=unreachable and not was_terminal)

    def recover_executor(self, agent: Agent, framework_id: str, executor_id: str) -> Resources:
        """The executor is gone from its agent: its resources go back to the allocator."""
        executor = self._parts.book.remove_executor(agent, framework_id, executor_id)
        if executor is None:
            return Resources()
        resources = Resources.from_list(executor.resources)
        self._parts.allocator.recover_resources(framework_id, agent.id, resources)
        return resources
