"""The agent <-> master protocol (Mesos's `messages.proto`, carried over HTTP).

Mesos agents talk to the master with libprocess messages. Mesilla uses the same
pattern as the scheduler API instead, so that one HTTP stack serves everything:

* The agent opens ``POST /internal/agent`` with a REGISTER call. The master
  answers ``200`` with a chunked RecordIO stream of `AgentEvent`s (first
  REGISTERED, then RUN_TASK, KILL_TASK, ...) and a ``Mesos-Stream-Id`` header.
  REGISTER with ``agent_info.id`` set and the agent's tasks is a
  re-registration (after an agent or master restart).
* Every other call (STATUS_UPDATE, EXECUTOR_MESSAGE, EXITED_EXECUTOR, ...) is a
  separate ``POST /internal/agent`` with the ``Mesos-Stream-Id`` header, answered
  ``202``; a stale stream id gets ``403``.
* Health checks (Mesos's PingSlaveMessage / PongSlaveMessage): the master
  sends PING on the stream every ``--agent_ping_timeout``, and the agent
  answers each with a PONG call. An agent that leaves
  ``--max_agent_ping_timeouts`` pings in a row unanswered (hung, or partitioned
  while TCP stays open) is marked unreachable and its stream is closed; so is
  one whose stream closed (it is disconnected meanwhile) and that does not
  re-register in that time. REGISTERED tells the agent the total,
  ``connection.total_ping_timeout_seconds``: an agent that hears nothing from
  the master for that long takes it as lost and re-registers. PING has no
  ``connected`` field as in Mesos: it only ever travels on the agent's open
  stream, which the master closes when it stops considering the agent connected.
* Status updates are reliable: the agent's status update manager resends each
  until the master relays the framework's acknowledgement as ACKNOWLEDGE.
"""

from __future__ import annotations

import enum

from mesilla.v1.mesos import (
    AgentCapability,
    AgentID,
    AgentInfo,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    KillPolicy,
    MasterInfo,
    Message,
    Task,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
    TaskState,
    TaskStatus,
)


class AgentCallType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    REGISTER = "REGISTER"
    STATUS_UPDATE = "STATUS_UPDATE"
    EXECUTOR_MESSAGE = "EXECUTOR_MESSAGE"
    EXITED_EXECUTOR = "EXITED_EXECUTOR"
    UNREGISTER = "UNREGISTER"
    PONG = "PONG"


class Register(Message):
    agent_info: AgentInfo
    version: str | None = None
    capabilities: list[AgentCapability] = []
    # Re-registration only: what the agent still runs.
    tasks: list[Task] = []
    executor_infos: list[ExecutorInfo] = []
    frameworks: list[FrameworkInfo] = []


class StatusUpdate(Message):
    framework_id: FrameworkID
    status: TaskStatus  # carries uuid, agent_id, executor_id
    # The newest state the agent knows for the task, which may be ahead of
    # `status` while earlier updates wait for acknowledgement.
    latest_state: TaskState | None = None


class ExecutorToFramework(Message):
    framework_id: FrameworkID
    executor_id: ExecutorID
    data: bytes


class ExitedExecutor(Message):
    framework_id: FrameworkID
    executor_id: ExecutorID
    status: int | None = None  # raw wait(2) status


class AgentCall(Message):
    type: AgentCallType
    agent_id: AgentID | None = None
    register: Register | None = None
    status_update: StatusUpdate | None = None
    # STATUS_UPDATE may carry several updates at once instead (or besides), applied in
    # order: an agent with many tasks changing sends one call, not one each.
    status_updates: list[StatusUpdate] = []
    executor_message: ExecutorToFramework | None = None
    exited_executor: ExitedExecutor | None = None


class AgentEventType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    REGISTERED = "REGISTERED"
    RUN_TASK = "RUN_TASK"
    RUN_TASK_GROUP = "RUN_TASK_GROUP"
    KILL_TASK = "KILL_TASK"
    SHUTDOWN_EXECUTOR = "SHUTDOWN_EXECUTOR"
    SHUTDOWN_FRAMEWORK = "SHUTDOWN_FRAMEWORK"
    UPDATE_FRAMEWORK = "UPDATE_FRAMEWORK"
    ACKNOWLEDGE = "ACKNOWLEDGE"
    FRAMEWORK_MESSAGE = "FRAMEWORK_MESSAGE"
    RECONCILE_TASKS = "RECONCILE_TASKS"
    PING = "PING"
    SHUTDOWN = "SHUTDOWN"


class MasterAgentConnection(Message):
    """Mesos's `MasterSlaveConnection`: how the master watches over the agent."""

    # --agent_ping_timeout x --max_agent_ping_timeouts
    total_ping_timeout_seconds: float


class Registered(Message):
    agent_id: AgentID
    master_info: MasterInfo
    connection: MasterAgentConnection


class RunTask(Message):
    framework_info: FrameworkInfo  # with id set
    task: TaskInfo  # executor already resolved by the master (command tasks have none)


class RunTaskGroup(Message):
    framework_info: FrameworkInfo
    executor_info: ExecutorInfo
    task_group: TaskGroupInfo


class KillTask(Message):
    framework_id: FrameworkID
    task_id: TaskID
    kill_policy: KillPolicy | None = None


class ShutdownExecutor(Message):
    framework_id: FrameworkID
    executor_id: ExecutorID


class ShutdownFramework(Message):
    framework_id: FrameworkID


class UpdateFramework(Message):
    framework_info: FrameworkInfo


class Acknowledge(Message):
    framework_id: FrameworkID
    task_id: TaskID
    uuid: bytes


class FrameworkToExecutor(Message):
    framework_id: FrameworkID
    executor_id: ExecutorID
    data: bytes


class ReconcileTasks(Message):
    """The master asks for the latest state of tasks it believes are on the agent; the
    agent answers those it does not know with a reliable TASK_LOST (TASK_DROPPED for a
    PARTITION_AWARE `framework_info`, which the agent may not know itself)."""

    framework_id: FrameworkID
    task_ids: list[TaskID] = []
    framework_info: FrameworkInfo | None = None


class Shutdown(Message):
    message: str | None = None


class AgentEvent(Message):
    type: AgentEventType
    registered: Registered | None = None
    run_task: RunTask | None = None
    run_task_group: RunTaskGroup | None = None
    kill_task: KillTask | None = None
    shutdown_executor: ShutdownExecutor | None = None
    shutdown_framework: ShutdownFramework | None = None
    update_framework: UpdateFramework | None = None
    acknowledge: Acknowledge | None = None
    framework_message: FrameworkToExecutor | None = None
    reconcile_tasks: ReconcileTasks | None = None
    shutdown: Shutdown | None = None
