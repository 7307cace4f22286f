"""I/O switchboard servers: the terminals of TTY containers that are not sessions.

As Mesos (`IOSwitchboard::requiresServer`), a container whose ContainerInfo
has `tty_info` gets a switchboard server, `io_switchboard_server.py`, a
process of its own that holds the terminal's master, logs the output to the
sandbox's `stdout` and serves ATTACH_CONTAINER_OUTPUT/_INPUT clients (the
agent) over a unix socket. It lives in its own session, so that it outlives an
agent restart; a restarted agent finds it again under
``<runtime_dir>/io_switchboards/<digest of the container id>/`` (a digest
keeps the name short and flat whatever the nesting). (Sessions, DEBUG
containers, keep their switchboard in the agent: `container_io`.)

Once the container has ended, the server gets TERMINATION_GRACE to exit by
itself (it does once the terminal's last slave is closed), then SIGTERM and
later SIGKILL, as Mesos's `IOSwitchboard::cleanup`; then its directory goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import sys
import tempfile

from mesilla.agent import io_switchboard_server as server
from mesilla.agent.agent import Agent
from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.common.errors import BadRequest
from mesilla.common.fds import read_line, wait_readable
from mesilla.common.validation import validate_container_id
from mesilla.containerizer.types import ContainerClass
from mesilla.v1 import codec
from mesilla.v1.mesos import ContainerID, ContainerInfo, Json

log = logging.getLogger(__name__)

SERVER_SCRIPT = server.__file__
READY_TIMEOUT = 10.0
TERMINATION_GRACE = 5.0
CONTAINER_FILE = "container"  # the container id (JSON), for a restarted agent


class InputClosed(Exception):
    """The container's stdin was closed (end-of-file sent, or the container ended)."""


class NoServer(Exception):
    """The container has no switchboard server."""


class ServerGone(Exception):
    """The container's switchboard server has exited (the container ended)."""


class InputBusy(Exception):
    """Another client is the server's input client."""


def requires_server(container_info: ContainerInfo | None, container_class: ContainerClass) -> bool:
    return (
        container_info is not None
        and container_info.tty_info is not None
        and container_class is not ContainerClass.DEBUG
    )


class RemoteInput:
    """The input client's connection to a server: typed data and window sizes."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write_input(self, data: bytes) -> None:
        """Types `data`; empty `data` is end-of-file (^D on the terminal)."""
        await self._send(server.frame(server.DATA, data))

    async def resize(self, window_size: Json) -> None:
        rows, columns = int(window_size.get("rows", 0)), int(window_size.get("columns", 0))
        await self._send(server.window_frame(rows, columns))

    async def _send(self, frame: bytes) -> None:
        try:
            self._writer.write(frame)
            await self._writer.drain()
        except ConnectionError:
            raise InputClosed from None


class Servers:
    """The agent's switchboard servers, found by container id in the runtime directory."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    @property
    def root(self) -> str:
        return os.path.join(self.agent.flags.runtime_dir, "io_switchboards")

    def directory(self, container_id: ContainerID) -> str:
        name = hashlib.sha256(".".join(container_id.path()).encode()).hexdigest()[:32]
        return os.path.join(self.root, name)

    async def start(self, container_id: ContainerID, sandbox: str) -> str:
        """Starts the container's server; returns the console socket its launcher sends
        the terminal to. FileExistsError if the container id has a server already."""
        directory = self.directory(container_id)
        _create(self.root, directory, container_id)
        # A short path of its own: runc is given it, and unix socket paths are short.
        console_directory = tempfile.mkdtemp(prefix="mesilla-console-")
        console_path = os.path.join(console_directory, "socket")
        ready_r, ready_w = os.pipe()
        pid = 0
        argv = [
            sys.executable, "-I", "-S", SERVER_SCRIPT,
            directory, console_path, os.path.join(sandbox, "stdout"),
        ]  # fmt: skip
        try:
            pid = _spawn(argv, ready_w, os.path.join(sandbox, "stderr"))
            os.close(ready_w)
            ready_w = -1
            async with asyncio.timeout(READY_TIMEOUT):
                ready = await read_line(ready_r)
            if ready != b"ready\n":
                raise OSError(f"the I/O switchboard server of {container_id} failed to start")
        except BaseException:
            if pid:  # it may not have got as far as its pid file
                os.kill(pid, signal.SIGKILL)
                await asyncio.to_thread(os.waitpid, pid, 0)
            await self.stop(container_id)
            await in_thread(files.remove_tree, tempfile.gettempdir(), console_directory, ignore_errors=True)
            raise
        finally:
            os.close(ready_r)
            if ready_w >= 0:
                os.close(ready_w)
        return console_path

    def watch(self, container_id: ContainerID) -> None:
        """Ends the server and removes it once the container has ended."""
        self.agent.spawn(self._reap(container_id), f"I/O switchboard of {container_id}")

    async def recover(self) -> None:
        """Watches the servers of the previous agent run once its containers are known."""
        await self.agent.executors_recovered.wait()
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return
        for name in names:
            directory = os.path.join(self.root, name)
            try:
                container_id = _read_container(directory)
                validate_container_id(container_id)
            except (OSError, BadRequest) as exc:
                log.warning("Removing the unreadable I/O switchboard %s: %s", directory, exc)
                await _end(directory, 0.0)
                await in_thread(files.remove_tree, self.root, directory, ignore_errors=True)
                continue
            self.watch(container_id)

    async def _reap(self, container_id: ContainerID) -> None:
        # Unknown (not recovered) containers return at once: their servers go too.
        await self.agent.containerizer.wait(container_id)
        await self.stop(container_id, TERMINATION_GRACE)

    async def stop(self, container_id: ContainerID, grace: float = 0.0) -> None:
        """Ends the server (after `grace` to exit by itself) and removes its directory."""
        directory = self.directory(container_id)
        await _end(directory, grace)
        await in_thread(files.remove_tree, self.root, directory, ignore_errors=True)

    async def connect(
        self, container_id: ContainerID, role: bytes
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A client connection of `role` (server.OUTPUT or server.INPUT).

        NoServer if the container has none, ServerGone if it has exited,
        InputBusy if another input client is attached."""
        try:
            directory = os.open(self.directory(container_id), os.O_PATH | os.O_DIRECTORY)
        except FileNotFoundError:
            raise NoServer from None
        try:
            # Through the directory's descriptor: the socket's own path may be too long.
            reader, writer = await asyncio.open_unix_connection(
                f"/proc/self/fd/{directory}/{server.SOCKET}"
            )
        except (FileNotFoundError, ConnectionRefusedError):
            raise ServerGone from None
        finally:
            os.close(directory)
        try:
            writer.write(role)
            await writer.drain()
            reply = await reader.read(1)
            if reply == server.BUSY:
                raise InputBusy
            if reply != server.ACCEPTED:
                raise ServerGone
        except BaseException:
            writer.close()
            raise
        return reader, writer


async def _end(directory: str, grace: float) -> None:
    """Gives the server in `directory` `grace` to exit, then makes it (SIGTERM, then
    SIGKILL after TERMINATION_GRACE)."""
    try:
        pid = _read_pid(directory)
        pidfd = os.pidfd_open(pid)
    except (OSError, ValueError):
        return  # never started, or gone
    try:
        if await _exited(pidfd, grace) or not _is_server(pid, directory):
            return  # exited, or the pid is another process's now
        log.info("Sending SIGTERM to the I/O switchboard server in %s", directory)
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        if await _exited(pidfd, TERMINATION_GRACE):
            return
        log.warning("Sending SIGKILL to the I/O switchboard server in %s", directory)
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        await _exited(pidfd, TERMINATION_GRACE)
    finally:
        os.close(pidfd)
        _reap_if_child(pid)


# The server's files are a few bytes on --runtime_dir (a tmpfs), never fsynced, and
# spawning returns at once: these run on the loop.


def _create(root: str, directory: str, container_id: ContainerID) -> None:
    os.makedirs(root, exist_ok=True)
    os.mkdir(directory)
    with open(os.path.join(directory, CONTAINER_FILE), "wb") as f:
        f.write(codec.encode(container_id))


def _read_container(directory: str) -> ContainerID:
    with open(os.path.join(directory, CONTAINER_FILE), "rb") as f:
        return codec.decode(f.read(), ContainerID)


def _read_pid(directory: str) -> int:
    with open(os.path.join(directory, server.PID_FILE)) as f:
        return int(f.read())


def _spawn(argv: list[str], ready_w: int, stderr: str) -> int:
    """The server, in a session of its own, telling `ready_w` when it serves."""
    return os.posix_spawn(
        sys.executable,
        argv,
        {},
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, ready_w, 1),
            # The server's own complaints; a terminal merges the container's stderr.
            (os.POSIX_SPAWN_OPEN, 2, stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        ],
        setsid=True,
    )


def _reap_if_child(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # our child's zombie; a recovered server is not ours


def _is_server(pid: int, directory: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return SERVER_SCRIPT.encode() in argv and directory.encode() in argv


async def _exited(pidfd: int, timeout: float) -> bool:
    try:
        async with asyncio.timeout(timeout):
            await wait_readable(pidfd)
        return True
    except TimeoutError:
        return False
