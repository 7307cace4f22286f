"""The console socket: a terminal's master handed over as OCI runtimes do."""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import struct
import termios

import pytest

from mesilla.containerizer import console


async def test_master_sent_over_the_console_socket_drives_the_slave() -> None:
    listener = console.ConsoleSocket()
    master, slave = os.openpty()
    try:
        console.set_window_size(master, {"rows": 24, "columns": 80})
        console.send(listener.path, master, os.ttyname(slave))
        received = await listener.receive()
        try:
            assert received != master
            size = fcntl.ioctl(slave, termios.TIOCGWINSZ, bytes(8))
            assert struct.unpack("HHHH", size)[:2] == (24, 80)
            os.write(received, b"typed\n")  # what the master writes, the slave reads
            assert os.read(slave, 100) == b"typed\n"
        finally:
            os.close(received)
    finally:
        os.close(master)
        os.close(slave)
        listener.close()
    assert not os.path.exists(os.path.dirname(listener.path))


async def test_receive_gives_up_when_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "RECEIVE_TIMEOUT", 0.1)
    listener = console.ConsoleSocket()
    try:
        with pytest.raises(console.ConsoleError, match="No terminal"):
            await listener.receive()
    finally:
        listener.close()


async def test_a_message_without_a_terminal_is_refused() -> None:
    listener = console.ConsoleSocket()
    try:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, _send_plain, listener.path)
        with pytest.raises(console.ConsoleError, match="carried no terminal"):
            await listener.receive()
    finally:
        listener.close()


def _send_plain(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(b"/dev/pts/x")
