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
    history: History, task_id: str, state: str, uuid: str | None = None, reason: str | None = None
) -> None:
    history.add(SOURCE, "update", task_id=task_id, state=state, reason=reason, uuid=uuid,
                source="SOURCE_MASTER", message=None, agent_id="S0")  # fmt: skip
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
    update(history, "t", "TASK_DROPPED", uuid="u1")
    update(history, "t", "TASK_LOST", uuid="u2")
    assert not check.launched_tasks(history, SOURCE)["t"].forgotten
    [violation] = check.check_tasks(history, SOURCE)
    assert "2 terminal updates" in violation
