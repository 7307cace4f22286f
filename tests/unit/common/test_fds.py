"""wait_readable: a pipe with data, a pipe at EOF, a pidfd of an ended process; cancelling stops watching."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from mesilla.common.fds import wait_readable


async def test_a_pipe_becomes_readable_with_data_and_at_eof() -> None:
    r, w = os.pipe()
    try:
        waiting = asyncio.create_task(wait_readable(r))
        await asyncio.sleep(0)
        assert not waiting.done()
        os.write(w, b"x")
        await waiting
        assert os.read(r, 1) == b"x"
        os.close(w)
        w = -1
        await wait_readable(r)  # EOF
        assert os.read(r, 1) == b""
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


async def test_a_pidfd_becomes_readable_when_its_process_ends() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    pidfd = os.pidfd_open(child.pid)
    try:
        waiting = asyncio.create_task(wait_readable(pidfd))
        await asyncio.sleep(0)
        assert not waiting.done()
        assert child.stdin is not None
        child.stdin.close()  # it exits
        await waiting
    finally:
        os.close(pidfd)
        child.wait()


async def test_cancelled_it_stops_watching_the_fd() -> None:
    r, w = os.pipe()
    try:
        waiting = asyncio.create_task(wait_readable(r))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # The loop no longer watches it: a reader can be added again.
        assert asyncio.get_running_loop().remove_reader(r) is False
    finally:
        os.close(r)
        os.close(w)
