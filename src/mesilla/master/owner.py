"""The owner of the master's background tasks: one `asyncio.TaskGroup`, waited for at stop.

As trio's nurseries: every task the master starts in the background (a
health check, a heartbeat, a message sent without waiting, the allocator's
loop) is a child of one group that lives in a supervisor task from `start`
to `aclose`. A child that fails is logged and leaves the others running (a
send to one framework must not stop the master); `aclose` cancels every
child and waits for them, at most `grace` seconds and shielded from the
cancellation of its caller, so a stuck cleanup cannot hang the daemon's stop.
Closing twice is fine. A task spawned once closing has begun is cancelled
before it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

#: What a part is given to start background work: `TaskOwner.spawn`.
Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]

#: How long `aclose` waits for the cancelled children.
GRACE_SECONDS = 5.0


class TaskOwner:
    def __init__(self, name: str, *, grace: float = GRACE_SECONDS) -> None:
        self.name = name
        self.grace = grace
        self._group: asyncio.TaskGroup | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._children: set[asyncio.Task[None]] = set()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    async def start(self) -> None:
        """Enters the group (in the supervisor task); `spawn` works from then on."""
        if self._supervisor is not None:
            return
        entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._supervisor = asyncio.create_task(self._supervise(entered), name=f"{self.name} tasks")
        await entered

    async def _supervise(self, entered: asyncio.Future[None]) -> None:
        async with asyncio.TaskGroup() as group:
            self._group = group
            entered.set_result(None)
            await self._closing.wait()
            for child in list(self._children):
                child.cancel()
        # Leaving the `async with` waited for every child.

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[None]:
        """Runs `coro` as a child of the group; its failure is logged, not raised."""
        if self._group is None and not self.closing:
            coro.close()
            raise RuntimeError(f"{self.name}: a task spawned before start")
        if self._group is None or self.closing:
            # A task that never runs: cancelled before its first step.
            coro.close()
            orphan = asyncio.get_running_loop().create_task(self._guarded(coro, name), name=name)
            orphan.cancel()
            return orphan
        task = self._group.create_task(self._guarded(coro, name), name=name)
        self._children.add(task)
        task.add_done_callback(self._children.discard)
        # A child cancelled before its first step never started `coro`: close it (a no-op
        # for one that ran) so that it is not reported as never awaited.
        task.add_done_callback(lambda _: coro.close())
        return task

    async def _guarded(self, coro: Coroutine[Any, Any, Any], name: str | None) -> None:
        try:
            await coro
        except Exception:
            log.exception(
                "%s: background task %s failed", self.name, name or getattr(coro, "__qualname__", coro)
            )

    async def aclose(self) -> None:
        """Cancels every child and waits for them (at most `grace` seconds)."""
        self._closing.set()
        supervisor = self._supervisor
        if supervisor is None:
            return
        try:
            async with asyncio.timeout(self.grace):
                await asyncio.shield(supervisor)
        except TimeoutError:
            log.warning(
                "%s: %d background task(s) still running %ss after being cancelled",
                self.name,
                len(self._children),
                self.grace,
            )
