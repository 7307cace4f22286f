"""Container sessions: LAUNCH_NESTED_CONTAINER_SESSION, ATTACH_CONTAINER_OUTPUT/_INPUT.

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

The container's stdin is a named pipe too, whose write end the agent holds
(opened read-write, so neither side blocks opening it). ATTACH_CONTAINER_INPUT
streams a RecordIO request body of agent Calls: first `{type: CONTAINER_ID}`,
then PROCESS_IO records: DATA(STDIN) is written to the container (empty data
is end-of-file), CONTROL(TTY_INFO) resizes its terminal, CONTROL(HEARTBEAT) is
ignored. One input attacher at a time (409 Conflict otherwise, as Mesos's
switchboard); 200 when the body has ended.

A session whose ContainerInfo has `tty_info` gets a pseudo-terminal instead,
which its launcher allocates and sends to the switchboard over a console
socket (`mesilla.containerizer.console`): the pty's slave is its stdin, stdout
and stderr (and controlling terminal), everything it writes comes back as
STDOUT, and STDIN data goes to the master.

Any other container with `tty_info` has its terminal in a switchboard server
(`mesilla.agent.io_switchboard`): attaching to it connects to that server,
with the same HTTP behaviour, also after an agent restart.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Protocol

from aiohttp import web

from mesilla.agent import authorize, executor_auth, io_switchboard_server
from mesilla.agent.agent import Agent
from mesilla.agent.container_calls import ContainerCalls
from mesilla.agent.io_switchboard import (
    InputBusy,
    InputClosed,
    NoServer,
    RemoteInput,
    ServerGone,
    Servers,
)
from mesilla.common import files, recordio
from mesilla.common.errors import (
    BadRequest,
    Conflict,
    NotAcceptable,
    NotFound,
    UnsupportedMediaType,
)
from mesilla.common.validation import validate_ids
from mesilla.containerizer.console import ConsoleSocket, set_window_size
from mesilla.containerizer.types import ContainerClass
from mesilla.v1 import agent as api
from mesilla.v1 import codec
from mesilla.v1.mesos import ContainerID, Json, TTYInfo

log = logging.getLogger(__name__)

RECORDIO = "application/recordio"
HEARTBEAT_INTERVAL = 30.0
END_OF_TRANSMISSION = b"\x04"  # what a terminal in canonical mode reads as end-of-file
STREAMS = ("stdin", "stdout", "stderr")


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
    """The I/O of one session container: its pipes (or pty) and who listens to them.

    The agent holds a write end of each output pipe itself until the
    container has ended, so that output cannot reach end-of-file before the
    container has even opened it.
    """

    def __init__(self, root: str, directory: str, tty: TTYInfo | None = None) -> None:
        self.root = root  # of every session's directory: what `close` may remove
        self.directory = directory
        self.tty = tty
        self.stdin, self.stdout, self.stderr = (os.path.join(directory, n) for n in STREAMS)
        self.console: ConsoleSocket | None = None
        self.listeners: list[asyncio.Queue[bytes | None]] = []
        self.done = asyncio.Event()
        self.input_attached = False
        self._input: int | None = None
        self._input_waiters: set[asyncio.Future[None]] = set()
        self._readers: list[int] = []
        self._holders: list[int] = []
        # Set once the terminal's master arrived, or it never will (the container ended).
        self._terminal_known = asyncio.Event()

    def open(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        if self.tty is not None:
            # The launcher allocates the terminal and sends its master (console.py).
            self.console = ConsoleSocket()
            return
        self._terminal_known.set()
        stdin, stdout, stderr = (os.path.join(self.directory, n) for n in STREAMS)
        os.mkfifo(stdin, 0o600)
        self._input = os.open(stdin, os.O_RDWR | os.O_NONBLOCK)
        for path in (stdout, stderr):
            os.mkfifo(path, 0o600)
            self._readers.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            self._holders.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    async def receive_terminal(self) -> None:
        """Takes the master of the container's terminal from the launcher."""
        assert self.console is not None and self.tty is not None
        try:
            master = await self.console.receive()
        finally:
            self.console.close()
        os.set_blocking(master, False)
        self._readers.append(master)
        self._input = os.dup(master)
        self._terminal_known.set()
        if self.tty.window_size:
            set_window_size(master, self.tty.window_size)

    def container_ended(self) -> None:
        """Lets the output reach end-of-file once the container's own writers are gone."""
        for fd in self._holders:
            os.close(fd)
        self._holders.clear()
        self.close_input()
        self._terminal_known.set()

    async def resize(self, window_size: Json) -> None:
        if self.tty is None:
            raise BadRequest("The container has no TTY: 'TTY_INFO' cannot resize it")
        await self._terminal_known.wait()
        if self._input is not None:
            set_window_size(self._input, window_size)

    async def write_input(self, data: bytes) -> None:
        """Writes to the container's stdin as it reads; empty `data` is end-of-file."""
        if not data:
            if self.tty is not None:
                data = END_OF_TRANSMISSION
            else:
                self.close_input()
                return
        await self._terminal_known.wait()
        loop = asyncio.get_running_loop()
        while data:
            fd = self._input
            if fd is None:
                raise InputClosed
            try:
                data = data[os.write(fd, data) :]
                continue
            except BlockingIOError:
                pass
            writable: asyncio.Future[None] = loop.create_future()
            self._input_waiters.add(writable)
            loop.add_writer(fd, _resolve, writable)
            try:
                await writable
            finally:
                self._input_waiters.discard(writable)
                if self._input == fd:
                    loop.remove_writer(fd)

    def close_input(self) -> None:
        if self._input is None:
            return
        asyncio.get_running_loop().remove_writer(self._input)
        os.close(self._input)
        self._input = None
        for waiter in self._input_waiters:
            _resolve(waiter)

    def listen(self) -> asyncio.Queue[bytes | None]:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        if self.done.is_set():
            queue.put_nowait(None)
        else:
            self.listeners.append(queue)
        return queue

    async def pump(self) -> None:
        """Copies the output to the listeners until it reaches end-of-file."""
        try:
            await asyncio.gather(
                *(
                    self._copy(fd, kind)
                    for fd, kind in zip(self._readers, ("STDOUT", "STDERR"), strict=False)
                )
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
        except OSError:
            pass  # a pty master reads EIO once its last slave is closed: the end
        finally:
            transport.close()

    def close(self) -> None:
        self.container_ended()
        if self.console is not None:
            self.console.close()
        files.remove_tree(self.root, self.directory, ignore_errors=True)


class Sessions:
    """The switchboards of the agent's session containers, by container id."""

    def __init__(self, agent: Agent, servers: Servers) -> None:
        self.agent = agent
        self.servers = servers
        self._boards: dict[ContainerID, Switchboard] = {}

    @property
    def root(self) -> str:
        return os.path.join(self.agent.flags.work_dir, "io")

    def directory(self, container_id: ContainerID) -> str:
        return os.path.join(self.root, *container_id.path())

    async def launch(
        self, request: web.Request, launch: api.LaunchContainerCall, calls: ContainerCalls
    ) -> web.StreamResponse:
        """Launches the container with a switchboard and streams its output until it ends."""
        container_id = launch.container_id
        if container_id.parent is None:
            raise BadRequest(
                "Expecting 'launch_nested_container_session.container_id.parent' to be present"
            )
        check_streaming_accept(request)
        board = Switchboard(
            self.root,
            self.directory(container_id),
            launch.container.tty_info if launch.container else None,
        )
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
                # A terminal replaces the pipes.
                stdin=None if board.console else board.stdin,
                stdout=None if board.console else board.stdout,
                stderr=None if board.console else board.stderr,
                console_socket=board.console.path if board.console else None,
                container_class=ContainerClass.DEBUG,
            )
            if board.tty is not None:
                try:
                    await board.receive_terminal()
                except BaseException:
                    await self.agent.containerizer.destroy(container_id)
                    raise
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

    async def _connect(
        self, container_id: ContainerID, role: bytes
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the container's switchboard server, or the HTTP error."""
        try:
            return await self.servers.connect(container_id, role)
        except NoServer:
            if container_id in self.agent.containerizer.containers():
                raise BadRequest(
                    f"Container {container_id} has no I/O switchboard: only sessions and "
                    "containers with a TTY can be attached"
                ) from None
            raise NotFound(f"Container {container_id} cannot be found") from None
        except ServerGone:
            raise BadRequest(
                f"Container {container_id} has ended: its I/O switchboard is gone"
            ) from None
        except InputBusy:
            raise Conflict(f"Container {container_id} already has an input attached") from None

    async def attach_output(
        self, request: web.Request, container_id: ContainerID
    ) -> web.StreamResponse:
        check_streaming_accept(request)
        board = self._boards.get(container_id)
        relay: asyncio.Task[None] | None = None
        if board is not None:
            queue = board.listen()
        else:
            reader, writer = await self._connect(container_id, io_switchboard_server.OUTPUT)
            queue = asyncio.Queue()
            relay = asyncio.create_task(_relay(reader, queue))
        try:
            response = web.StreamResponse(
                status=200,
                headers={"Content-Type": RECORDIO, "Message-Content-Type": "application/json"},
            )
            response.enable_chunked_encoding()
            await response.prepare(request)
            await _stream(request, response, queue)
            await _finish(response)
        finally:
            if relay is not None:
                relay.cancel()
                writer.close()
        return response

    async def attach_input(self, request: web.Request) -> web.StreamResponse:
        """ATTACH_CONTAINER_INPUT: a RecordIO request body of Calls, read as it arrives."""
        message_type = request.headers.get("Message-Content-Type", "")
        if message_type != "application/json":
            raise UnsupportedMediaType(
                "Expecting 'Message-Content-Type: application/json' for a streamed "
                f"request, got '{message_type}'"
            )
        records = _calls(request)
        first = await anext(records, None)
        if first is None:
            raise BadRequest("Received EOF while reading the request body")
        if first.type is not api.CallType.ATTACH_CONTAINER_INPUT:
            raise UnsupportedMediaType(
                "A streamed 'Content-Type' is only supported for ATTACH_CONTAINER_INPUT, "
                f"not {first.type.value}"
            )
        try:
            validate_ids(first)
        except BadRequest as exc:
            raise BadRequest(f"Failed to validate agent::Call: {exc.reason}", field=exc.field) from exc
        attach = first.attach_container_input
        if attach is None or attach.type != "CONTAINER_ID" or attach.container_id is None:
            raise BadRequest(
                "Expecting the first record to be 'attach_container_input' of type "
                "CONTAINER_ID with its 'container_id'"
            )
        executor_auth.check_container(request, attach.container_id)
        authorize.check_container(self.agent, request, "attach_containers_input", attach.container_id)
        board = self._boards.get(attach.container_id)
        if board is None:
            _, writer = await self._connect(attach.container_id, io_switchboard_server.INPUT)
            try:
                await _feed_all(RemoteInput(writer), records)
            finally:
                writer.close()
            return web.Response(status=200)
        if board.input_attached:
            raise Conflict(f"Container {attach.container_id} already has an input attached")
        board.input_attached = True
        try:
            await _feed_all(board, records)
        finally:
            board.input_attached = False
        return web.Response(status=200)


async def _relay(reader: asyncio.StreamReader, queue: asyncio.Queue[bytes | None]) -> None:
    """Queues what a switchboard server outputs as STDOUT records; None at its end."""
    try:
        while data := await reader.read(65536):
            queue.put_nowait(_record("STDOUT", data))
    except ConnectionError:
        pass  # the server went away: the end as well
    finally:
        queue.put_nowait(None)


async def _calls(request: web.Request) -> AsyncIterator[api.Call]:
    decoder = recordio.Decoder()
    async for chunk in request.content.iter_any():
        for record in decoder.feed(chunk):
            yield codec.decode(record, api.Call)
    if decoder.pending:
        raise BadRequest("The request body ended in the middle of a RecordIO record")


class _Input(Protocol):
    async def write_input(self, data: bytes) -> None: ...

    async def resize(self, window_size: Json) -> None: ...


async def _feed_all(target: _Input, records: AsyncIterator[api.Call]) -> None:
    async for call in records:
        if not await _feed(target, call):
            break


async def _feed(board: _Input, call: api.Call) -> bool:
    """Applies one PROCESS_IO record; False once the container's stdin is closed."""
    part = call.attach_container_input
    if (
        call.type is not api.CallType.ATTACH_CONTAINER_INPUT
        or part is None
        or part.type != "PROCESS_IO"
        or part.process_io is None
    ):
        raise BadRequest("Expecting every record after the first to be a PROCESS_IO input call")
    io = part.process_io
    if io.type == "DATA" and io.data is not None and io.data.type == "STDIN":
        try:
            await board.write_input(io.data.data)
        except InputClosed:
            return False
    elif io.type == "CONTROL" and io.control is not None:
        if io.control.type == "TTY_INFO" and io.control.tty_info is not None:
            await board.resize(io.control.tty_info.window_size or {})
    else:
        raise BadRequest(f"Expecting STDIN data or a CONTROL record, got {io.type}")
    return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


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
            async with asyncio.timeout(1.0):  # not wait_for, which can swallow a cancel
                record = await queue.get()
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
