"""What the default executor's state machine hears (events) and asks for (instructions).

Plain immutable tuples of JSON dicts, cheap to create at start-up: the I/O
shell (`mesilla.executor.default`) builds events from what the agent says and
carries out instructions; `mesilla.executor.default_state` maps one to the other.
Being tuples, two of different types compare equal when their values do:
compare types too when that matters.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

Json = dict[str, Any]


# --- events ------------------------------------------------------------------------


class Subscribed(NamedTuple):
    container_id: Json  # the executor's own container
    capabilities: frozenset[str]  # FrameworkInfo.capabilities types


class LaunchGroup(NamedTuple):
    tasks: list[Json]  # TaskInfo dicts


class ContainerLaunched(NamedTuple):
    task_id: str
    container_id: Json
    error: str | None = None  # None: the agent answered 200
    # No answer at all (the connection to the agent failed): whether the
    # container exists is unknown, unlike a refusal, which `error` alone means.
    agent_lost: bool = False


class ContainerExited(NamedTuple):
    """The WAIT_CONTAINER answer; `exit_status` is a raw wait(2) status or None (unknown)."""

    task_id: str
    container_id: Json
    exit_status: int | None = None
    state: str | None = None
    reason: str | None = None
    message: str | None = None
    limitation: Json | None = None
    ran_for: float | None = None  # seconds since the launch answered, when known


class KillTask(NamedTuple):
    task_id: str
    kill_policy: Json | None = None


class TimerFired(NamedTuple):
    timer: Timer


class CheckUpdated(NamedTuple):
    task_id: str
    check_status: Json  # CheckStatusInfo


class HealthUpdated(NamedTuple):
    task_id: str
    healthy: bool
    kill_task: bool = False


class Shutdown(NamedTuple):
    pass


Event = (
    Subscribed
    | LaunchGroup
    | ContainerLaunched
    | ContainerExited
    | KillTask
    | TimerFired
    | CheckUpdated
    | HealthUpdated
    | Shutdown
)


# --- instructions ----------------------------------------------------------------------


class TimerKind(enum.Enum):
    ESCALATE = "escalate"  # SIGTERM grace period over: SIGKILL
    RESTART = "restart"  # restart backoff over: relaunch
    MAX_COMPLETION = "max_completion"


class Timer(NamedTuple):
    kind: TimerKind
    task_id: str
    attempt: int  # the task's attempt the timer belongs to; stale ones are ignored


class SendUpdate(NamedTuple):
    status: Json  # TaskStatus without uuid and timestamp (the driver adds them)


class LaunchContainer(NamedTuple):
    task_id: str
    container_id: Json
    task: Json
    # The previous attempt's container, whose sandbox the new one takes over.
    reuse_sandbox_of: Json | None = None


class WaitContainer(NamedTuple):
    task_id: str
    container_id: Json


class KillContainer(NamedTuple):
    task_id: str
    container_id: Json
    signal: int


class StartTimer(NamedTuple):
    timer: Timer
    delay: float


class CancelTimer(NamedTuple):
    timer: Timer


class LinkSandbox(NamedTuple):
    """`tasks/<task_id>` -> `containers/<container value>` in the executor sandbox."""

    task_id: str
    container_id: Json


class StartChecks(NamedTuple):
    task_id: str
    container_id: Json
    check: Json | None
    health_check: Json | None


class StopChecks(NamedTuple):
    task_id: str


class Exit(NamedTuple):
    """No task is left: exit once the updates are acknowledged."""


Instruction = (
    SendUpdate
    | LaunchContainer
    | WaitContainer
    | KillContainer
    | StartTimer
    | CancelTimer
    | LinkSandbox
    | StartChecks
    | StopChecks
    | Exit
)
