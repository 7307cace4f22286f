"""The status update manager: order, retries with backoff, duplicates, acks, checkpoints."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mesilla.agent import checkpoints
from mesilla.agent.checkpointer import Checkpointer
from mesilla.agent.status_update_manager import StatusUpdateError, StatusUpdateManager
from mesilla.common.tasks import TaskOwner
from mesilla.v1.internal import StatusUpdate
from mesilla.v1.mesos import FrameworkID, TaskID, TaskState, TaskStatus


def update(task: str, state: TaskState, uid: bytes | None = None) -> StatusUpdate:
    return StatusUpdate(
        framework_id=FrameworkID(value="fw"),
        status=TaskStatus(task_id=TaskID(value=task), state=state, uuid=uid or uuid.uuid4().bytes),
    )


# The manager names its files; the checkpointer only appends to them.
CHECKPOINTER = Checkpointer("/nonexistent")


@pytest.fixture
async def owner() -> AsyncIterator[TaskOwner]:
    """The owner of a manager's appends (the agent's, in the agent)."""
    owner = TaskOwner("test")
    yield owner
    await owner.close()


class Recorder:
    def __init__(self) -> None:
        self.sent: list[StatusUpdate] = []
        self.arrived = asyncio.Event()

    def __call__(self, u: StatusUpdate) -> None:
        self.sent.append(u)
        self.arrived.set()

    async def next(self) -> StatusUpdate:
        await asyncio.wait_for(self.arrived.wait(), 10)
        self.arrived.clear()
        return self.sent[-1]


async def test_only_the_head_is_sent_and_acks_advance_the_stream(owner: TaskOwner) -> None:
    sent = Recorder()
    manager = StatusUpdateManager(sent, CHECKPOINTER, owner, initial_interval=60)
    manager.resume()
    running, finished = update("t", TaskState.TASK_RUNNING), update("t", TaskState.TASK_FINISHED)
    manager.update(running)
    manager.update(finished)
    assert [u.status.state for u in sent.sent] == [TaskState.TASK_RUNNING]
    assert manager.acknowledgement("fw", "t", finished.status.uuid) is None  # not the head
    assert manager.acknowledgement("fw", "t", running.status.uuid) is False
    assert sent.sent[-1] is finished
    assert manager.acknowledgement("fw", "t", finished.status.uuid) is True  # stream ended
    assert not manager.has_stream("fw", "t")
    manager.close()


async def test_unacknowledged_head_is_resent_with_backoff(owner: TaskOwner) -> None:
    sent = Recorder()
    manager = StatusUpdateManager(sent, CHECKPOINTER, owner, initial_interval=0.05, max_interval=0.2)
    manager.resume()
    running = update("t", TaskState.TASK_RUNNING)
    manager.update(running)
    for _ in range(4):
        assert (await sent.next()).status.uuid == running.status.uuid
    assert len(sent.sent) >= 4
    manager.acknowledgement("fw", "t", running.status.uuid)
    count = len(sent.sent)
    await asyncio.sleep(0.3)
    assert len(sent.sent) == count  # no resend after the ack
    manager.close()


async def test_duplicates_are_dropped_and_nothing_follows_a_terminal_update(owner: TaskOwner) -> None:
    sent = Recorder()
    manager = StatusUpdateManager(sent, CHECKPOINTER, owner, initial_interval=60)
    manager.resume()
    running = update("t", TaskState.TASK_RUNNING)
    assert manager.update(running) is True
    assert manager.update(running) is False
    assert manager.seen("fw", "t", running.status.uuid)
    manager.update(update("t", TaskState.TASK_FAILED))
    with pytest.raises(StatusUpdateError, match="after its terminal update"):
        manager.update(update("t", TaskState.TASK_RUNNING))
    manager.close()


async def test_paused_manager_sends_nothing_until_resumed(owner: TaskOwner) -> None:
    sent = Recorder()
    manager = StatusUpdateManager(sent, CHECKPOINTER, owner, initial_interval=60)
    manager.update(update("t", TaskState.TASK_RUNNING))
    assert sent.sent == []
    manager.resume()
    assert len(sent.sent) == 1
    manager.close()


async def test_streams_survive_a_restart_through_their_checkpoint(tmp_path: Any, owner: TaskOwner) -> None:
    path = str(tmp_path / "task.updates")
    first = StatusUpdateManager(Recorder(), CHECKPOINTER, owner, initial_interval=60)
    first.resume()
    running, finished = update("t", TaskState.TASK_RUNNING), update("t", TaskState.TASK_FINISHED)
    first.update(running, path)
    first.update(finished, path)
    first.acknowledgement("fw", "t", running.status.uuid)
    await first.durable("fw", "t")
    first.close()

    records = checkpoints.decode_update_records(path, checkpoints.read_records(path))
    sent = Recorder()
    second = StatusUpdateManager(sent, CHECKPOINTER, owner, initial_interval=60)
    second.recover("fw", "t", records, path)
    assert second.seen("fw", "t", running.status.uuid)
    second.resume()
    assert [u.status.uuid for u in sent.sent] == [finished.status.uuid]
    assert second.acknowledgement("fw", "t", finished.status.uuid) is True
    second.close()


async def test_nothing_is_acted_upon_before_its_record_is_durable(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, owner: TaskOwner
) -> None:
    path = str(tmp_path / "task.updates")
    disk = threading.Event()  # the slow fsync of an append, released by the test
    real_append = checkpoints.append_record

    def slow_append(p: str, record: bytes) -> None:
        assert disk.wait(10)
        real_append(p, record)

    monkeypatch.setattr(checkpoints, "append_record", slow_append)
    sent = Recorder()
    manager = StatusUpdateManager(sent, CHECKPOINTER, owner, initial_interval=60)
    manager.resume()
    running, finished = update("t", TaskState.TASK_RUNNING), update("t", TaskState.TASK_FINISHED)
    manager.update(running, path)
    manager.update(finished, path)
    durable = asyncio.ensure_future(manager.durable("fw", "t"))
    await asyncio.sleep(0.05)
    assert sent.sent == [] and not durable.done()  # neither forwarded nor acknowledgeable
    disk.set()
    await durable
    assert (await sent.next()).status.uuid == running.status.uuid
    records = checkpoints.decode_update_records(path, checkpoints.read_records(path))
    assert [r.update.status.uuid for r in records if r.update] == [
        running.status.uuid,
        finished.status.uuid,
    ]
    # The next head goes once the acknowledgement is durable too.
    disk.clear()
    manager.acknowledgement("fw", "t", running.status.uuid)
    await asyncio.sleep(0.05)
    assert len(sent.sent) == 1
    disk.set()
    assert (await sent.next()).status.uuid == finished.status.uuid
    manager.close()
