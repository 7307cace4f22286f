"""Container sessions: LAUNCH_NESTED_CONTAINER_SESSION and ATTACH_CONTAINER_OUTPUT.

Mesos gives such containers an I/O switchboard; here the agent is the
switchboard. The container's stdout and stderr are named pipes (under
``<work_dir>/io/<container>/``) whose read ends the agent opens before the
launch, so the container never blocks opening them. Everything read is
streamed as ProcessIO records:

    {"type": "DATA", "data": {"type": "STDOUT", "data": "<base64>"}}

on the session response (``Content-Type: application/recordio``,
``Message-Content-Type: application/json``, headers sent before any output)
and to every ATTACH_CONTAINER_OUTPUT attached meanwhile. The stream ends when
the container's output ends; a session whose client goes away first has its
container destroyed, as Mesos does. The exit status stays available to WAIT.

Not yet: stdin (ATTACH_CONTAINER_INPUT) and TTYs, which need the launcher to
take a stdin path.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shutil
from typing import Any

from aiohttp import web

from mesilla.agent.agent import Agent
from mesilla.common import recordio
from mesilla.common.errors import BadRequest, NotAcceptable, NotFound
from mesilla.containerizer.types import ContainerClass
from mesilla.v1 import codec
from mesilla.v1.mesos import ContainerID

log = logging.getLogger(__name__)

RECORDIO = "application/recordio"
HEARTBEAT_INTERVAL = 30.0


def check_streaming_accept(request: web.Request) -> None:
    accept = request.headers.get("Accept", "")
    if accept and RECORDIO not in accept and "*/*" not in accept:
        raise NotAcceptable(f"Expecting 'Accept' to allow '{RECORDIO}'")
    message_accept = request.headers.get("Message-Accept", "")
    if message_accept and "application/json" not in message_accept and "*/*" not in message_accept:
        raise NotAcceptable("Expecting 'Message-Accept' to allow 'application/json'")


def _record(kind: str, data: bytes) -> bytes:
    message = {"type": "DATA", "data": {"type": kind, "data": base64.b64encode(data).decode()}}
    return recordio.encode(codec.encode(message))


def _heartbeat() -> bytes:
    message = {
        "type": "CONTROL",
        "control": {
            "type": "HEARTBEAT",
            "heartbeat": {"interval": {"nanoseconds": int(HEARTBEAT_INTERVAL * 1e9)}},
        },
    }
    return recordio.encode(codec.encode(message))


class Switchboard:
    """The output pipes of one container and who listens to them.

    The agent holds a write end of each pipe itself until the container has
    ended, so that the pipes cannot reach end-of-file before the container
    has even opened them.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.stdout = os.path.join(directory, "stdout")
        self.stderr = os.path.join(directory, "stderr")
        self.listeners: list[asyncio.Queue[bytes | None]] = []
        self.done = asyncio.Event()
        self._readers: list[int] = []
        self._holders: list[int] = []

    def open(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        for path in (self.stdout, self.stderr):
            os.mkfifo(path, 0o600)
            self._readers.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            self._holders.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    def container_ended(self) -> None:
        """Lets the pipes reach end-of-file once the container's own writers are gone."""
        for fd in self._holders:
            os.close(fd)
        self._holders.clear()

    def listen(self) -> asyncio.Queue[bytes | None]:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        if self.done.is_set():
            queue.put_nowait(None)
        else:
            self.listeners.append(queue)
        return queue

    async def pump(self) -> None:
        """Copies both pipes to the listeners until they reach end-of-file."""
        try:
            await asyncio.gather(
                self._copy(self._readers[0], "STDOUT"), self._copy(self._readers[1], "STDERR")
            )
        finally:
            self.done.set()
            for queue in self.listeners:
                queue.put_nowait(None)

    async def _copy(self, fd: int, kind: str) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        try:
            while data := await reader.read(65536):
                for queue in self.listeners:
                    queue.put_nowait(_record(kind, data))
        finally:
            transport.close()

    def close(self) -> None:
        self.container_ended()
        shutil.rmtree(self.directory, ignore_errors=True)


class Sessions:
    """The switchboards of the agent's session containers, by container id."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._boards: dict[ContainerID, Switchboard] = {}

    def directory(self, container_id: ContainerID) -> str:
        return os.path.join(self.agent.flags.work_dir, "io", *container_id.path())

    async def launch(self, request: web.Request, launch: Any, calls: Any) -> web.StreamResponse:
        """Launches the container with a switchboard and streams its output until it ends."""
        container_id: ContainerID = launch.container_id
        if container_id.parent is None:
            raise BadRequest(
                "Expecting 'launch_nested_container_session.container_id.parent' to be present"
            )
        check_streaming_accept(request)
        board = Switchboard(self.directory(container_id))
        if container_id in self._boards or os.path.exists(board.directory):
            raise BadRequest(f"Container {container_id} already has a session")
        board.open()
        self._boards[container_id] = board
        queue = board.listen()
        try:
            await calls.launch(
                launch,
                "launch_nested_container_session",
                nested=True,
                stdout=board.stdout,
                stderr=board.stderr,
                container_class=ContainerClass.DEBUG,
            )
        except BaseException:
            del self._boards[container_id]
            board.close()
            raise
        pump = self.agent.spawn(board.pump(), f"session output of {container_id}")
        self.agent.spawn(self._reap(container_id, board), f"session end of {container_id}")
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": RECORDIO, "Message-Content-Type": "application/json"},
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        finished = await _stream(request, response, queue)
        if not finished:
            log.info("Session client of %s went away: destroying the container", container_id)
            await self.agent.containerizer.destroy(container_id)
        await asyncio.gather(pump, return_exceptions=True)
        await _finish(response)
        return response

    async def _reap(self, container_id: ContainerID, board: Switchboard) -> None:
        try:
            await self.agent.containerizer.wait(container_id)
        finally:
            board.container_ended()
            await board.done.wait()
            self._boards.pop(container_id, None)
            board.close()

    async def attach_output(
        self, request: web.Request, container_id: ContainerID
    ) -> web.StreamResponse:
        check_streaming_accept(request)
        board = self._boards.get(container_id)
        if board is None:
            if container_id in self.agent.containerizer.containers():
                raise BadRequest(
                    f"Container {container_id} has no I/O switchboard: only sessions can be attached"
                )
            raise NotFound(f"Container {container_id} cannot be found")
        queue = board.listen()
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": RECORDIO, "Message-Content-Type": "application/json"},
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        await _stream(request, response, queue)
        await _finish(response)
        return response


async def _finish(response: web.StreamResponse) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):  # the client may be gone
        await response.write_eof()


async def _stream(
    request: web.Request, response: web.StreamResponse, queue: asyncio.Queue[bytes | None]
) -> bool:
    """Writes queued records until the end (True) or until the client goes away (False).

    aiohttp does not cancel a handler whose client left, so the connection is
    checked every second; a HEARTBEAT goes out when output has been quiet.
    """
    loop = asyncio.get_running_loop()
    quiet_since = loop.time()
    while True:
        transport = request.transport
        if transport is None or transport.is_closing():
            return False
        try:
            record = await asyncio.wait_for(queue.get(), 1.0)
        except TimeoutError:
            if loop.time() - quiet_since < HEARTBEAT_INTERVAL:
                continue
            record = _heartbeat()
        if record is None:
            return True
        quiet_since = loop.time()
        try:
            await response.write(record)
        except (ConnectionError, RuntimeError):
            return False
