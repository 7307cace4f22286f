"""The default executor's task state machine: events in, instructions out, no I/O.

One `ExecutorState` holds every task the executor was given (one or more task
groups). The I/O shell (`mesilla.executor.default`) feeds it events (a task
group arrived, a container launched or exited, a KILL, a timer fired, a check
result, SHUTDOWN) and carries out the instructions it returns, in order
(launch, wait, kill or remove a container, send a status update, arm a timer,
start checks, exit). Messages are plain JSON dicts in the Mesos v1 mapping, so
the executor needs no message library.

Behaviour follows Mesos's default executor, plus Mesilla's restart policy:

* Per task a nested container ``{value: <uuid>, parent: <executor container>}``;
  TASK_STARTING before the launch, TASK_RUNNING once it launched. A group
  launches as one unit: its answers are acted on once every launch of the
  group answered, so no task shows RUNNING while a sibling's fate is open.
  Every update carries ``container_status.container_id`` (with its parent).
* A group launch that gets no answer from the agent (the connection failed:
  the agent died or restarts) abandons the executor: no more updates, exit.
  Whether the container exists is unknown, so the executor leaves the story
  to the agent, whose recovery ends every task of the executor alike. A
  refusal (a 4xx/5xx answer) instead fails that task (REASON_CONTAINER_LAUNCH_FAILED).
* The container's end maps to TASK_FINISHED (exit 0), TASK_FAILED (otherwise)
  or TASK_KILLED (killed by us); a state or reason from the agent (such as a
  memory limitation) wins, as Mesos's executor prefers the agent's knowledge.
* Kill: SIGTERM, then SIGKILL after the grace period (the KILL's policy, else
  the task's, else 3 s), repeated every second until the container is gone.
  TASK_KILLING only for frameworks with TASK_KILLING_STATE; a second KILL
  while killing is ignored.
* Group policy: a task ending FAILED or KILLED kills the rest of its group,
  unless the task has a restart policy that is not exhausted (such a task is
  managed on its own: the seed's "transient task" story).
* Restart policy (``TaskInfo.restart_policy``): ALWAYS restarts after any
  exit, ON_FAILURE after anything but exit 0; never after a kill we were asked
  for (KILL, SHUTDOWN, group policy) nor after max_completion_time. A failed
  health check counts as a failure. The delay is ``min_restart_delay * 2**n``
  (n = restarts so far, reset when a container ran `BACKOFF_RESET_AFTER`),
  capped at `MAX_RESTART_DELAY`. Each restart is a new
  nested container that takes over the previous attempt's sandbox (the shell
  renames the directory before the launch), so files survive restarts.
  Frameworks with TASK_RESTARTING_STATE get TASK_RESTARTING when the container
  ends; every framework gets TASK_RUNNING, with a message naming the restart,
  once the new container runs. After ``max_restarts`` restarts the next end is
  final and the group policy applies.
* max_completion_time (armed at the first launch, not re-armed by restarts):
  kill, then TASK_FAILED with REASON_MAX_COMPLETION_TIME_REACHED.
* Health: an update with ``healthy`` on each change; when the checker says
  kill, the task is killed and its final update carries ``healthy: false``.
* When no task is left, the executor exits (the shell waits, bounded, for the
  acknowledgements of its updates first).
"""

from __future__ import annotations

import enum
import os
import signal
from collections.abc import Callable
from typing import Any

from mesilla.executor.default_events import (
    CancelTimer,
    CheckUpdated,
    ContainerExited,
    ContainerLaunched,
    Event,
    Exit,
    HealthUpdated,
    Instruction,
    KillContainer,
    KillTask,
    LaunchContainer,
    LaunchGroup,
    LinkSandbox,
    SendUpdate,
    Shutdown,
    StartChecks,
    StartTimer,
    StopChecks,
    Subscribed,
    Timer,
    TimerFired,
    TimerKind,
    WaitContainer,
)

Json = dict[str, Any]

DEFAULT_KILL_GRACE_PERIOD = 3.0
# Between repeated SIGKILLs while a container refuses to go away.
KILL_RETRY_INTERVAL = 1.0
DEFAULT_MIN_RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 300.0
# A container that ran this long was healthy for a while: its next restart
# starts the backoff over (as Kubernetes does).
BACKOFF_RESET_AFTER = 600.0


# --- per-task state ------------------------------------------------------------------------


class Phase(enum.Enum):
    LAUNCHING = "LAUNCHING"  # LAUNCH_CONTAINER in flight
    RUNNING = "RUNNING"  # launched; WAIT_CONTAINER in flight
    BACKOFF = "BACKOFF"  # ended, restart timer armed
    DONE = "DONE"  # terminal update sent


class KillCause(enum.Enum):
    FRAMEWORK = "FRAMEWORK"  # a KILL event
    GROUP = "GROUP"  # the group policy
    SHUTDOWN = "SHUTDOWN"
    UNHEALTHY = "UNHEALTHY"  # the health checker asked for it
    MAX_COMPLETION = "MAX_COMPLETION"

    @property
    def requested(self) -> bool:
        """Kills somebody asked for: the task stays dead whatever its restart policy."""
        return self in (KillCause.FRAMEWORK, KillCause.GROUP, KillCause.SHUTDOWN)


class TaskRecord:
    """One task: its current container (attempt), where it is, and why it is being killed."""

    def __init__(self, info: Json, group: int, container_id: Json) -> None:
        self.info = info
        self.group = group
        self.container_id = container_id
        self.phase = Phase.LAUNCHING
        self.attempt = 0  # bumped per restart; timers of older attempts are stale
        self.restarts = 0
        self.backoff_step = 0  # the exponent of the next restart delay
        self.kill_cause: KillCause | None = None
        self.kill_policy: Json | None = None
        self.state: str | None = None  # of the last update sent
        self.healthy: bool | None = None
        self.check_status: Json | None = None
        self.restart_message: str | None = None  # why the pending restart happens

    @property
    def task_id(self) -> str:
        value: str = self.info["task_id"]["value"]
        return value

    @property
    def restart_policy(self) -> Json | None:
        policy: Json | None = self.info.get("restart_policy")
        if not policy or policy.get("type", "NEVER") not in ("ALWAYS", "ON_FAILURE"):
            return None
        return policy

    @property
    def restarts_exhausted(self) -> bool:
        policy = self.restart_policy
        if policy is None:
            return True
        limit = policy.get("max_restarts")
        return limit is not None and self.restarts >= int(limit)


def _seconds(duration: Json | None) -> float | None:
    if not duration or "nanoseconds" not in duration:
        return None
    return int(duration["nanoseconds"]) / 1e9


def grace_period(kill_policy: Json | None, task: Json) -> float:
    """The KILL's grace period, else the task's, else Mesos's default 3 s."""
    for policy in (kill_policy, task.get("kill_policy")):
        seconds = _seconds((policy or {}).get("grace_period"))
        if seconds is not None:
            return max(seconds, 0.0)
    return DEFAULT_KILL_GRACE_PERIOD


def restart_delay(policy: Json, restarts: int) -> float:
    """Exponential backoff from min_restart_delay, capped."""
    base = _seconds(policy.get("min_restart_delay"))
    base = DEFAULT_MIN_RESTART_DELAY if base is None else max(base, 0.0)
    return min(base * (2.0**restarts), max(MAX_RESTART_DELAY, base))


def describe_exit(exit_status: int | None) -> str:
    if exit_status is None:
        return "Command terminated with unknown status"
    if os.WIFEXITED(exit_status):
        return f"Command exited with status {os.WEXITSTATUS(exit_status)}"
    if os.WIFSIGNALED(exit_status):
        number = os.WTERMSIG(exit_status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"Command terminated with signal {name}"
    return f"Command ended with wait status {exit_status}"


def _empty_check_status(check: Json) -> Json:
    # Mesos: with a check defined, every update carries a CheckStatusInfo of
    # its type, empty until a result exists.
    kind = check.get("type", "UNKNOWN")
    status: Json = {"type": kind}
    if kind in ("COMMAND", "HTTP", "TCP"):
        status[kind.lower()] = {}
    return status


# --- the machine -------------------------------------------------------------------------


class ExecutorState:
    def __init__(self, executor_id: str, new_container_value: Callable[[], str]) -> None:
        self.executor_id = executor_id
        self.new_container_value = new_container_value  # uuid4 in production, predictable in tests
        self.container_id: Json | None = None
        self.capabilities: frozenset[str] = frozenset()
        self.tasks: dict[str, TaskRecord] = {}
        self.groups: list[list[str]] = []
        self.shutting_down = False
        self.exiting = False
        # Groups whose first launch is in flight: the answers so far, by task.
        self.launching_groups: dict[int, dict[str, ContainerLaunched]] = {}
        # A group launch got no answer from the agent: the executor only waits to exit.
        self.abandoned = False

    def handle(self, event: Event) -> list[Instruction]:
        out: list[Instruction] = []
        if self.abandoned:
            return out
        match event:
            case Subscribed():
                self.container_id = event.container_id
                self.capabilities = event.capabilities
            case LaunchGroup():
                self._launch_group(event.tasks, out)
            case ContainerLaunched():
                self._launched(event, out)
            case ContainerExited():
                self._exited(event, out)
            case KillTask():
                self._kill_requested(event, out)
            case TimerFired():
                self._timer_fired(event.timer, out)
            case CheckUpdated():
                self._check_updated(event, out)
            case HealthUpdated():
                self._health_updated(event, out)
            case Shutdown():
                self._shutdown(out)
        self._maybe_exit(out)
        return out

    # --- launching ---

    def _launch_group(self, tasks: list[Json], out: list[Instruction]) -> None:
        if self.shutting_down or self.exiting:
            return
        if self.container_id is None:
            raise RuntimeError("LAUNCH_GROUP before SUBSCRIBED: the agent sends SUBSCRIBED first")
        fresh = [t for t in tasks if t["task_id"]["value"] not in self.tasks]
        group_index = len(self.groups)
        self.groups.append([t["task_id"]["value"] for t in fresh])
        if fresh:
            self.launching_groups[group_index] = {}
        for info in fresh:
            record = TaskRecord(info=info, group=group_index, container_id=self._new_container_id())
            self.tasks[record.task_id] = record
            self._update(record, "TASK_STARTING", out)
            out.append(LaunchContainer(record.task_id, record.container_id, info))

    def _new_container_id(self) -> Json:
        return {"value": self.new_container_value(), "parent": self.container_id}

    def _launched(self, event: ContainerLaunched, out: list[Instruction]) -> None:
        record = self._current(event.task_id, event.container_id)
        if record is None or record.phase is not Phase.LAUNCHING:
            return
        answers = self.launching_groups.get(record.group)
        if answers is None:  # a restart: launched on its own
            self._settle_launch(record, event, out)
            return
        answers[record.task_id] = event
        group = self.groups[record.group]
        if len(answers) < len(group):
            return
        del self.launching_groups[record.group]
        if any(answer.agent_lost for answer in answers.values()):
            self._abandon(out)
            return
        for task_id in group:
            self._settle_launch(self.tasks[task_id], answers[task_id], out)

    def _abandon(self, out: list[Instruction]) -> None:
        # As Mesos's default executor when a LAUNCH_NESTED_CONTAINER answer
        # never came: no guess about containers that may or may not run.
        self.abandoned = True
        self.exiting = True
        out.append(Exit())

    def _settle_launch(self, record: TaskRecord, event: ContainerLaunched, out: list[Instruction]) -> None:
        if event.error is not None:
            self._ended(
                record,
                state="TASK_KILLED" if record.kill_cause else "TASK_FAILED",
                reason="REASON_CONTAINER_LAUNCH_FAILED",
                message=f"Failed to launch container {record.container_id['value']}: {event.error}",
                out=out,
            )
            return
        record.phase = Phase.RUNNING
        out.append(LinkSandbox(record.task_id, record.container_id))
        out.append(WaitContainer(record.task_id, record.container_id))
        if record.kill_cause is not None:
            # Killed while launching: no TASK_RUNNING, straight to the kill.
            self._signal_kill(record, out)
            return
        message = None
        if record.restarts:
            message = (
                f"Task '{record.task_id}' restarted ({self._restart_count(record)}): {record.restart_message}"
            )
        self._update(record, "TASK_RUNNING", out, message=message)
        if record.restarts == 0:
            seconds = _seconds(record.info.get("max_completion_time"))
            if seconds is not None:
                timer = Timer(TimerKind.MAX_COMPLETION, record.task_id, 0)
                out.append(StartTimer(timer, max(seconds, 0.0)))
        if record.info.get("check") or record.info.get("health_check"):
            out.append(
                StartChecks(
                    record.task_id,
                    record.container_id,
                    record.info.get("check"),
                    record.info.get("health_check"),
                )
            )

    def _restart_count(self, record: TaskRecord) -> str:
        limit = (record.restart_policy or {}).get("max_restarts")
        return f"restart {record.restarts}" + (f" of {limit}" if limit is not None else "")

    # --- ending ---

    def _exited(self, event: ContainerExited, out: list[Instruction]) -> None:
        record = self._current(event.task_id, event.container_id)
        if record is None or record.phase is not Phase.RUNNING:
            return
        out.append(StopChecks(record.task_id))
        out.append(CancelTimer(Timer(TimerKind.ESCALATE, record.task_id, record.attempt)))
        cause = record.kill_cause
        if cause is KillCause.MAX_COMPLETION:
            state, reason = "TASK_FAILED", "REASON_MAX_COMPLETION_TIME_REACHED"
            message = "Task exceeded its max_completion_time"
        else:
            if cause is not None:
                state = "TASK_KILLED"
            elif (
                event.exit_status is not None
                and os.WIFEXITED(event.exit_status)
                and os.WEXITSTATUS(event.exit_status) == 0
            ):
                state = "TASK_FINISHED"
            else:
                state = "TASK_FAILED"
            reason = None
            message = describe_exit(event.exit_status)
        # The agent knows more (a memory limitation, say): its word wins.
        state = event.state or state
        reason = event.reason or reason
        if event.message:
            message = f"{message}: {event.message}"
        if cause is KillCause.UNHEALTHY and state == "TASK_KILLED":
            message = f"{message} (killed after failing its health check)"

        if self._should_restart(record, state):
            if event.ran_for is not None and event.ran_for >= BACKOFF_RESET_AFTER:
                record.backoff_step = 0
            self._schedule_restart(record, state, message, out)
            return
        self._ended(record, state=state, reason=reason, message=message, out=out, limitation=event.limitation)

    def _should_restart(self, record: TaskRecord, state: str) -> bool:
        if self.shutting_down or record.restarts_exhausted:
            return False
        cause = record.kill_cause
        if cause is not None and (cause.requested or cause is KillCause.MAX_COMPLETION):
            return False
        policy = record.restart_policy
        assert policy is not None  # restarts_exhausted is True without one
        return policy["type"] == "ALWAYS" or state != "TASK_FINISHED"

    def _schedule_restart(self, record: TaskRecord, state: str, message: str, out: list[Instruction]) -> None:
        policy = record.restart_policy
        assert policy is not None
        delay = restart_delay(policy, record.backoff_step)
        record.backoff_step += 1
        record.phase = Phase.BACKOFF
        record.kill_cause = None
        record.kill_policy = None
        record.restart_message = f"previous container ended {state}: {message}"
        record.healthy = None
        record.check_status = None
        if "TASK_RESTARTING_STATE" in self.capabilities:
            limit = policy.get("max_restarts")
            count = f"restart {record.restarts + 1}" + (f" of {limit}" if limit is not None else "")
            self._update(
                record,
                "TASK_RESTARTING",
                out,
                message=(
                    f"Restarting task '{record.task_id}' ({count}) in {delay:g}s: {record.restart_message}"
                ),
            )
        out.append(StartTimer(Timer(TimerKind.RESTART, record.task_id, record.attempt), delay))

    def _relaunch(self, record: TaskRecord, out: list[Instruction]) -> None:
        previous = record.container_id
        record.restarts += 1
        record.attempt += 1
        record.container_id = self._new_container_id()
        record.phase = Phase.LAUNCHING
        out.append(
            LaunchContainer(record.task_id, record.container_id, record.info, reuse_sandbox_of=previous)
        )

    def _ended(
        self,
        record: TaskRecord,
        *,
        state: str,
        reason: str | None,
        message: str,
        out: list[Instruction],
        limitation: Json | None = None,
    ) -> None:
        if record.restart_policy is not None and record.restarts:
            message = f"{message} (after {record.restarts} restarts)"
        record.phase = Phase.DONE
        extra: Json = {}
        if limitation:
            extra["limitation"] = limitation
        if record.kill_cause is KillCause.UNHEALTHY or record.healthy is False:
            extra["healthy"] = False
        self._update(record, state, out, reason=reason, message=message, **extra)
        out.append(CancelTimer(Timer(TimerKind.MAX_COMPLETION, record.task_id, 0)))
        exhausted_or_unmanaged = record.restart_policy is None or record.restarts_exhausted
        if state in ("TASK_FAILED", "TASK_KILLED") and exhausted_or_unmanaged and not self.shutting_down:
            self._kill_group(record, out)

    def _kill_group(self, record: TaskRecord, out: list[Instruction]) -> None:
        for task_id in self.groups[record.group]:
            other = self.tasks[task_id]
            if other is record or other.phase is Phase.DONE or other.kill_cause is not None:
                continue
            self._kill(other, KillCause.GROUP, None, out)

    # --- killing ---

    def _kill_requested(self, event: KillTask, out: list[Instruction]) -> None:
        record = self.tasks.get(event.task_id)
        if record is None or record.phase is Phase.DONE or record.kill_cause is not None:
            return  # unknown, finished, or already being killed: harmless
        self._kill(record, KillCause.FRAMEWORK, event.kill_policy, out)

    def _kill(
        self, record: TaskRecord, cause: KillCause, kill_policy: Json | None, out: list[Instruction]
    ) -> None:
        record.kill_cause = cause
        record.kill_policy = kill_policy
        if record.phase is Phase.BACKOFF:
            # Nothing runs: cancel the restart and end the task here.
            out.append(CancelTimer(Timer(TimerKind.RESTART, record.task_id, record.attempt)))
            self._ended(
                record,
                state="TASK_KILLED",
                reason=None,
                message=f"Task killed while waiting to restart ({record.restart_message})",
                out=out,
            )
            return
        if record.phase is Phase.LAUNCHING:
            return  # the kill starts once the launch (of the whole group) answered
        self._signal_kill(record, out)

    def _signal_kill(self, record: TaskRecord, out: list[Instruction]) -> None:
        out.append(StopChecks(record.task_id))
        if "TASK_KILLING_STATE" in self.capabilities and record.state != "TASK_KILLING":
            self._update(record, "TASK_KILLING", out)
        out.append(KillContainer(record.task_id, record.container_id, signal.SIGTERM))
        timer = Timer(TimerKind.ESCALATE, record.task_id, record.attempt)
        out.append(StartTimer(timer, grace_period(record.kill_policy, record.info)))

    def _timer_fired(self, timer: Timer, out: list[Instruction]) -> None:
        record = self.tasks.get(timer.task_id)
        if record is None or record.phase is Phase.DONE:
            return
        if timer.kind is TimerKind.MAX_COMPLETION:
            self._max_completion_reached(record, out)
            return
        if timer.attempt != record.attempt:
            return
        if timer.kind is TimerKind.ESCALATE and record.phase is Phase.RUNNING and record.kill_cause:
            out.append(KillContainer(record.task_id, record.container_id, signal.SIGKILL))
            out.append(StartTimer(timer, KILL_RETRY_INTERVAL))
        elif timer.kind is TimerKind.RESTART and record.phase is Phase.BACKOFF:
            self._relaunch(record, out)

    def _max_completion_reached(self, record: TaskRecord, out: list[Instruction]) -> None:
        if record.kill_cause is not None:
            return  # already on its way out
        if record.phase is Phase.BACKOFF:
            out.append(CancelTimer(Timer(TimerKind.RESTART, record.task_id, record.attempt)))
            record.kill_cause = KillCause.MAX_COMPLETION
            self._ended(
                record,
                state="TASK_FAILED",
                reason="REASON_MAX_COMPLETION_TIME_REACHED",
                message="Task exceeded its max_completion_time while waiting to restart",
                out=out,
            )
            return
        self._kill(record, KillCause.MAX_COMPLETION, None, out)

    def _shutdown(self, out: list[Instruction]) -> None:
        if self.shutting_down:
            return
        self.shutting_down = True
        for record in list(self.tasks.values()):
            if record.phase is not Phase.DONE and record.kill_cause is None:
                self._kill(record, KillCause.SHUTDOWN, None, out)
        if not self.tasks:
            self.exiting = True
            out.append(Exit())

    # --- checks ---

    def _check_updated(self, event: CheckUpdated, out: list[Instruction]) -> None:
        record = self.tasks.get(event.task_id)
        if record is None or record.phase is not Phase.RUNNING or record.kill_cause is not None:
            return  # no check updates after a kill began or the task ended
        record.check_status = event.check_status
        self._update(record, "TASK_RUNNING", out, reason="REASON_TASK_CHECK_STATUS_UPDATED")

    def _health_updated(self, event: HealthUpdated, out: list[Instruction]) -> None:
        record = self.tasks.get(event.task_id)
        if record is None or record.phase is not Phase.RUNNING or record.kill_cause is not None:
            return
        record.healthy = event.healthy
        self._update(record, "TASK_RUNNING", out, reason="REASON_TASK_HEALTH_CHECK_STATUS_UPDATED")
        if event.kill_task:
            self._kill(record, KillCause.UNHEALTHY, None, out)

    # --- helpers ---

    def _current(self, task_id: str, container_id: Json) -> TaskRecord | None:
        """The task, if the event is about its current container (not a stale attempt)."""
        record = self.tasks.get(task_id)
        if record is None or record.container_id.get("value") != container_id.get("value"):
            return None
        return record

    def _update(
        self,
        record: TaskRecord,
        state: str,
        out: list[Instruction],
        *,
        reason: str | None = None,
        message: str | None = None,
        **extra: Any,
    ) -> None:
        status: Json = {
            "task_id": {"value": record.task_id},
            "state": state,
            "source": "SOURCE_EXECUTOR",
            "executor_id": {"value": self.executor_id},
            "container_status": {"container_id": record.container_id},
        }
        if reason is not None:
            status["reason"] = reason
        if message is not None:
            status["message"] = message
        if record.healthy is not None:
            status["healthy"] = record.healthy
        check = record.info.get("check")
        if check:
            status["check_status"] = record.check_status or _empty_check_status(check)
        status.update(extra)
        record.state = state
        out.append(SendUpdate(status))

    def _maybe_exit(self, out: list[Instruction]) -> None:
        if self.exiting or not self.tasks:
            return
        if all(record.phase is Phase.DONE for record in self.tasks.values()):
            self.exiting = True
            out.append(Exit())

    def active_tasks(self) -> list[str]:
        return [t for t, r in self.tasks.items() if r.phase is not Phase.DONE]
