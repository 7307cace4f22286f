"""The libprocess wire protocol of Mesos's v0 drivers (`3rdparty/libprocess/src/process.cpp`).

A message is an HTTP POST to ``/<process id>/<message name>`` whose body is the
serialized protobuf and whose sender is the UPID ``<id>@<ip>:<port>`` in
``Libprocess-From`` (or, from libprocess itself, ``User-Agent: libprocess/<upid>``);
it is answered 202 with no body, and the reply (if any) is another message the
receiver POSTs to the sender's UPID. `Link` is the sending side: one kept
connection per peer, messages in order.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mesilla.common.errors import BadRequest, HttpError
from mesilla.common.http import EventStream
from mesilla.v1.proto import v0

log = logging.getLogger(__name__)

_UPID = re.compile(r"^(?P<id>[^@/\s]+)@(?P<host>[^:@/\s]+):(?P<port>\d{1,5})$")
# A peer that stops reading must not hold the master's memory: past this many
# queued messages the link is dropped, as a broken socket would be.
MAX_QUEUED = 10_000
SEND_TIMEOUT = 30.0


@dataclass(frozen=True)
class UPID:
    id: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> UPID | None:
        match = _UPID.match(text.strip())
        if match is None or not 0 < int(match["port"]) < 65536:
            return None
        return cls(match["id"], match["host"], int(match["port"]))

    def __str__(self) -> str:
        return f"{self.id}@{self.host}:{self.port}"


def sender(request: web.Request) -> UPID | None:
    """The UPID a message request comes from, None if it is not a libprocess message."""
    given = request.headers.get("Libprocess-From")
    if given is None:
        agent = request.headers.get("User-Agent", "")
        if not agent.startswith("libprocess/"):
            return None
        given = agent[len("libprocess/") :]
    return UPID.parse(given)


class Link:
    """Messages to one peer, POSTed in order over a kept connection. `broken` is set
    once a message cannot be delivered (the peer went away)."""

    def __init__(
        self, self_pid: str, peer: UPID, spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[Any]]
    ) -> None:
        """`spawn` runs the sender in the background (and cancels it when its owner stops)."""
        self.peer = peer
        self._self_pid = self_pid
        self._queue: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()
        self.broken = asyncio.Event()
        self._task = spawn(self._run())

    def send(self, name: str, body: bytes) -> bool:
        if self.broken.is_set():
            return False
        if self._queue.qsize() >= MAX_QUEUED:
            log.warning("dropping the link to %s: %d messages unsent", self.peer, MAX_QUEUED)
            self._task.cancel()
            self.broken.set()
            return False
        self._queue.put_nowait((name, body))
        return True

    async def _run(self) -> None:
        # As libprocess does: requests written one after another on one socket, no
        # response awaited (libprocess peers send none; others' are read and ignored).
        head = (
            f"Host: {self.peer.host}:{self.peer.port}\r\n"
            f"Libprocess-From: {self._self_pid}\r\n"
            f"User-Agent: libprocess/{self._self_pid}\r\n"
            "Connection: Keep-Alive\r\n"
            "Content-Type: application/x-protobuf\r\n"
        ).encode()
        writer: asyncio.StreamWriter | None = None
        drain: asyncio.Task[None] | None = None
        try:
            reader, connection = await asyncio.wait_for(
                asyncio.open_connection(self.peer.host, self.peer.port), SEND_TIMEOUT
            )
            writer = connection
            drain = asyncio.get_running_loop().create_task(self._drain(reader))
            while (item := await self._queue.get()) is not None:
                name, body = item
                connection.write(
                    f"POST /{self.peer.id}/{name} HTTP/1.1\r\n".encode()
                    + head
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await asyncio.wait_for(connection.drain(), SEND_TIMEOUT)
                if drain.done():
                    break
        except (OSError, TimeoutError) as exc:
            log.info("link to %s broken: %s", self.peer, exc)
        finally:
            self.broken.set()
            if drain is not None:
                drain.cancel()
                await asyncio.gather(drain, return_exceptions=True)
            if writer is not None:
                writer.close()

    async def _drain(self, reader: asyncio.StreamReader) -> None:
        """Reads (and ignores) what the peer sends back, until it closes the socket."""
        try:
            while await reader.read(65536):
                pass
        except OSError:
            pass
        self.broken.set()

    def close(self) -> None:
        """Ends the link once what is queued has been sent."""
        if not self.broken.is_set():
            self._queue.put_nowait(None)


class Receiver:
    """The receiving side: a process's message routes (``/<process id>/<name>``). Each
    message is handled before its 202 (so one sender's messages are handled in
    order); one its handler refuses (an `HttpError`, or a field missing) is dropped,
    logged once per sender, message and reason, as libprocess drops what no
    handler takes."""

    def __init__(self, handle: Callable[[UPID, str, bytes], Awaitable[None]]) -> None:
        self._handle = handle
        self._logged: set[tuple[UPID, str, str]] = set()

    def install(self, router: Any, names: list[str]) -> None:
        for name in names:

            async def handler(request: web.Request, name: str = name) -> web.StreamResponse:
                return await self.receive(request, name)

            router.add(f"/{name}", handler, methods=("POST",))

    async def receive(self, request: web.Request, name: str) -> web.Response:
        pid = sender(request)
        if pid is None:
            raise BadRequest(
                "Expecting a libprocess message: 'Libprocess-From' or 'User-Agent: libprocess/<pid>'"
            )
        body = await request.read()
        try:
            await self._handle(pid, name, body)
        except HttpError as exc:
            self._drop(pid, name, exc.reason)
        except (KeyError, TypeError, ValueError) as exc:
            self._drop(pid, name, f"malformed: {exc!r}")
        return web.Response(status=202)

    def _drop(self, pid: UPID, name: str, reason: str) -> None:
        key = (pid, name, reason.split(":")[0])
        level = logging.WARNING if key not in self._logged else logging.DEBUG
        self._logged.add(key)
        log.log(level, "dropping %s from %s: %s", name, pid, reason)


class MessageStream(EventStream):
    """The event stream of a v0 peer: each v1 event goes out over a `Link` as the v0
    message `to_v0` makes of it (None: it has no v0 form); closed once the link breaks."""

    def __init__(self, link: Link, spawn: Callable[[Coroutine[Any, Any, None]], Any]) -> None:
        super().__init__(web.StreamResponse())  # never prepared: nothing is written to it
        self._link = link
        spawn(self._watch())

    async def _watch(self) -> None:
        await self._link.broken.wait()
        self.closed.set()

    async def send(self, event: Any) -> bool:
        if self.closed.is_set():
            return False
        message = self.to_v0(event)
        if message is None:
            return True
        name, body = message
        return self._link.send(v0.INTERNAL + name, v0.encode(name, body))

    def close(self) -> None:
        self._link.close()
        self.closed.set()

    def to_v0(self, event: Any) -> tuple[str, dict[str, Any]] | None:
        raise NotImplementedError
