"""The HTTP layer shared by the master and the agent, routed as libprocess does.

* Every endpoint of a process also answers under ``/<process id>/`` (the master's
  is ``master``, the agent's ``slave(1)``), trailing slashes are ignored, and an
  unknown path falls back to the longest registered prefix, so
  ``/api/v1/operator`` reaches ``/api/v1``.
* Handlers raise `mesilla.common.errors.HttpError`; one middleware turns them
  into plain-text responses. Anything else is a bug and answers 500.
* Each route names the authentication realm it belongs to (Mesos's
  ``mesos-master-readonly`` and so on); `make_app`'s `Authentication` checks
  the realms that are switched on before any handler runs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from mesilla.common import documents, negotiation, recordio, secrets
from mesilla.common.authentication import Authentication
from mesilla.common.durations import parse_duration
from mesilla.common.errors import BadRequest, HttpError, NotFound
from mesilla.common.negotiation import JSON, JSON_ENCODING, RECORDIO, Encoding  # noqa: F401 (RECORDIO: re-exported for the APIs)
from mesilla.v1 import codec

log = logging.getLogger(__name__)

T = TypeVar("T")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY_SIZE = 16 * 1024 * 1024


@dataclass(frozen=True)
class Route:
    path: str
    handler: Handler
    methods: frozenset[str]
    realm: str | None


class Router:
    def __init__(self, process_id: str) -> None:
        self.process_id = process_id
        self._routes: dict[str, Route] = {}

    def add(
        self,
        path: str,
        handler: Handler,
        *,
        methods: tuple[str, ...] = ("GET", "POST"),
        realm: str | None = None,
    ) -> None:
        self._routes[path.rstrip("/") or "/"] = Route(path, handler, frozenset(methods), realm)

    def resolve(self, path: str) -> Route | None:
        path = path.rstrip("/") or "/"
        prefix = f"/{self.process_id}"
        if path == prefix:
            path = "/"
        elif path.startswith(prefix + "/"):
            path = path[len(prefix) :]
        while True:
            route = self._routes.get(path)
            if route is not None:
                return route
            if path in ("", "/"):
                return None
            path = path.rsplit("/", 1)[0] or "/"

    def paths(self) -> list[str]:
        return sorted(self._routes)


async def _in_slices(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """`response`, sent in `documents.CHUNK` pieces if it is a plain answer with a larger
    body: written at once, a GET_STATE of 80 MB at 10,000 agents held the loop about 130 ms
    copying it into the transport's buffer."""
    body = response.body if type(response) is web.Response else None
    if request.method == "HEAD" or not isinstance(body, bytes) or len(body) <= documents.CHUNK:
        return response
    sliced = web.StreamResponse(
        status=response.status, reason=response.reason, headers=response.headers
    )
    view = memoryview(body)
    slices = (view[start : start + documents.CHUNK] for start in range(0, len(body), documents.CHUNK))
    return await documents.send(request, sliced, len(body), slices)


def _error_response(exc: HttpError) -> web.Response:
    return web.Response(status=exc.status, text=exc.reason, headers=exc.headers)


AUTHENTICATION = web.AppKey("authentication", Authentication)


def make_app(router: Router, authentication: Authentication | None = None) -> web.Application:
    authentication = authentication or Authentication()

    async def dispatch(request: web.Request) -> web.StreamResponse:
        # Errors are answered here rather than in a middleware: aiohttp then calls the
        # handler directly, two coroutine layers fewer on every request.
        try:
            return await _route(request)
        except HttpError as exc:
            return _error_response(exc)
        except web.HTTPException:
            raise
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception:
            log.exception("internal error serving %s %s", request.method, request.path)
            return web.Response(status=500, text="Internal server error")

    async def _route(request: web.Request) -> web.StreamResponse:
        route = router.resolve(request.path)
        if route is None:
            raise NotFound(f"No endpoint at '{request.path}'")
        authentication.authenticate(request, route.realm)
        if request.method not in route.methods:
            if request.method == "HEAD" and "GET" in route.methods:
                return await route.handler(request)
            return web.Response(
                status=405,
                text=f"Expecting one of {{ {', '.join(sorted(route.methods))} }}, "
                f"but received '{request.method}'",
                headers={"Allow": ", ".join(sorted(route.methods))},
            )
        return await _in_slices(request, await route.handler(request))

    app = web.Application(client_max_size=MAX_BODY_SIZE)
    app[AUTHENTICATION] = authentication
    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app


# --- request helpers -------------------------------------------------------------


def check_accept(request: web.Request, type_: type | None = None, *, streaming: bool = False) -> Encoding:
    """The encoding the answer (a `type_`, or a stream of them; None: JSON only) must
    have: 406 if none."""
    return negotiation.response_encoding(request, type_, streaming=streaming)


async def read_message(request: web.Request, type_: type[T]) -> T:
    """Parses the body as a v1 message in its Content-Type's encoding; every failure
    is a 4xx naming the problem."""
    encoding = negotiation.request_encoding(request, type_)
    body = await request.read()
    if not body or not (encoding.protobuf or body.strip()):
        kind = "protobuf" if encoding.protobuf else "JSON"
        raise BadRequest(f"Expecting a {kind} {type_.__name__} in the request body")
    return encoding.decode(body, type_)


_INTEGER = re.compile(r"-?0[xX][0-9a-fA-F]+|[+-]?[0-9]+")


def numify(text: str, bits: int = 32) -> int:
    """An integer query parameter as stout's `numify` reads one: decimal with an optional
    sign, or 0x hexadecimal, nothing around it, within a signed `bits`-bit range;
    ValueError otherwise (`int` alone would take ' 5' and '1_0')."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"'{text}' is not an integer")
    value = int(text, 16) if "x" in text.lower() else int(text)
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise ValueError(f"'{text}' is out of range")
    return value


def metrics_timeout(request: web.Request) -> float | None:
    """`/metrics/snapshot?timeout=` as libprocess checks it (400 unless a duration). Mesilla's
    metrics are read at once, so no snapshot waits for it."""
    text = request.query.get("timeout")
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise BadRequest(f"Invalid timeout '{text}': {exc}.") from None


def json_response(
    msg: Any,
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
    encoding: Encoding = JSON_ENCODING,
) -> web.Response:
    """A v1 message as the answer, in `encoding` (JSON unless negotiated otherwise)."""
    body = encoding.encode(secrets.redact(codec.encode(msg)), type(msg))
    return web.Response(status=status, body=body, content_type=encoding.content_type, headers=headers)


def jsonp_response(request: web.Request, obj: Any) -> web.Response:
    """For the v0 JSON endpoints, which accept `?jsonp=callback`."""
    body = secrets.redact(codec.encode(obj))
    callback = request.query.get("jsonp")
    if callback:
        return web.Response(
            body=callback.encode() + b"(" + body + b");", content_type="text/javascript"
        )
    return web.Response(body=body, content_type=JSON)


class _EventResponse(web.StreamResponse):
    """An event stream's response: what was sent is written before the stream ends."""

    flush: Callable[[], Awaitable[None]] | None = None

    async def write_eof(self, data: bytes = b"") -> None:
        if self.flush is not None:
            await self.flush()
        await super().write_eof(data)


class EventStream:
    """A chunked RecordIO response of events (`event_type`, in `encoding`); `closed`
    is set when the peer goes away or a write fails.

    The first event `send` is given in a turn of the event loop is written at once;
    those that follow in the same turn are queued and go out together, in one chunk,
    at the next (one system call per batch instead of one per event: at thousands
    of events a second the writes were the master's largest cost). While the peer
    does not keep up (a write waits for the socket to drain), `send` waits too, so
    a stalled peer still stops its senders.
    """

    def __init__(
        self, response: web.StreamResponse, encoding: Encoding = JSON_ENCODING, event_type: type | None = None
    ) -> None:
        self._response = response
        self._encoding = encoding
        self._event_type = event_type
        self._pending: list[bytes] = []
        self._writer: asyncio.Task[None] | None = None
        self._blocked = False  # a write waits for the peer to drain
        self._turn_used = False  # an event went out at once in this turn of the loop
        # What senders meanwhile wait for: True once written, False if the write failed.
        self._drained: asyncio.Future[bool] | None = None
        self.closed = asyncio.Event()

    @classmethod
    async def open(
        cls,
        request: web.Request,
        headers: dict[str, str] | None = None,
        *,
        encoding: Encoding = JSON_ENCODING,
        event_type: type | None = None,
        content_type: str | None = None,
    ) -> EventStream:
        """`content_type`: the stream's own (RecordIO for operator streams), when it is
        not its messages' encoding."""
        response = _EventResponse(status=200, headers=headers or {})
        response.content_type = content_type or encoding.content_type
        response.enable_chunked_encoding()
        await response.prepare(request)
        stream = cls(response, encoding, event_type)
        response.flush = stream.flush
        return stream

    @property
    def response(self) -> web.StreamResponse:
        return self._response

    async def send(self, event: Any) -> bool:
        if self.closed.is_set():
            return False
        data = recordio.encode(self._encoding.encode(codec.encode(event), self._event_type or type(event)))
        if self._writer is None and not self._pending and not self._turn_used and not self._blocked:
            # The first event of a turn goes out at once: a lone event costs no writer task.
            self._turn_used = True
            asyncio.get_running_loop().call_soon(self._next_turn)
            return await self._write_now(data)
        self._pending.append(data)
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write())
        elif self._blocked:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            # Shielded: one sender cancelled must not cancel the others' shared wait.
            return await asyncio.shield(self._drained)
        return True

    def _next_turn(self) -> None:
        self._turn_used = False

    async def _write_now(self, data: bytes) -> bool:
        # Only a write that waits for the peer to drain suspends here.
        self._blocked = True
        try:
            await self._response.write(data)
        except (ConnectionError, RuntimeError):
            self.closed.set()
            return False
        finally:
            self._blocked = False
            self._wake(not self.closed.is_set())
        return True

    async def _write(self) -> None:
        try:
            while self._pending and not self.closed.is_set():
                data, self._pending = b"".join(self._pending), []
                await self._write_now(data)
        finally:
            self._writer, self._pending = None, []
            self._wake(False)  # cancelled mid-write: nobody waits forever

    async def flush(self) -> None:
        """Returns once everything sent so far is written (or its write failed)."""
        while self._writer is not None:
            await asyncio.wait([self._writer])

    def _wake(self, ok: bool) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(ok)

    def close(self) -> None:
        self.closed.set()


async def listen(
    runner: web.AppRunner,
    ip: str,
    port: int,
    error: Callable[[str], Exception],
    ssl_context: ssl.SSLContext | None = None,
) -> int:
    """Serves `runner` on ip:port (over TLS with `ssl_context`) and returns the port bound
    (port 0: any); a port that is taken or an address not ours raises `error` with a
    one-line reason."""
    site = web.TCPSite(runner, ip, port, reuse_address=True, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as exc:
        raise error(
            f"Cannot listen on {ip}:{port} ({exc.strerror}): choose another --ip or --port"
        ) from None
    return int(runner.addresses[-1][1])
