"""The agent's background tasks have an owner: failures are logged and kept, close
cancels and awaits them, and a cleanup step finishes even when its caller is cancelled."""

from __future__ import annotations

import asyncio
import logging

import pytest

from mesilla.agent.background import TaskOwner, cleanup


async def test_a_failure_is_logged_kept_and_ends_only_its_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner = TaskOwner("test")
    await owner.start()
    sibling_done = asyncio.Event()

    async def fail() -> None:
        raise OSError("disk full")

    async def sibling() -> None:
        await asyncio.sleep(0)
        sibling_done.set()

    failing = owner.spawn(fail(), "failing job")
    owner.spawn(sibling(), "sibling job")
    with pytest.raises(OSError, match="disk full"):
        await failing  # whoever awaits the job still sees why it failed
    await sibling_done.wait()
    await owner.close()
    assert any(r.levelno == logging.ERROR and "failing job failed" in r.message for r in caplog.records)


async def test_close_cancels_and_awaits_every_job() -> None:
    owner = TaskOwner("test")
    await owner.start()
    cleaned = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    job = owner.spawn(forever(), "forever")
    await asyncio.sleep(0)
    await owner.close()
    assert job.cancelled() and cleaned.is_set()
    await owner.close()  # twice is fine
    late = owner.spawn(asyncio.sleep(0), "after close")  # a teardown's own job is not run
    with pytest.raises(asyncio.CancelledError):
        await late


async def test_spawn_before_start_is_a_bug() -> None:
    with pytest.raises(RuntimeError, match="has not started"):
        TaskOwner("test").spawn(asyncio.sleep(0), "too early")


async def test_a_cleanup_step_finishes_when_its_caller_is_cancelled() -> None:
    finished = asyncio.Event()
    release = asyncio.Event()

    async def step() -> None:
        await release.wait()
        finished.set()

    caller = asyncio.create_task(cleanup(step(), 10.0, "step"))
    await asyncio.sleep(0)
    caller.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert finished.is_set()


async def test_a_cleanup_step_is_bounded() -> None:
    assert await cleanup(asyncio.Event().wait(), 0.01, "hung step") is None
