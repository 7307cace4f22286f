"""The agent's background tasks, owned by one `asyncio.TaskGroup`.

Every job the agent starts without awaiting it (a launch, a destroy, a
delivery to an executor) is a child of `TaskOwner`: a failure is logged and
ends only that job (siblings go on), and `close` cancels what is still
running and waits for it, at most `CLOSE_TIMEOUT` seconds, so that a stopped
agent leaves no task behind nobody awaits. `cleanup` runs a cleanup step to
its end even when its caller is cancelled, within its own bound (trio's
shielded cancel scopes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long `close` waits for cancelled jobs to finish their cleanup.
CLOSE_TIMEOUT = 10.0


class TaskOwner:
    """Starts with `start`, ends with `close` (twice is fine); `spawn` in between."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._group: asyncio.TaskGroup | None = None
        self._host: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._jobs: set[asyncio.Task[Any]] = set()
        self._closed = False

    async def start(self) -> None:
        if self._host is not None:
            return
        entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._host = asyncio.create_task(self._run(entered), name=f"{self.name} tasks")
        await entered

    async def _run(self, entered: asyncio.Future[None]) -> None:
        async with asyncio.TaskGroup() as group:
            self._group = group
            entered.set_result(None)
            await self._stop.wait()
            for job in list(self._jobs):
                job.cancel()

    def spawn(self, coro: Coroutine[Any, Any, T], what: str) -> asyncio.Task[T]:
        """Runs `coro` as a task of the group's; its failure is logged, and kept in the
        task for whoever awaits it."""
        if self._group is None:
            coro.close()
            raise RuntimeError(f"{self.name} has not started: cannot start {what}")
        task = asyncio.get_running_loop().create_task(coro, name=what)
        if self._closed:
            # Stopping: a job started by the teardown itself is not run.
            log.debug("%s is closed: not starting %s", self.name, what)
            task.cancel()
            return task
        supervisor = self._group.create_task(_supervise(task, what), name=f"owner of {what}")
        self._jobs.add(supervisor)
        supervisor.add_done_callback(self._jobs.discard)
        return task

    async def close(self) -> None:
        """Cancels every child and waits for them (bounded); the owner is then closed."""
        self._closed = True
        host = self._host
        if host is None or host.done():
            return
        self._stop.set()
        done, _ = await asyncio.wait({host}, timeout=CLOSE_TIMEOUT)
        if not done:
            log.error(
                "%s: %d background tasks did not end within %ss: %s",
                self.name,
                len(self._jobs),
                CLOSE_TIMEOUT,
                ", ".join(sorted(job.get_name() for job in self._jobs)),
            )
            host.cancel()
            await asyncio.gather(host, return_exceptions=True)


async def _supervise(task: asyncio.Task[Any], what: str) -> None:
    """The group's child for `task`: cancelled, it cancels the task and waits for it."""
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task})
        raise
    if not task.cancelled() and task.exception() is not None:
        log.error("%s failed", what, exc_info=task.exception())


async def cleanup(step: Awaitable[T], timeout: float, what: str) -> T | None:
    """Awaits `step` to its end, or `timeout`, even if the caller is cancelled meanwhile
    (the cancellation is then raised once the step is done)."""
    task = asyncio.ensure_future(step)
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.shield(task)
    except TimeoutError:
        log.warning("%s did not finish within %ss", what, timeout)
        task.cancel()
        return None
    except asyncio.CancelledError:
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            log.warning("%s did not finish within %ss", what, timeout)
            task.cancel()
        raise
