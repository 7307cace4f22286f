"""The console socket: how a TTY container's pseudo-terminal reaches the agent.

A container with `ContainerInfo.tty_info` gets a pseudo-terminal whose slave
is its stdin, stdout, stderr and controlling terminal. Whoever allocates it
sends the master over a unix socket, as OCI runtimes do for `--console-socket`
(one message: the slave's name as data, the master as SCM_RIGHTS): runc
allocates it inside the container's own devpts for the linux launcher, the
posix launcher on the host. The agent's I/O switchboard listens, receives the
master, and relays the session's input and output through it.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import os
import socket
import struct
import tempfile
import termios
from typing import Any

from mesilla.common import files
from mesilla.common.fds import wait_readable

# How long the switchboard waits for a launcher that said it allocated the terminal.
RECEIVE_TIMEOUT = 10.0


class ConsoleError(OSError):
    """No terminal came over the console socket."""


def set_window_size(fd: int, window_size: dict[str, Any] | None) -> None:
    """Sets a terminal's size from TTYInfo.WindowSize (`rows`, `columns`)."""
    if not window_size:
        return
    rows, columns = int(window_size.get("rows", 0)), int(window_size.get("columns", 0))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def send(path: str, master: int, name: str) -> None:
    """Sends a terminal's master over the console socket at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendmsg(
            [name.encode()],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [master]))],
        )


class ConsoleSocket:
    """A listening console socket in a private directory (unix socket paths are short)."""

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="mesilla-console-")
        self.path = os.path.join(self._directory, "socket")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(1)
        self._listener.setblocking(False)

    async def receive(self) -> int:
        """The master sent over the socket (non-blocking); ConsoleError if none comes."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(RECEIVE_TIMEOUT):
                connection, _ = await loop.sock_accept(self._listener)
                with connection:
                    await wait_readable(connection.fileno())
                    _, fds, _, _ = socket.recv_fds(connection, 4096, 1)
        except TimeoutError:
            raise ConsoleError(f"No terminal arrived on {self.path}") from None
        if not fds:
            raise ConsoleError(f"The message on {self.path} carried no terminal")
        return fds[0]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
        files.remove_tree(tempfile.gettempdir(), self._directory, ignore_errors=True)
