"""The default executor's state machine, driven event by event (no I/O, no clock)."""

from __future__ import annotations

import itertools
import signal
from typing import Any

import pytest

from mesilla.executor.default_events import (
    CancelTimer,
    CheckUpdated,
    ContainerExited,
    ContainerLaunched,
    Exit,
    HealthUpdated,
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
    TimerFired,
    TimerKind,
    WaitContainer,
)
from mesilla.executor.default_state import (
    ExecutorState,
    describe_exit,
    grace_period,
    restart_delay,
)

EXEC_CID = {"value": "exec"}


def exited(code: int) -> int:
    return code << 8


def signaled(sig: int) -> int:
    return sig


def task(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "task_id": {"value": name},
        "agent_id": {"value": "a"},
        "command": {"value": "true"},
        **extra,
    }


def seconds(value: float) -> dict[str, int]:
    return {"nanoseconds": int(value * 1e9)}


class Harness:
    """The machine plus the container ids it handed out, by task."""

    def __init__(self, *capabilities: str) -> None:
        counter = itertools.count(1)
        self.machine = ExecutorState(executor_id="e1", new_container_value=lambda: f"c{next(counter)}")
        self.out = self.machine.handle(Subscribed(EXEC_CID, frozenset(capabilities)))
        assert self.out == []

    def cid(self, task_id: str) -> dict[str, Any]:
        return self.machine.tasks[task_id].container_id

    def send(self, event: Any) -> list[Any]:
        self.out = self.machine.handle(event)
        return self.out

    def launch(self, *tasks: dict[str, Any]) -> list[Any]:
        return self.send(LaunchGroup(list(tasks)))

    def launched(self, task_id: str, error: str | None = None, *, agent_lost: bool = False) -> list[Any]:
        return self.send(ContainerLaunched(task_id, self.cid(task_id), error, agent_lost))

    def exit(self, task_id: str, status: int | None, **extra: Any) -> list[Any]:
        return self.send(ContainerExited(task_id, self.cid(task_id), status, **extra))

    def start(self, *tasks: dict[str, Any]) -> None:
        self.launch(*tasks)
        for t in tasks:
            self.launched(t["task_id"]["value"])

    def timers(self, kind: TimerKind) -> list[StartTimer]:
        return [i for i in self.out if isinstance(i, StartTimer) and i.timer.kind is kind]

    def fire(self, kind: TimerKind, task_id: str | None = None) -> list[Any]:
        (start,) = [t for t in self.timers(kind) if task_id is None or t.timer.task_id == task_id]
        return self.send(TimerFired(start.timer))


def updates(out: list[Any]) -> list[tuple[str, str]]:
    return [(i.status["task_id"]["value"], i.status["state"]) for i in out if isinstance(i, SendUpdate)]


def only_update(out: list[Any], task_id: str) -> dict[str, Any]:
    (status,) = [
        i.status for i in out if isinstance(i, SendUpdate) and i.status["task_id"]["value"] == task_id
    ]
    assert isinstance(status, dict)
    return status


def has(out: list[Any], instruction: Any) -> bool:
    """Membership by type and value (instructions are tuples: equal values of two types compare equal)."""
    return any(type(i) is type(instruction) and i == instruction for i in out)


def kills(out: list[Any]) -> list[tuple[str, int]]:
    return [(i.task_id, i.signal) for i in out if isinstance(i, KillContainer)]


# --- launch ------------------------------------------------------------------------------


def test_group_launch_sends_starting_then_running_with_nested_container_ids() -> None:
    h = Harness()
    out = h.launch(task("a"), task("b"))
    assert isinstance(out[0], SendUpdate)
    assert updates(out) == [("a", "TASK_STARTING"), ("b", "TASK_STARTING")]
    launches = [i for i in out if isinstance(i, LaunchContainer)]
    assert [(i.task_id, i.container_id) for i in launches] == [
        ("a", {"value": "c1", "parent": EXEC_CID}),
        ("b", {"value": "c2", "parent": EXEC_CID}),
    ]
    assert only_update(out, "a")["container_status"] == {"container_id": {"value": "c1", "parent": EXEC_CID}}
    assert only_update(out, "a")["source"] == "SOURCE_EXECUTOR"
    assert only_update(out, "a")["executor_id"] == {"value": "e1"}

    # Nothing happens until the whole group answered; then both run, in group order.
    assert h.launched("b") == []
    out = h.launched("a")
    assert has(out, LinkSandbox("a", h.cid("a")))
    assert has(out, WaitContainer("a", h.cid("a")))
    assert has(out, LinkSandbox("b", h.cid("b")))
    assert has(out, WaitContainer("b", h.cid("b")))
    assert updates(out) == [("a", "TASK_RUNNING"), ("b", "TASK_RUNNING")]
    assert not any(isinstance(i, StartChecks) for i in out)


def test_launch_before_subscribed_is_a_clear_error() -> None:
    machine = ExecutorState(executor_id="e", new_container_value=lambda: "x")
    with pytest.raises(RuntimeError, match="SUBSCRIBED"):
        machine.handle(LaunchGroup([task("a")]))


def test_exit_status_maps_to_finished_failed_and_signal_messages() -> None:
    h = Harness()
    h.start(task("ok"), task("bad"))
    out = h.exit("ok", exited(0))
    assert updates(out) == [("ok", "TASK_FINISHED")]
    assert only_update(out, "ok")["message"] == "Command exited with status 0"
    out = h.exit("bad", signaled(signal.SIGSEGV))
    assert updates(out)[0] == ("bad", "TASK_FAILED")
    assert only_update(out, "bad")["message"] == "Command terminated with signal SIGSEGV"
    assert any(isinstance(i, Exit) for i in out)


def test_agent_state_and_reason_win_over_the_exit_status() -> None:
    h = Harness()
    h.start(task("a"), task("b"))
    out = h.exit(
        "a",
        signaled(signal.SIGKILL),
        state="TASK_FAILED",
        reason="REASON_CONTAINER_LIMITATION_MEMORY",
        message="Memory limit exceeded",
        limitation={"resources": [{"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}]},
    )
    status = only_update(out, "a")
    assert status["state"] == "TASK_FAILED"
    assert status["reason"] == "REASON_CONTAINER_LIMITATION_MEMORY"
    assert status["message"] == "Command terminated with signal SIGKILL: Memory limit exceeded"
    assert status["limitation"]["resources"][0]["name"] == "mem"
    # Group policy: the other task is killed.
    assert kills(out) == [("b", signal.SIGTERM)]


def test_unknown_exit_status_is_a_failure() -> None:
    h = Harness()
    h.start(task("a"))
    assert only_update(h.exit("a", None), "a")["message"] == "Command terminated with unknown status"


def test_launch_failure_fails_the_task_and_kills_the_group() -> None:
    h = Harness()
    h.launch(task("a"), task("b"))
    h.launched("b")
    out = h.launched("a", error="image not found")
    status = only_update(out, "a")
    assert status["state"] == "TASK_FAILED"
    assert status["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
    assert "image not found" in status["message"]
    assert kills(out) == [("b", signal.SIGTERM)]


def test_group_launch_without_an_answer_from_the_agent_exits_without_updates() -> None:
    h = Harness()
    h.start(task("x"))  # an earlier group, running
    h.launch(task("a"), task("b"), task("c"))
    assert h.launched("a") == []
    assert h.launched("b", "the agent could not be reached", agent_lost=True) == []
    out = h.launched("c")
    # No RUNNING for a or c, no FAILED for b: the restarted agent ends them all alike.
    assert out == [Exit()] and isinstance(out[0], Exit)
    assert h.machine.abandoned
    for event in (KillTask("a"), ContainerExited("x", h.cid("x"), exited(1)), Shutdown()):
        assert h.send(event) == []


def test_launch_held_for_the_group_sees_kills_that_came_meanwhile() -> None:
    h = Harness()
    h.launch(task("a"), task("b"))
    h.launch(task("y"))
    assert updates(h.launched("y")) == [("y", "TASK_RUNNING")]  # groups are held apart
    assert h.launched("a") == []
    assert h.send(KillTask("a")) == []
    out = h.launched("b")
    assert updates(out) == [("b", "TASK_RUNNING")]
    assert kills(out) == [("a", signal.SIGTERM)]
    assert has(out, WaitContainer("a", h.cid("a")))


def test_stale_events_of_another_container_are_ignored() -> None:
    h = Harness()
    h.start(task("a"))
    assert h.send(ContainerExited("a", {"value": "other"}, exited(1))) == []
    assert h.send(ContainerLaunched("a", h.cid("a"))) == []  # already launched
    assert h.send(ContainerExited("nope", {"value": "c1"}, 0)) == []


# --- kill ----------------------------------------------------------------------------------


def test_kill_escalates_to_sigkill_after_the_grace_period_and_reports_killed() -> None:
    h = Harness()
    h.start(task("a", kill_policy={"grace_period": seconds(7)}))
    out = h.send(KillTask("a"))
    assert kills(out) == [("a", signal.SIGTERM)]
    assert updates(out) == []  # no TASK_KILLING without the capability
    (timer,) = h.timers(TimerKind.ESCALATE)
    assert timer.delay == 7.0
    out = h.fire(TimerKind.ESCALATE)
    assert kills(out) == [("a", signal.SIGKILL)]
    # Still there a second later: SIGKILL again.
    out = h.fire(TimerKind.ESCALATE)
    assert kills(out) == [("a", signal.SIGKILL)]
    out = h.exit("a", signaled(signal.SIGKILL))
    assert updates(out) == [("a", "TASK_KILLED")]
    assert any(isinstance(i, CancelTimer) and i.timer.kind is TimerKind.ESCALATE for i in out)


def test_kill_policy_of_the_kill_event_wins_and_default_is_three_seconds() -> None:
    t = task("a", kill_policy={"grace_period": seconds(7)})
    assert grace_period({"grace_period": seconds(1)}, t) == 1.0
    assert grace_period(None, t) == 7.0
    assert grace_period(None, task("b")) == 3.0
    h = Harness()
    h.start(t)
    h.send(KillTask("a", {"grace_period": seconds(0.5)}))
    assert h.timers(TimerKind.ESCALATE)[0].delay == 0.5


def test_task_killing_only_with_the_capability_and_second_kill_is_harmless() -> None:
    h = Harness("TASK_KILLING_STATE")
    h.start(task("a"), task("b"))
    out = h.send(KillTask("a"))
    assert updates(out) == [("a", "TASK_KILLING")]
    assert h.send(KillTask("a")) == []
    out = h.exit("a", signaled(signal.SIGTERM))
    assert updates(out)[0] == ("a", "TASK_KILLED")
    # Group policy: b is killed, with TASK_KILLING first.
    assert ("b", "TASK_KILLING") in updates(out)
    assert kills(out) == [("b", signal.SIGTERM)]


def test_kill_of_unknown_or_finished_task_is_ignored() -> None:
    h = Harness()
    h.start(task("a"), task("b"))
    h.exit("a", exited(0))
    assert h.send(KillTask("a")) == []
    assert h.send(KillTask("zzz")) == []


def test_kill_while_launching_waits_for_the_launch_then_kills_without_running() -> None:
    h = Harness()
    h.launch(task("a"))
    assert h.send(KillTask("a")) == []
    out = h.launched("a")
    assert updates(out) == []
    assert kills(out) == [("a", signal.SIGTERM)]
    assert has(out, WaitContainer("a", h.cid("a")))
    assert updates(h.exit("a", signaled(signal.SIGTERM))) == [("a", "TASK_KILLED")]


def test_kill_while_launching_then_launch_failure_reports_killed() -> None:
    h = Harness()
    h.launch(task("a"))
    h.send(KillTask("a"))
    assert updates(h.launched("a", error="boom")) == [("a", "TASK_KILLED")]


def test_group_policy_kills_the_rest_on_failure_but_not_on_success() -> None:
    h = Harness()
    h.start(task("a"), task("b"), task("c"))
    out = h.exit("a", exited(0))
    assert kills(out) == []
    out = h.exit("b", exited(3))
    assert kills(out) == [("c", signal.SIGTERM)]
    out = h.exit("c", signaled(signal.SIGTERM))
    assert updates(out) == [("c", "TASK_KILLED")]
    assert any(isinstance(i, Exit) for i in out)


def test_group_policy_applies_per_group() -> None:
    h = Harness()
    h.start(task("a"), task("b"))
    h.start(task("x"))
    out = h.exit("a", exited(1))
    assert kills(out) == [("b", signal.SIGTERM)]
    assert not any(isinstance(i, Exit) for i in out)
    assert "x" in h.machine.active_tasks()


def test_shutdown_kills_everything_and_exits_once_all_ended() -> None:
    h = Harness()
    h.start(task("a"), task("b"))
    out = h.send(Shutdown())
    assert sorted(kills(out)) == [("a", signal.SIGTERM), ("b", signal.SIGTERM)]
    assert h.send(Shutdown()) == []
    out = h.exit("a", signaled(signal.SIGTERM))
    assert updates(out) == [("a", "TASK_KILLED")]
    assert not any(isinstance(i, Exit) for i in out)
    out = h.exit("b", signaled(signal.SIGTERM))
    assert any(isinstance(i, Exit) for i in out)
    # Further groups are ignored once exiting.
    assert h.launch(task("late")) == []


def test_shutdown_without_tasks_exits_at_once() -> None:
    h = Harness()
    out = h.send(Shutdown())
    assert len(out) == 1 and has(out, Exit())


# --- restart policy ------------------------------------------------------------------------


def test_restart_delay_backoff_is_exponential_and_capped() -> None:
    policy = {"type": "ALWAYS", "min_restart_delay": seconds(0.5)}
    assert [restart_delay(policy, n) for n in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert restart_delay(policy, 30) == 300.0
    assert restart_delay({"type": "ALWAYS"}, 0) == 1.0


def test_always_restarts_after_success_with_backoff_and_keeps_the_sandbox() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "ALWAYS", "min_restart_delay": seconds(2)}))
    first = h.cid("a")
    out = h.exit("a", exited(0))
    assert updates(out) == []  # no TASK_RESTARTING without the capability
    assert [t.delay for t in h.timers(TimerKind.RESTART)] == [2.0]
    out = h.fire(TimerKind.RESTART)
    (launch,) = [i for i in out if isinstance(i, LaunchContainer)]
    assert launch.container_id == {"value": "c2", "parent": EXEC_CID}
    assert launch.reuse_sandbox_of == first
    out = h.launched("a")
    status = only_update(out, "a")
    assert status["state"] == "TASK_RUNNING"
    assert status["container_status"]["container_id"]["value"] == "c2"
    assert "restarted (restart 1)" in status["message"]
    assert "TASK_FINISHED" in status["message"]
    assert has(out, LinkSandbox("a", h.cid("a")))
    # Second restart waits twice as long.
    h.exit("a", exited(0))
    assert [t.delay for t in h.timers(TimerKind.RESTART)] == [4.0]


def test_backoff_starts_over_after_a_long_run() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "ALWAYS", "min_restart_delay": seconds(1)}))
    delays = []
    for ran_for in (1.0, 1.0, 3600.0, 1.0):
        h.send(ContainerExited("a", h.cid("a"), exited(1), ran_for=ran_for))
        delays += [t.delay for t in h.timers(TimerKind.RESTART)]
        h.fire(TimerKind.RESTART)
        h.launched("a")
    assert delays == [1.0, 2.0, 1.0, 2.0]
    assert h.machine.tasks["a"].restarts == 4


def test_task_restarting_with_the_capability() -> None:
    h = Harness("TASK_RESTARTING_STATE")
    h.start(task("a", restart_policy={"type": "ON_FAILURE", "max_restarts": 2}))
    out = h.exit("a", exited(1))
    status = only_update(out, "a")
    assert status["state"] == "TASK_RESTARTING"
    assert "restart 1 of 2" in status["message"]
    assert status["container_status"]["container_id"]["value"] == "c1"


def test_on_failure_finishes_on_success() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "ON_FAILURE"}), task("b"))
    out = h.exit("a", exited(0))
    assert updates(out) == [("a", "TASK_FINISHED")]
    assert h.timers(TimerKind.RESTART) == []


def test_on_failure_restarts_until_max_restarts_then_group_policy() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "ON_FAILURE", "max_restarts": 2}), task("b"))
    for expected in (1, 2):
        out = h.exit("a", exited(1))
        assert updates(out) == []
        assert kills(out) == []
        h.fire(TimerKind.RESTART)
        h.launched("a")
        assert h.machine.tasks["a"].restarts == expected
    out = h.exit("a", exited(1))
    status = only_update(out, "a")
    assert status["state"] == "TASK_FAILED"
    assert "after 2 restarts" in status["message"]
    assert kills(out) == [("b", signal.SIGTERM)]


def test_max_restarts_zero_means_no_restart() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "ALWAYS", "max_restarts": 0}))
    assert updates(h.exit("a", exited(0))) == [("a", "TASK_FINISHED")]


def test_never_policy_is_no_policy() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "NEVER"}), task("b"))
    out = h.exit("a", exited(1))
    assert updates(out) == [("a", "TASK_FAILED")]
    assert kills(out) == [("b", signal.SIGTERM)]


def test_killed_restartable_task_stays_dead_without_killing_its_group() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "ALWAYS"}), task("b"))
    h.send(KillTask("a"))
    out = h.exit("a", signaled(signal.SIGTERM))
    assert updates(out) == [("a", "TASK_KILLED")]
    assert kills(out) == []
    assert h.machine.active_tasks() == ["b"]


def test_kill_during_backoff_ends_the_task_at_once() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "ALWAYS"}))
    h.exit("a", exited(1))
    (timer,) = h.timers(TimerKind.RESTART)
    out = h.send(KillTask("a"))
    assert has(out, CancelTimer(timer.timer))
    assert updates(out) == [("a", "TASK_KILLED")]
    assert kills(out) == []
    assert any(isinstance(i, Exit) for i in out)
    # The restart timer firing late does nothing.
    assert h.send(TimerFired(timer.timer)) == []


def test_group_failure_does_not_restart_restartable_members() -> None:
    h = Harness()
    h.start(task("a"), task("b", restart_policy={"type": "ALWAYS"}))
    out = h.exit("a", exited(1))
    assert kills(out) == [("b", signal.SIGTERM)]
    out = h.exit("b", signaled(signal.SIGTERM))
    assert updates(out) == [("b", "TASK_KILLED")]
    assert h.timers(TimerKind.RESTART) == []


def test_restart_after_oom_keeps_agent_reason_in_message() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "ON_FAILURE", "max_restarts": 1}))
    h.exit("a", signaled(9), state="TASK_FAILED", reason="REASON_CONTAINER_LIMITATION_MEMORY", message="OOM")
    h.fire(TimerKind.RESTART)
    out = h.launched("a")
    assert "OOM" in only_update(out, "a")["message"]
    out = h.exit(
        "a", signaled(9), state="TASK_FAILED", reason="REASON_CONTAINER_LIMITATION_MEMORY", message="OOM"
    )
    assert only_update(out, "a")["reason"] == "REASON_CONTAINER_LIMITATION_MEMORY"


def test_relaunch_failure_counts_as_a_failure() -> None:
    h = Harness()
    h.start(task("a", restart_policy={"type": "ON_FAILURE", "max_restarts": 1}))
    h.exit("a", exited(1))
    h.fire(TimerKind.RESTART)
    out = h.launched("a", error="no such image")
    assert only_update(out, "a")["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"


def test_relaunch_without_an_answer_from_the_agent_counts_as_a_failure() -> None:
    # Its siblings run: only a group's first launch abandons the executor.
    h = Harness()
    h.start(task("a", restart_policy={"type": "ON_FAILURE", "max_restarts": 1}), task("b"))
    h.exit("a", exited(1))
    h.fire(TimerKind.RESTART)
    out = h.launched("a", "the agent could not be reached", agent_lost=True)
    assert only_update(out, "a")["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
    assert kills(out) == [("b", signal.SIGTERM)]
    assert not h.machine.abandoned


# --- max_completion_time -----------------------------------------------------------------


def test_max_completion_time_kills_and_fails_the_task() -> None:
    h = Harness()
    h.launch(task("a", max_completion_time=seconds(5)), task("b"))
    assert h.launched("a") == []
    h.launched("b")
    (timer,) = h.timers(TimerKind.MAX_COMPLETION)
    assert timer.delay == 5.0
    out = h.send(TimerFired(timer.timer))
    assert kills(out) == [("a", signal.SIGTERM)]
    out = h.exit("a", signaled(signal.SIGTERM))
    status = only_update(out, "a")
    assert (status["state"], status["reason"]) == ("TASK_FAILED", "REASON_MAX_COMPLETION_TIME_REACHED")
    assert kills(out) == [("b", signal.SIGTERM)]  # the group policy


def test_max_completion_time_is_not_rearmed_by_restarts_and_stops_backoff() -> None:
    h = Harness()
    h.start(task("a", max_completion_time=seconds(5), restart_policy={"type": "ALWAYS"}))
    (timer,) = h.timers(TimerKind.MAX_COMPLETION)
    h.exit("a", exited(0))
    out = h.send(TimerFired(timer.timer))
    status = only_update(out, "a")
    assert status["reason"] == "REASON_MAX_COMPLETION_TIME_REACHED"
    h2 = Harness()
    h2.start(task("a", max_completion_time=seconds(5), restart_policy={"type": "ALWAYS"}))
    h2.exit("a", exited(0))
    h2.fire(TimerKind.RESTART)
    h2.launched("a")
    assert updates(h2.out) == [("a", "TASK_RUNNING")]
    assert h2.timers(TimerKind.MAX_COMPLETION) == []


def test_max_completion_timer_after_the_task_ended_is_ignored() -> None:
    h = Harness()
    h.launch(task("a", max_completion_time=seconds(5)), task("b"))
    assert h.launched("a") == []
    h.launched("b")
    (timer,) = h.timers(TimerKind.MAX_COMPLETION)
    out = h.exit("a", exited(0))
    assert has(out, CancelTimer(timer.timer))
    assert h.send(TimerFired(timer.timer)) == []


# --- checks and health ------------------------------------------------------------------


def test_checks_start_on_running_and_updates_carry_check_status() -> None:
    check = {"type": "TCP", "tcp": {"port": 80}}
    h = Harness()
    h.launch(task("a", check=check))
    first = h.out[0]
    assert isinstance(first, SendUpdate)
    assert first.status["check_status"] == {"type": "TCP", "tcp": {}}
    out = h.launched("a")
    assert has(out, StartChecks("a", h.cid("a"), check, None))
    out = h.send(CheckUpdated("a", {"type": "TCP", "tcp": {"succeeded": True}}))
    status = only_update(out, "a")
    assert status["state"] == "TASK_RUNNING"
    assert status["reason"] == "REASON_TASK_CHECK_STATUS_UPDATED"
    assert status["check_status"] == {"type": "TCP", "tcp": {"succeeded": True}}
    out = h.exit("a", exited(0))
    assert has(out, StopChecks("a"))
    assert only_update(out, "a")["check_status"]["tcp"] == {"succeeded": True}
    # After the end, late results are dropped.
    assert h.send(CheckUpdated("a", {"type": "TCP", "tcp": {"succeeded": False}})) == []


def test_health_updates_and_kill_on_unhealthy_applies_group_policy() -> None:
    health = {"type": "HTTP", "http": {"port": 8080}}
    h = Harness()
    h.start(task("a", health_check=health), task("b"))
    out = h.send(HealthUpdated("a", True))
    status = only_update(out, "a")
    assert (status["healthy"], status["reason"]) == (True, "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED")
    out = h.send(HealthUpdated("a", False, kill_task=True))
    assert only_update(out, "a")["healthy"] is False
    assert kills(out) == [("a", signal.SIGTERM)]
    assert has(out, StopChecks("a"))
    assert h.send(HealthUpdated("a", False, kill_task=True)) == []
    out = h.exit("a", signaled(signal.SIGTERM))
    status = only_update(out, "a")
    assert status["state"] == "TASK_KILLED"
    assert status["healthy"] is False
    assert kills(out) == [("b", signal.SIGTERM)]


def test_unhealthy_task_with_restart_policy_is_restarted() -> None:
    h = Harness()
    h.start(
        task("a", health_check={"type": "TCP", "tcp": {"port": 1}}, restart_policy={"type": "ON_FAILURE"}),
        task("b"),
    )
    h.send(HealthUpdated("a", False, kill_task=True))
    out = h.exit("a", signaled(signal.SIGTERM))
    assert kills(out) == []
    assert len(h.timers(TimerKind.RESTART)) == 1
    h.fire(TimerKind.RESTART)
    out = h.launched("a")
    assert "healthy" not in only_update(out, "a")


def test_describe_exit() -> None:
    assert describe_exit(exited(3)) == "Command exited with status 3"
    assert describe_exit(signaled(signal.SIGTERM)) == "Command terminated with signal SIGTERM"
    assert describe_exit(None) == "Command terminated with unknown status"
