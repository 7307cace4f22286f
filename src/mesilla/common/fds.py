"""Waiting on a file descriptor from the event loop, without a thread."""

from __future__ import annotations

import asyncio


async def wait_readable(fd: int) -> None:
    """Returns once `fd` is readable: a pipe or socket with data or at EOF, a pidfd whose
    process has ended, an eventfd or inotify descriptor with events.

    Cancelled (or bounded with `asyncio.timeout`), it stops watching `fd`; the
    caller owns `fd` and closes it.
    """
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
