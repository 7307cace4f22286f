"""Blocking work (fsync, big file trees) off the event loop, safe to cancel."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def in_thread(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Runs blocking `func` in a worker thread. Cancelled, it still waits for the thread
    (which cannot be stopped), so the caller's cleanup never races with its writes."""
    work = asyncio.ensure_future(asyncio.to_thread(func, *args, **kwargs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await asyncio.gather(work, return_exceptions=True)
        raise
