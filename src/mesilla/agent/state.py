"""The agent's bookkeeping of frameworks, executors and tasks (Mesos's `Framework`/`Executor`).

Pure state, no I/O: the `Agent` decides and acts, these classes only record.
A task moves through an executor as in Mesos:

    queued (TaskInfo, not yet given to the executor)
      -> launched (Task, sent in LAUNCH / LAUNCH_GROUP)
      -> terminated (Task in a terminal state, its terminal update unacknowledged)
      -> completed (terminal update acknowledged; kept for /state, bounded)
"""

from __future__ import annotations

import asyncio
import enum
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import msgspec

from mesilla.common.http import EventStream
from mesilla.common.protobuf_utils import create_task
from mesilla.containerizer.types import ContainerTermination
from mesilla.v1.mesos import (
    AgentID,
    ContainerID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    Resource,
    StatusSource,
    Task,
    TaskGroupInfo,
    TaskInfo,
    TaskState,
    TaskStatus,
)

MAX_COMPLETED_TASKS_PER_EXECUTOR = 200
MAX_COMPLETED_EXECUTORS_PER_FRAMEWORK = 150
MAX_COMPLETED_FRAMEWORKS = 50


class TaskStateError(Exception):
    """A status update that the task's current state does not allow; names the task."""


class ExecutorState(enum.Enum):
    REGISTERING = "REGISTERING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"


class FrameworkState(enum.Enum):
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"


@dataclass
class Executor:
    info: ExecutorInfo
    framework_id: FrameworkID
    agent_id: AgentID
    container_id: ContainerID
    directory: str
    checkpoint: bool
    # A command executor the agent made up for a command task (Mesos's
    # `isGeneratedForCommandTask`): its exit is not reported to the framework.
    command_task: bool = False
    state: ExecutorState = ExecutorState.REGISTERING
    stream: EventStream | None = None
    queued_tasks: OrderedDict[str, TaskInfo] = field(default_factory=OrderedDict)
    queued_groups: list[TaskGroupInfo] = field(default_factory=list)
    launched_tasks: OrderedDict[str, Task] = field(default_factory=OrderedDict)
    terminated_tasks: OrderedDict[str, Task] = field(default_factory=OrderedDict)
    completed_tasks: deque[Task] = field(
        default_factory=lambda: deque(maxlen=MAX_COMPLETED_TASKS_PER_EXECUTOR)
    )
    # Why the agent is ending this executor, for the tasks' terminal updates.
    pending_termination: ContainerTermination | None = None
    # Tasks the framework asked to kill: if the executor dies first they end KILLED.
    killing: set[str] = field(default_factory=set)
    # Serializes the executor's status updates, which wait on the containerizer.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    # The last of the agent's jobs for this executor that run one after the
    # other: launch checkpoints (written in a thread) and what is sent to it.
    in_flight: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return self.info.executor_id.value

    def __str__(self) -> str:
        return f"'{self.id}' of framework {self.framework_id.value}"

    def cancel_timers(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()

    # -- tasks --

    def queue_task(self, task: TaskInfo) -> None:
        self.queued_tasks[task.task_id.value] = task

    def queue_group(self, group: TaskGroupInfo) -> None:
        self.queued_groups.append(group)
        for task in group.tasks:
            self.queue_task(task)

    def queued_group_of(self, task_id: str) -> TaskGroupInfo | None:
        for group in self.queued_groups:
            if any(t.task_id.value == task_id for t in group.tasks):
                return group
        return None

    def launch_queued(self) -> tuple[list[TaskInfo], list[TaskGroupInfo]]:
        """Moves every queued task to launched; returns (lone tasks, groups) to deliver."""
        grouped = {t.task_id.value for g in self.queued_groups for t in g.tasks}
        lone = [t for tid, t in self.queued_tasks.items() if tid not in grouped]
        groups = self.queued_groups
        for info in self.queued_tasks.values():
            self.launched_tasks[info.task_id.value] = create_task(
                info, TaskState.TASK_STAGING, self.framework_id, self.agent_id
            )
        self.queued_tasks = OrderedDict()
        self.queued_groups = []
        return lone, groups

    def add_launched(self, info: TaskInfo) -> Task:
        task = create_task(info, TaskState.TASK_STAGING, self.framework_id, self.agent_id)
        self.launched_tasks[info.task_id.value] = task
        return task

    @property
    def ever_sent_task(self) -> bool:
        """Whether the executor has been given a task, derived from its tasks as Mesos's
        `Executor::everSentTask` (MESOS-8411), so that it holds after a recovery too: a task
        still launched, or an ended one the executor itself reported on. A task the agent
        ended before delivery (killed, or lost in a restart) does not count."""
        if self.launched_tasks:
            return True
        return any(
            status.source is StatusSource.SOURCE_EXECUTOR
            for task in (*self.terminated_tasks.values(), *self.completed_tasks)
            for status in task.statuses
        )

    def find_task(self, task_id: str) -> Task | None:
        return self.launched_tasks.get(task_id) or self.terminated_tasks.get(task_id)

    def has_task(self, task_id: str) -> bool:
        return (
            task_id in self.queued_tasks
            or task_id in self.launched_tasks
            or task_id in self.terminated_tasks
        )

    def update_task_state(self, status: TaskStatus) -> Task:
        """Records `status` on its task, moving it along the lifecycle above."""
        task_id = status.task_id.value
        if task_id in self.queued_tasks:
            if not status.state.terminal:
                raise TaskStateError(
                    f"Queued task '{task_id}' can only move to a terminal state, "
                    f"not {status.state.value}"
                )
            info = self.queued_tasks.pop(task_id)
            self.queued_groups = [
                g
                for g in self.queued_groups
                if any(t.task_id.value in self.queued_tasks for t in g.tasks)
            ]
            task = create_task(info, status.state, self.framework_id, self.agent_id)
        elif task_id in self.launched_tasks:
            task = self.launched_tasks[task_id]
        elif task_id in self.terminated_tasks:
            raise TaskStateError(
                f"Task '{task_id}' is already {self.terminated_tasks[task_id].state.value}; "
                f"ignoring {status.state.value}"
            )
        else:
            raise TaskStateError(f"Task '{task_id}' is unknown to executor {self}")
        task.state = status.state
        # As Mesos, the agent keeps statuses without their (possibly large) data.
        task.statuses.append(_without_data(status))
        if status.state.terminal:
            self.launched_tasks.pop(task_id, None)
            self.terminated_tasks[task_id] = task
        return task

    def complete_task(self, task_id: str) -> None:
        task = self.terminated_tasks.pop(task_id, None)
        if task is not None:
            self.completed_tasks.append(task)

    def incomplete_tasks(self) -> bool:
        return bool(self.queued_tasks or self.launched_tasks or self.terminated_tasks)

    def allocated_resources(self) -> list[Resource]:
        resources = list(self.info.resources)
        for info in self.queued_tasks.values():
            resources.extend(info.resources)
        for task in self.launched_tasks.values():
            resources.extend(task.resources)
        return resources


def _without_data(status: TaskStatus) -> TaskStatus:
    if status.data is None:
        return status
    return msgspec.structs.replace(status, data=None)


@dataclass
class Framework:
    info: FrameworkInfo
    state: FrameworkState = FrameworkState.RUNNING
    executors: dict[str, Executor] = field(default_factory=dict)
    completed_executors: deque[Executor] = field(
        default_factory=lambda: deque(maxlen=MAX_COMPLETED_EXECUTORS_PER_FRAMEWORK)
    )

    @property
    def id(self) -> FrameworkID:
        assert self.info.id is not None
        return self.info.id

    @property
    def checkpoint(self) -> bool:
        return self.info.checkpoint

    def executor_of_task(self, task_id: str) -> Executor | None:
        for executor in self.executors.values():
            if executor.has_task(task_id):
                return executor
        return None

    def idle(self) -> bool:
        return not self.executors
