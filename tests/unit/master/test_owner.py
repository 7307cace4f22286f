"""The owner of the master's background tasks (`mesilla.master.owner.TaskOwner`)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from mesilla.master.owner import TaskOwner


async def test_close_cancels_every_child_and_waits_for_it() -> None:
    owner = TaskOwner("test")
    await owner.start()
    started, cleaned = asyncio.Event(), asyncio.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    task = owner.spawn(forever(), "forever")
    await started.wait()
    await owner.aclose()
    assert task.cancelled() and cleaned.is_set()
    await owner.aclose()  # twice is fine


async def test_a_failing_child_is_logged_and_leaves_the_others_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner = TaskOwner("test")
    await owner.start()
    done = asyncio.Event()

    async def broken() -> None:
        raise RuntimeError("bug")

    async def fine() -> None:
        await asyncio.sleep(0)
        done.set()

    with caplog.at_level(logging.ERROR, logger="mesilla.master.owner"):
        failed = owner.spawn(broken(), "broken")
        owner.spawn(fine(), "fine")
        await done.wait()
        await failed
    assert "background task broken failed" in caplog.text
    await owner.aclose()


async def test_close_is_bounded_by_the_grace_period(caplog: pytest.LogCaptureFixture) -> None:
    owner = TaskOwner("test", grace=0.01)
    await owner.start()
    release, started = asyncio.Event(), asyncio.Event()

    async def stubborn() -> None:
        started.set()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # ignores cancellation until released

    owner.spawn(stubborn(), "stubborn")
    await started.wait()
    with caplog.at_level(logging.WARNING, logger="mesilla.master.owner"):
        await owner.aclose()
    assert "still running" in caplog.text
    release.set()
    owner.grace = 5.0
    await owner.aclose()


async def test_nothing_starts_once_closed() -> None:
    owner = TaskOwner("test")
    await owner.start()
    await owner.aclose()
    ran = False

    async def late() -> None:
        nonlocal ran
        ran = True

    task = owner.spawn(late(), "late")
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not ran


async def test_spawn_before_start_is_a_bug() -> None:
    async def early() -> None:
        pass

    with pytest.raises(RuntimeError, match="before start"):
        TaskOwner("test").spawn(early())


async def test_a_child_cancelled_before_it_ran_is_closed() -> None:
    owner = TaskOwner("test")
    await owner.start()
    ran = False

    async def never() -> None:
        nonlocal ran
        ran = True

    task = owner.spawn(never(), "never")
    task.cancel()  # before its first step
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not ran
    await owner.aclose()
