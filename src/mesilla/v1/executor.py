"""Executor API messages (`include/mesos/v1/executor/executor.proto`)."""

from __future__ import annotations

import enum

from mesilla.v1.mesos import (
    AgentInfo,
    ContainerID,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    KillPolicy,
    Message,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
    TaskStatus,
)


class CallType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    SUBSCRIBE = "SUBSCRIBE"
    UPDATE = "UPDATE"
    MESSAGE = "MESSAGE"
    HEARTBEAT = "HEARTBEAT"


class UnacknowledgedUpdate(Message):
    status: TaskStatus
    framework_id: FrameworkID | None = None


class Subscribe(Message):
    unacknowledged_tasks: list[TaskInfo] = []
    unacknowledged_updates: list[UnacknowledgedUpdate] = []


class UpdateCall(Message):
    status: TaskStatus


class MessageCall(Message):
    data: bytes


class Call(Message):
    executor_id: ExecutorID
    framework_id: FrameworkID
    type: CallType
    subscribe: Subscribe | None = None
    update: UpdateCall | None = None
    message: MessageCall | None = None


class EventType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    SUBSCRIBED = "SUBSCRIBED"
    LAUNCH = "LAUNCH"
    LAUNCH_GROUP = "LAUNCH_GROUP"
    KILL = "KILL"
    ACKNOWLEDGED = "ACKNOWLEDGED"
    MESSAGE = "MESSAGE"
    ERROR = "ERROR"
    SHUTDOWN = "SHUTDOWN"
    HEARTBEAT = "HEARTBEAT"


class Subscribed(Message):
    executor_info: ExecutorInfo
    framework_info: FrameworkInfo
    agent_info: AgentInfo
    container_id: ContainerID | None = None


class Launch(Message):
    task: TaskInfo


class LaunchGroup(Message):
    task_group: TaskGroupInfo


class Kill(Message):
    task_id: TaskID
    kill_policy: KillPolicy | None = None


class Acknowledged(Message):
    task_id: TaskID
    uuid: bytes


class MessageEvent(Message):
    data: bytes


class Error(Message):
    message: str


class Event(Message):
    type: EventType
    subscribed: Subscribed | None = None
    launch: Launch | None = None
    launch_group: LaunchGroup | None = None
    kill: Kill | None = None
    acknowledged: Acknowledged | None = None
    message: MessageEvent | None = None
    error: Error | None = None
