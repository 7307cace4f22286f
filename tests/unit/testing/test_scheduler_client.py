"""How `mesilla.testing.scheduler.Framework` tells what a task went through, from the events it read."""

from __future__ import annotations

import asyncio

import pytest

from mesilla.testing.scheduler import Framework, FrameworkError, Json


def update(task_id: str, state: str, uuid: str | None = None, reason: str | None = None) -> Json:
    status: Json = {"task_id": {"value": task_id}, "state": state, "agent_id": {"value": "a"}}
    if uuid is not None:
        status["uuid"] = uuid
    if reason is not None:
        status["reason"] = reason
    return {"type": "UPDATE", "update": {"status": status}}


async def feed(framework: Framework, *events: Json) -> None:
    subscribed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for event in events:
        await framework._handle(event, subscribed)


async def test_a_resent_update_counts_once_and_a_second_end_shows() -> None:
    framework = Framework("127.0.0.1:1", acknowledge=False)
    await feed(
        framework,
        update("t", "TASK_RUNNING", "u1"),
        update("t", "TASK_FAILED", "u2"),
        update("t", "TASK_FAILED", "u2"),  # resent after an agent restart
    )
    assert framework.states("t") == ["TASK_RUNNING", "TASK_FAILED"]
    assert len(framework.terminal("t")) == 1
    await feed(framework, update("t", "TASK_KILLED", "u3"))
    assert [u.state for u in framework.terminal("t")] == ["TASK_FAILED", "TASK_KILLED"]


async def test_answers_to_our_reconcile_are_not_news_but_master_made_ends_are() -> None:
    framework = Framework("127.0.0.1:1", acknowledge=False)
    framework._reconciling.add("asked")
    await feed(
        framework,
        update("asked", "TASK_RUNNING", reason="REASON_RECONCILIATION"),
        update("dropped", "TASK_LOST", reason="REASON_RECONCILIATION"),  # an agent did not know it
    )
    answer = framework.reconciled("asked")
    assert answer is not None and answer.state == "TASK_RUNNING"
    assert framework.states("asked") == []
    assert framework.reconciled("dropped") is None
    assert [u.state for u in framework.terminal("dropped")] == ["TASK_LOST"]


async def test_until_state_wakes_on_the_update_and_times_out_with_what_it_saw() -> None:
    framework = Framework("127.0.0.1:1", acknowledge=False)
    waiter = asyncio.create_task(framework.until_state(["t"], "TERMINAL", 5))
    await feed(framework, update("t", "TASK_RUNNING", "u1"))
    assert not waiter.done()
    await feed(framework, update("t", "TASK_FINISHED", "u2"))
    await waiter
    with pytest.raises(FrameworkError, match="TASK_FINISHED"):
        await framework.until_state(["t"], "TASK_KILLED", 0.05)
