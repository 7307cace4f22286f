"""TaskOwner: every task it starts ends before `close` returns; closing is bounded and idempotent."""

from __future__ import annotations

import asyncio
import logging

import pytest

from mesilla.common.errors import Closed
from mesilla.common.tasks import TaskOwner


async def test_a_failure_is_logged_and_its_siblings_go_on(caplog: pytest.LogCaptureFixture) -> None:
    owner = TaskOwner("owner")
    release = asyncio.Event()

    async def fail() -> None:
        raise RuntimeError("boom")

    async def sibling() -> str:
        await release.wait()
        return "done"

    failing = owner.spawn(fail(), "failing job")
    survivor = owner.spawn(sibling(), "sibling")
    with caplog.at_level(logging.ERROR, logger="mesilla.common.tasks"):
        await asyncio.wait([failing])
        await asyncio.sleep(0)  # the done callbacks
    assert "owner: failing job failed" in caplog.text
    assert len(owner) == 1
    release.set()
    assert await survivor == "done"
    await owner.close()
    assert len(owner) == 0


async def test_close_cancels_lets_cleanup_run_and_may_be_called_twice() -> None:
    owner = TaskOwner("owner")
    cleaned = asyncio.Event()
    started = asyncio.Event()

    async def job() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # cleanup that awaits
            cleaned.set()

    task = owner.spawn(job(), "job")
    await started.wait()
    await owner.close()
    assert task.cancelled() and cleaned.is_set()
    await owner.close()
    assert owner.closed


async def test_nothing_starts_once_closed() -> None:
    owner = TaskOwner("the containerizer")
    await owner.close()

    async def job() -> None:
        pass

    with pytest.raises(Closed, match="the containerizer is closed: cannot start late job"):
        owner.spawn(job(), "late job")


async def test_grace_lets_work_in_flight_finish_before_cancelling() -> None:
    owner = TaskOwner("owner")
    step = asyncio.Event()

    async def launch() -> str:
        await step.wait()
        # Work in flight may start more work while the owner drains.
        return await owner.spawn(asyncio.sleep(0, "nested"), "nested")

    task = owner.spawn(launch(), "launch")
    closing = asyncio.create_task(owner.close(grace=60))
    await asyncio.sleep(0)
    assert not closing.done() and not owner.closed
    step.set()
    await closing
    assert task.result() == "nested"


async def test_cleanup_is_bounded_for_a_task_that_will_not_end(caplog: pytest.LogCaptureFixture) -> None:
    owner = TaskOwner("owner", cleanup_timeout=0.01)
    stop = asyncio.Event()

    async def stubborn() -> None:
        while not stop.is_set():
            try:
                await stop.wait()
            except asyncio.CancelledError:
                continue  # ignores cancellation until told

    task = owner.spawn(stubborn(), "stubborn")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="mesilla.common.tasks"):
        await owner.close()
    assert "stubborn did not end within" in caplog.text
    stop.set()
    await task


async def test_cancelling_the_closer_does_not_cut_the_cleanup_short() -> None:
    owner = TaskOwner("owner")
    in_cleanup = asyncio.Event()
    finish_cleanup = asyncio.Event()
    cleaned = False

    async def job() -> None:
        nonlocal cleaned
        try:
            await asyncio.Event().wait()
        finally:
            in_cleanup.set()
            await finish_cleanup.wait()
            cleaned = True

    owner.spawn(job(), "job")
    await asyncio.sleep(0)
    closer = asyncio.create_task(owner.close())
    await in_cleanup.wait()
    closer.cancel()
    await asyncio.sleep(0)
    assert not closer.done()  # still waiting for the cleanup
    finish_cleanup.set()
    with pytest.raises(asyncio.CancelledError):
        await closer
    assert cleaned


async def test_a_task_may_close_its_own_owner() -> None:
    owner = TaskOwner("owner")
    other_ended = asyncio.Event()

    async def other() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            other_ended.set()

    async def shutdown() -> None:
        await owner.close()

    owner.spawn(other(), "other")
    await owner.spawn(shutdown(), "shutdown")
    assert other_ended.is_set()


async def test_async_with_closes_on_exit() -> None:
    async with TaskOwner("scope") as owner:
        task = owner.spawn(asyncio.Event().wait(), "waiter")
        await asyncio.sleep(0)
    assert task.cancelled()


async def test_join_waits_for_every_task_and_cancels_nothing() -> None:
    owner = TaskOwner("owner")
    step = asyncio.Event()
    results: list[str] = []

    async def first() -> None:
        await step.wait()
        results.append("first")
        owner.spawn(second(), "second")  # started while joining: waited for too

    async def second() -> None:
        results.append("second")

    owner.spawn(first(), "first")
    joining = asyncio.create_task(owner.join())
    await asyncio.sleep(0)
    assert not joining.done()
    step.set()
    await joining
    assert results == ["first", "second"] and not owner.closed


async def test_a_close_cancelled_during_its_grace_still_ends_every_task() -> None:
    owner = TaskOwner("owner")
    started = asyncio.Event()

    async def job() -> None:
        started.set()
        await asyncio.Event().wait()

    task = owner.spawn(job(), "job")
    await started.wait()
    closing = asyncio.create_task(owner.close(grace=60))
    await asyncio.sleep(0)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert task.cancelled() and owner.closed
