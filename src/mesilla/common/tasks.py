"""One owner for a component's background tasks: every task has a parent that waits for it.

As trio's nursery and asyncio's `TaskGroup`, a `TaskOwner` knows every task it
started and does not finish closing until they have ended. It differs where a
daemon's background work needs it: a failing task is logged and its siblings
go on (a TaskGroup cancels them all), and its lifetime spans calls (a
component's start to its `close`) rather than one `async with` block, though
`async with TaskOwner(...)` works too.

`close` is trio's `aclose`: it always releases what it owns, and closing twice
is fine. It may first let the tasks finish on their own for a `grace` period
(a launch in flight), then cancels what is left and waits for it, at most
`cleanup_timeout` and shielded from a cancellation of its caller: the
cancelled tasks' own cleanup (a container's rollback) is never cut short by
the cancellation that triggered it, nor can it hang the caller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from mesilla.common.errors import Closed

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long cancelled tasks get to run their cleanup before `close` gives up on them.
CLEANUP_TIMEOUT = 10.0


class TaskOwner:
    def __init__(self, name: str, *, cleanup_timeout: float = CLEANUP_TIMEOUT) -> None:
        self.name = name
        self.cleanup_timeout = cleanup_timeout
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(
        self, coro: Coroutine[Any, Any, T], name: str, *, log_failure: bool = True
    ) -> asyncio.Task[T]:
        """Runs `coro` as a task named `name`, owned until it ends.

        A failure is logged, unless `log_failure` is false because the caller
        awaits the task and handles it. Raises Closed once `close` has begun
        cancelling.
        """
        if self._closed:
            coro.close()  # never awaited: no "coroutine was never awaited" warning
            raise Closed(f"{self.name} is closed: cannot start {name}")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended if log_failure else self._tasks.discard)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: %s failed", self.name, task.get_name(), exc_info=task.exception())

    async def join(self) -> None:
        """Waits until every task, also those started meanwhile, has ended; cancels nothing."""
        await self._wait(None, shielded=False)

    async def close(self, grace: float = 0.0) -> None:
        """Lets the tasks end on their own for `grace` seconds, then cancels and awaits the rest.

        Cancelled while granting the grace, it still cancels and awaits them, then propagates.
        """
        try:
            if grace > 0 and not self._closed:
                await self._wait(asyncio.get_running_loop().time() + grace, shielded=False)
        finally:
            self._closed = True
            for task in self._others():
                task.cancel()
            await self._wait(asyncio.get_running_loop().time() + self.cleanup_timeout, shielded=True)

    def _others(self) -> set[asyncio.Task[Any]]:
        """The tasks to wait for: all but the caller's own (a task may close its owner)."""
        return self._tasks - {asyncio.current_task()}

    async def _wait(self, deadline: float | None, *, shielded: bool) -> None:
        """Until every task (also those started meanwhile) has ended, or `deadline` (None: none).

        Shielded, a cancellation of the caller waits (bounded) too, then propagates.
        """
        loop = asyncio.get_running_loop()
        cancelled = False
        while others := self._others():
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                break
            waiter = asyncio.ensure_future(asyncio.wait(others, timeout=remaining))
            while not waiter.done():
                try:
                    await (asyncio.shield(waiter) if shielded else waiter)
                except asyncio.CancelledError:
                    if not shielded:
                        raise
                    cancelled = True
        if shielded and (left := self._others()):
            log.warning(
                "%s: %s did not end within %gs of being cancelled",
                self.name,
                ", ".join(sorted(task.get_name() for task in left)),
                self.cleanup_timeout,
            )
        if cancelled:
            raise asyncio.CancelledError

    async def __aenter__(self) -> TaskOwner:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


class Loop:
    """A component's one long-running task (its loop): run as a task of an owner from
    `start` until `stop`, which cancels it and waits for it to end."""

    def __init__(self, name: str, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.name = name
        self._body = body
        self._task: asyncio.Task[None] | None = None

    def start(self, owner: TaskOwner) -> bool:
        """Starts the loop unless it runs already; returns whether this call started it."""
        if self._task is not None:
            return False
        self._task = owner.spawn(self._body(), self.name)
        return True

    async def stop(self) -> bool:
        """Cancels the loop and waits for it; returns whether it was running."""
        task, self._task = self._task, None
        if task is None:
            return False
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True
