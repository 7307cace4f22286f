"""What the master sends, and when it does not (`mesilla.master.outbox.Outbox`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from mesilla.common.tasks import TaskOwner
from mesilla.master.agent import Agent
from mesilla.master.framework import Framework
from mesilla.master.outbox import Outbox
from mesilla.v1.mesos import (
    AgentID,
    AgentInfo,
    FrameworkID,
    FrameworkInfo,
    OfferID,
    TaskID,
    TaskState,
    TaskStatus,
)


class Recording:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.closed = False

    async def send(self, event: Any) -> bool:
        self.events.append(event)
        return True

    def close(self) -> None:
        self.closed = True


@pytest.fixture
async def owner() -> AsyncIterator[TaskOwner]:
    owner = TaskOwner("test")
    yield owner
    await owner.close()


def framework(stream: Recording | None) -> Framework:
    record = Framework(id="fw", info=FrameworkInfo(user="u", name="n", id=FrameworkID(value="fw")))
    if stream is not None:
        record.connect(stream, "stream-id")  # type: ignore[arg-type]
    return record


def agent(stream: Recording | None) -> Agent:
    record = Agent(id="a", info=AgentInfo(hostname="h", id=AgentID(value="a")), pid="slave(1)@127.0.0.1:5051")
    record.stream = stream  # type: ignore[assignment]
    return record


async def test_updates_go_to_connected_frameworks_only(owner: TaskOwner) -> None:
    outbox = Outbox(owner)
    status = TaskStatus(task_id=TaskID(value="t"), state=TaskState.TASK_RUNNING)
    stream = Recording()
    await outbox.update(framework(stream), status)
    assert [e.type.value for e in stream.events] == ["UPDATE"]
    await outbox.update(framework(None), status)  # nowhere to send: the framework reconciles later


async def test_a_rescind_is_sent_in_the_background_when_connected(owner: TaskOwner) -> None:
    outbox = Outbox(owner)
    outbox.rescind(framework(None), OfferID(value="o0"))  # disconnected: nothing to send
    assert len(owner) == 0
    stream = Recording()
    outbox.rescind(framework(stream), OfferID(value="o1"))
    assert stream.events == [] and len(owner) == 1  # the allocator's callback does not wait
    await owner.close(grace=10)  # lets it finish
    assert [e.rescind.offer_id.value for e in stream.events] == ["o1"]


async def test_an_error_closes_the_stream_and_no_uuid_means_no_ack(owner: TaskOwner) -> None:
    outbox = Outbox(owner)
    stream = Recording()
    await outbox.error(stream, "Framework failed over")  # type: ignore[arg-type]
    assert stream.closed and stream.events[0].error.message == "Framework failed over"
    to_agent = Recording()
    await outbox.acknowledge(agent(to_agent), "fw", TaskID(value="t"), None)
    assert to_agent.events == []
    await outbox.acknowledge(agent(to_agent), "fw", TaskID(value="t"), b"u" * 16)
    assert [e.type.value for e in to_agent.events] == ["ACKNOWLEDGE"]
    assert await outbox.to_agent(agent(None), to_agent.events[0]) is False
