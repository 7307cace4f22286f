"""The chaos checker over hand-made histories: what counts as a task's end, and what does not."""

from __future__ import annotations

from mesilla.testing.chaos import check
from mesilla.testing.chaos.history import ACCEPTED, History
from mesilla.testing.scheduler import Json, scalar

SOURCE = "chaos-0"


def accept(history: History, *task_ids: str) -> None:
    infos = [{"task_id": {"value": t}, "resources": [scalar("cpus", 0.1)], "command": {"value": "sleep 1"}}
             for t in task_ids]  # fmt: skip
    payload: Json = {"operations": [{"type": "LAUNCH", "launch": {"task_infos": infos}}]}
    history.add(SOURCE, "call", type="ACCEPT", payload=payload, outcome=ACCEPTED)


def update(
    history: History, task_id: str, state: str, uuid: str | None = None, reason: str | None = None,
    source: str = "SOURCE_MASTER",
) -> None:  # fmt: skip
    history.add(SOURCE, "update", task_id=task_id, state=state, reason=reason, uuid=uuid,
                source=source, message=None, agent_id="S0")  # fmt: skip
    if uuid is not None:
        history.add(SOURCE, "call", type="ACKNOWLEDGE", payload={"uuid": uuid}, outcome=ACCEPTED)


def answer(history: History, task_id: str, state: str) -> None:
    update(history, task_id, state, reason=check.RECONCILIATION)


def master_failover(history: History) -> None:
    history.add("chaos", "fault", kind="master_kill", target="master", duration=1.0, pick=0.0, scheduled=0.0)


def quiet_reconcile(history: History) -> None:
    history.add("chaos", "note", reconcile=SOURCE, text="implicit RECONCILE")


def test_unreachable_then_a_master_failover_may_end_in_reconciliation_only() -> None:
    history = History()
    accept(history, "t")
    update(history, "t", "TASK_UNREACHABLE")
    master_failover(history)
    quiet_reconcile(history)
    answer(history, "t", "TASK_UNKNOWN")
    record = check.launched_tasks(history, SOURCE)["t"]
    assert record.forgotten and not record.live()
    assert check.check_tasks(history, SOURCE) == []


def test_unreachable_without_a_failover_must_end_in_an_update() -> None:
    history = History()
    master_failover(history)
    accept(history, "t")
    update(history, "t", "TASK_UNREACHABLE")
    quiet_reconcile(history)
    answer(history, "t", "TASK_UNKNOWN")
    record = check.launched_tasks(history, SOURCE)["t"]
    assert not record.forgotten and record.live()
    [violation] = check.check_tasks(history, SOURCE)
    assert "no terminal update" in violation


def test_the_answer_to_a_kill_of_an_unknown_task_is_no_update() -> None:
    history = History()
    accept(history, "t")
    update(history, "t", "TASK_UNREACHABLE")
    master_failover(history)
    answer(history, "t", "TASK_UNKNOWN")  # the load's KILL, the master not knowing the task
    record = check.launched_tasks(history, SOURCE)["t"]
    assert record.states() == ["TASK_UNREACHABLE"] and record.answers == []
    assert record.forgotten


def test_a_task_ended_twice_is_a_violation() -> None:
    history = History()
    accept(history, "t")
    update(history, "t", "TASK_UNREACHABLE")
    master_failover(history)
    update(history, "t", "TASK_DROPPED", uuid="u1", reason="REASON_EXECUTOR_TERMINATED")
    update(history, "t", "TASK_LOST", uuid="u2", reason="REASON_EXECUTOR_TERMINATED")
    assert not check.launched_tasks(history, SOURCE)["t"].forgotten
    [violation] = check.check_tasks(history, SOURCE)
    assert "2 terminal updates" in violation


def test_an_end_the_agent_made_without_a_reason_is_a_violation() -> None:
    history = History()
    accept(history, "t", "u")
    update(history, "t", "TASK_FAILED", uuid="u1", source="SOURCE_AGENT")
    update(history, "u", "TASK_FAILED", uuid="u2", source="SOURCE_EXECUTOR")  # the task's own exit
    [violation] = check.check_tasks(history, SOURCE)
    assert "task t" in violation and "TASK_FAILED from SOURCE_AGENT without a reason" in violation


def hang(history: History, executor_id: str) -> None:
    history.add("chaos", "hung", executor_id=executor_id, agent="agent 0", text="hung")


def test_a_hung_executors_tasks_end_for_the_hang() -> None:
    history = History()
    accept(history, "t", "u", "v", "w")
    update(history, "t", "TASK_RUNNING", uuid="r1", source="SOURCE_EXECUTOR")
    update(history, "u", "TASK_FINISHED", uuid="f1", source="SOURCE_EXECUTOR")  # ended before
    update(history, "v", "TASK_RUNNING", uuid="r2", source="SOURCE_EXECUTOR")
    update(history, "w", "TASK_RUNNING", uuid="r3", source="SOURCE_EXECUTOR")
    for task_id in ("t", "u", "v"):
        hang(history, task_id)  # a command task's executor has the task's id
    update(history, "w", "TASK_FINISHED", uuid="f2", source="SOURCE_EXECUTOR")  # sent before its hang
    hang(history, "w")
    update(history, "t", "TASK_GONE", uuid="g1", source="SOURCE_AGENT", reason=check.HUNG)
    for task_id in ("t", "u", "v", "w"):
        history.add("chaos", "unhung", executor_id=task_id, text="continued")
    update(history, "v", "TASK_FINISHED", uuid="f3", source="SOURCE_EXECUTOR")  # the hang went unseen
    [violation] = check.check_tasks(history, SOURCE)
    assert "task v of executor v" in violation and "not for the hang" in violation
