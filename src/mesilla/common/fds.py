"""Waiting on a file descriptor from the event loop, and reading a pipe there, without a thread."""

from __future__ import annotations

import asyncio
import os


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


async def read_line(fd: int) -> bytes:
    """The first line written to the pipe `fd`, its newline included (all of it, if the
    pipe ends first); what follows it is dropped. `fd` is made non-blocking."""
    os.set_blocking(fd, False)
    line = b""
    while b"\n" not in line:
        chunk = await _read_some(fd)
        if not chunk:
            return line
        line += chunk
    return line.partition(b"\n")[0] + b"\n"


async def read_all(fd: int) -> bytes:
    """Everything written to the pipe `fd` until its writers close it. `fd` is made
    non-blocking."""
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    while chunk := await _read_some(fd):
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_some(fd: int) -> bytes:
    """What the non-blocking pipe `fd` holds once it has any, b"" at its end."""
    while True:
        await wait_readable(fd)
        try:
            return os.read(fd, 4096)
        except BlockingIOError:
            continue  # another reader was first
