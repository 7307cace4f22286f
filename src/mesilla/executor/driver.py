"""A small client of the Mesos v1 executor HTTP API, for Mesilla's own executors.

Stdlib only (asyncio, json, base64, uuid): an executor is one process per
executor container, so its start-up time and memory are paid per task or pod;
messages are plain JSON dicts in Mesos's v1 JSON format.

`ExecutorDriver` reads the `MESOS_*` environment (with MESOS_DOMAIN_SOCKET set,
it talks to the agent over that unix socket instead of MESOS_AGENT_ENDPOINT, as
an executor in a network namespace of its own must), subscribes (a long-lived
POST answered with a chunked RecordIO stream of events), dispatches events to
an `Executor`, and sends UPDATE and MESSAGE calls on a separate keep-alive
connection (`HttpConnection`, which the default executor reuses for the agent
API). Updates are kept until acknowledged and, with the tasks launched but not
yet acknowledged, resent on every re-SUBSCRIBE. After a disconnection it
re-subscribes with random backoff up to MESOS_SUBSCRIPTION_BACKOFF_MAX and
gives up after MESOS_RECOVERY_TIMEOUT (at once when the framework does not
checkpoint, as Mesos's executor library). While the agent refuses connections
(nothing listens: it is down or restarting) the driver instead asks again
after a twentieth of the outage so far, at least 0.1 s, at most the backoff
maximum, less a random part of up to half: a restarted agent gives its executors only
--executor_reregistration_timeout, and Mesos's agent tells its PID executors
to reconnect at once, which an HTTP executor can only learn by asking.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from mesilla.common.durations import parse_duration
from mesilla.common.recordio import Decoder

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

EXECUTOR_API = "/api/v1/executor"
DEFAULT_BACKOFF_MAX = 2.0
AGENT_POLL_MIN = 0.1
AGENT_POLL_FRACTION = 1 / 20  # of the outage so far
DEFAULT_RECOVERY_TIMEOUT = 15 * 60.0
_MAX_HEADER_BYTES = 64 * 1024


class HttpError(OSError):
    """An HTTP exchange failed: connection lost or a malformed response (an OSError,
    so callers can treat it like any other failure to reach the agent)."""


class HttpResponse:
    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, str, dict[str, str]]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as exc:
        raise HttpError(f"connection closed before the response headers: {exc}") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise HttpError(f"malformed status line {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers


async def _body_chunks(
    reader: asyncio.StreamReader, headers: Mapping[str, str]
) -> AsyncIterator[bytes]:
    """The response body as it arrives: chunked, Content-Length or until EOF."""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers are sent to us
                    return
                chunk = await reader.readexactly(size)
                await reader.readexactly(2)
                yield chunk
        elif "content-length" in headers:
            remaining = int(headers["content-length"])
            while remaining > 0:
                chunk = await reader.read(min(remaining, 65536))
                if not chunk:
                    raise HttpError("connection closed in the middle of the response body")
                remaining -= len(chunk)
                yield chunk
        else:
            while chunk := await reader.read(65536):
                yield chunk
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as exc:
        raise HttpError(f"connection lost while reading the response: {exc}") from None
    except ValueError as exc:
        raise HttpError(f"malformed chunked encoding: {exc}") from None


def _request_bytes(host: str, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """`host:port` (an `http://` prefix is tolerated) into its parts."""
    endpoint = endpoint.removeprefix("http://").rstrip("/")
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"invalid agent endpoint '{endpoint}': expected host:port")
    return host, int(port)


class AgentEndpoint(NamedTuple):
    """Where the agent serves executors, and the headers (its token) every request carries."""

    host: str
    port: int
    headers: Mapping[str, str] = {}
    #: The agent's unix socket (MESOS_DOMAIN_SOCKET), used instead of TCP when given.
    unix_socket: str | None = None

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.unix_socket:
            return await asyncio.open_unix_connection(self.unix_socket, limit=_MAX_HEADER_BYTES)
        context = _tls()
        return await asyncio.open_connection(
            self.host,
            self.port,
            limit=_MAX_HEADER_BYTES,
            ssl=context,
            server_hostname=self.host if context else None,
        )


@functools.cache
def _tls() -> ssl.SSLContext | None:
    """TLS to the agent when it handed us LIBPROCESS_SSL_ENABLED (read once; `ssl` is
    loaded only then, see `mesilla.executor`)."""
    if os.environ.get("LIBPROCESS_SSL_ENABLED", "").lower() not in ("1", "true", "yes"):
        return None
    from mesilla.common.tls import client_from_environ

    return client_from_environ()


class HttpConnection:
    """HTTP/1.1 POSTs over one keep-alive connection, reopened when it breaks.

    Requests are serialised (HTTP/1.1 without pipelining); use one instance
    per concurrent stream of calls.
    """

    def __init__(self, endpoint: AgentEndpoint) -> None:
        self.endpoint = endpoint
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def post(
        self, path: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> HttpResponse:
        all_headers = {"Content-Type": "application/json", "Accept": "application/json"}
        all_headers.update(self.endpoint.headers)
        all_headers.update(headers or {})
        host, port = self.endpoint.host, self.endpoint.port
        request = _request_bytes(f"{host}:{port}", path, body, all_headers)
        async with self._lock:
            # A kept-alive connection may have been closed by the server meanwhile:
            # retry once on a fresh one.
            for attempt in (0, 1):
                fresh = self._writer is None
                try:
                    return await self._exchange(request)
                except (HttpError, OSError) as exc:
                    self._close()
                    if fresh or attempt:
                        raise HttpError(f"POST {path} to {host}:{port}: {exc}") from None
            raise AssertionError("unreachable")

    async def _exchange(self, request: bytes) -> HttpResponse:
        if self._writer is None:
            self._reader, self._writer = await self.endpoint.connect()
        assert self._reader is not None
        self._writer.write(request)
        await self._writer.drain()
        status, reason, headers = await _read_head(self._reader)
        body = b"".join([chunk async for chunk in _body_chunks(self._reader, headers)])
        if headers.get("connection", "").lower() == "close":
            self._close()
        return HttpResponse(status, reason, headers, body)

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def close(self) -> None:
        self._close()


async def open_stream(
    endpoint: AgentEndpoint, path: str, body: bytes, headers: Mapping[str, str]
) -> tuple[HttpResponse, AsyncIterator[bytes], asyncio.StreamWriter]:
    """POSTs on a new connection and returns the response head and its body stream."""
    reader, writer = await endpoint.connect()
    all_headers = {**headers, **endpoint.headers}
    writer.write(_request_bytes(f"{endpoint.host}:{endpoint.port}", path, body, all_headers))
    await writer.drain()
    status, reason, response_headers = await _read_head(reader)
    return (
        HttpResponse(status, reason, response_headers, b""),
        _body_chunks(reader, response_headers),
        writer,
    )


def encode_bytes(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Executor:
    """Event handlers an executor overrides; each event's JSON object as Mesos sends it."""

    async def subscribed(self, driver: ExecutorDriver, event: dict[str, Any]) -> None: ...

    async def launch(self, driver: ExecutorDriver, task: dict[str, Any]) -> None: ...

    async def launch_group(self, driver: ExecutorDriver, task_group: dict[str, Any]) -> None: ...

    async def kill(
        self, driver: ExecutorDriver, task_id: str, kill_policy: dict[str, Any] | None
    ) -> None: ...

    async def acknowledged(self, driver: ExecutorDriver, task_id: str, uuid: str) -> None: ...

    async def message(self, driver: ExecutorDriver, data: bytes) -> None: ...

    async def shutdown(self, driver: ExecutorDriver) -> None: ...

    async def error(self, driver: ExecutorDriver, message: str) -> None: ...

    async def disconnected(self, driver: ExecutorDriver) -> None: ...


class ExecutorDriver:
    def __init__(self, executor: Executor, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        try:
            self.framework_id: str = env["MESOS_FRAMEWORK_ID"]
            self.executor_id: str = env["MESOS_EXECUTOR_ID"]
            self.host, self.port = split_endpoint(env["MESOS_AGENT_ENDPOINT"])
        except KeyError as missing:
            raise RuntimeError(
                f"{missing.args[0]} is not set: executors are started by a Mesos agent"
            ) from None
        # Set when the agent serves executors on a unix socket (an executor in a
        # network namespace of its own cannot reach MESOS_AGENT_ENDPOINT).
        self.unix_socket: str | None = env.get("MESOS_DOMAIN_SOCKET") or None
        self.checkpoint = env.get("MESOS_CHECKPOINT") == "1"
        self.backoff_max = _duration(env, "MESOS_SUBSCRIPTION_BACKOFF_MAX", DEFAULT_BACKOFF_MAX)
        self.recovery_timeout = _duration(env, "MESOS_RECOVERY_TIMEOUT", DEFAULT_RECOVERY_TIMEOUT)
        self.shutdown_grace_period = _duration(env, "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD", 5.0)
        token = env.get("MESOS_EXECUTOR_AUTHENTICATION_TOKEN")
        principal, secret = env.get("MESOS_EXECUTOR_PRINCIPAL"), env.get("MESOS_EXECUTOR_SECRET")
        # As Mesos: out of the environment, so the tasks started from here never see them.
        for name in ("MESOS_EXECUTOR_AUTHENTICATION_TOKEN", "MESOS_EXECUTOR_SECRET"):
            os.environ.pop(name, None)
        self.auth_headers = {}
        if token:
            self.auth_headers["Authorization"] = f"Bearer {token}"
        elif principal and secret is not None:
            basic = base64.b64encode(f"{principal}:{secret}".encode()).decode()
            self.auth_headers["Authorization"] = f"Basic {basic}"

        self._executor = executor
        self._calls = HttpConnection(AgentEndpoint(self.host, self.port, self.auth_headers, self.unix_socket))
        # Kept until acknowledged, in the order sent: uuid -> TaskStatus JSON.
        self._unacknowledged_updates: dict[str, dict[str, Any]] = {}
        self._unacknowledged_tasks: dict[str, dict[str, Any]] = {}
        self._stopped = asyncio.Event()
        self._subscribed = asyncio.Event()  # set from SUBSCRIBED until the stream ends
        self.subscribed_event: dict[str, Any] = {}

    # --- what executors read ---------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Subscribed, on a stream that has not ended yet."""
        return self._subscribed.is_set()

    @connected.setter
    def connected(self, value: bool) -> None:
        if value:
            self._subscribed.set()
        else:
            self._subscribed.clear()

    async def until_subscribed(self) -> None:
        await self._subscribed.wait()

    @property
    def container_id(self) -> dict[str, Any] | None:
        return self.subscribed_event.get("container_id")

    @property
    def framework_info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.subscribed_event.get("framework_info", {})
        return info

    def framework_has_capability(self, name: str) -> bool:
        return any(c.get("type") == name for c in self.framework_info.get("capabilities", []))

    @property
    def unacknowledged_updates(self) -> list[dict[str, Any]]:
        return list(self._unacknowledged_updates.values())

    def is_acknowledged(self, update_uuid: str) -> bool:
        """Whether the update `update()` returned `update_uuid` for has been acknowledged
        (possibly before `update()` itself returned)."""
        return update_uuid not in self._unacknowledged_updates

    # --- calls ---------------------------------------------------------------------

    def _call(self, call_type: str, **body: Any) -> bytes:
        call = {
            "type": call_type,
            "framework_id": {"value": self.framework_id},
            "executor_id": {"value": self.executor_id},
            **body,
        }
        return json.dumps(call, separators=(",", ":")).encode()

    async def update(self, status: dict[str, Any]) -> str:
        """Sends a TaskStatus (JSON) with a fresh uuid; returns that uuid (base64)."""
        status = dict(status)
        update_uuid = encode_bytes(uuid.uuid4().bytes)
        status.setdefault("source", "SOURCE_EXECUTOR")
        status.setdefault("executor_id", {"value": self.executor_id})
        status["uuid"] = update_uuid
        status["timestamp"] = time.time()
        self._unacknowledged_updates[update_uuid] = status
        if self.connected:
            await self._send(self._call("UPDATE", update={"status": status}))
        return update_uuid

    async def send_message(self, data: bytes) -> None:
        await self._send(self._call("MESSAGE", message={"data": encode_bytes(data)}))

    async def _send(self, body: bytes) -> None:
        try:
            response = await self._calls.post(EXECUTOR_API, body)
        except HttpError as exc:
            # The update stays unacknowledged and goes again with the next SUBSCRIBE.
            log.warning("Call to the agent failed: %s", exc)
            return
        if response.status != 202:
            log.warning(
                "Agent answered %d to a call: %s",
                response.status,
                response.body.decode(errors="replace"),
            )

    def stop(self) -> None:
        self._stopped.set()

    # --- the subscription loop ------------------------------------------------------

    async def run(self) -> None:
        """Subscribes and dispatches events until `stop()` or until recovery gives up.

        Handlers run inline, in event order: they must hand long work to tasks.
        """
        disconnected_at = time.monotonic()
        backoff = 0.0
        stopper = asyncio.create_task(self._stopped.wait())
        try:
            while not self._stopped.is_set():
                session = asyncio.create_task(self._session())
                await asyncio.wait({session, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if not session.done():
                    session.cancel()
                    await asyncio.gather(session, return_exceptions=True)
                    break
                log.info("Executor subscription ended: %s", session.exception())
                if self.connected:
                    self.connected = False
                    disconnected_at, backoff = time.monotonic(), 0.0
                    await self._executor.disconnected(self)
                    if not self.checkpoint:
                        log.warning("Lost the agent; the framework does not checkpoint: exiting")
                        await self._executor.shutdown(self)
                        break
                if time.monotonic() - disconnected_at >= self.recovery_timeout:
                    log.warning(
                        "No agent within the recovery timeout (%gs): exiting", self.recovery_timeout
                    )
                    await self._executor.shutdown(self)
                    break
                if isinstance(session.exception(), ConnectionRefusedError):
                    await asyncio.sleep(self._agent_poll(time.monotonic() - disconnected_at))
                    continue
                backoff = min(max(backoff * 2, 0.05), self.backoff_max)
                await asyncio.sleep(random.uniform(0, backoff))
        finally:
            stopper.cancel()
            self.connected = False
            await self._calls.close()

    def _agent_poll(self, outage: float) -> float:
        """The wait before asking an agent that refused the connection again: jittered
        (half to all of it), so that the executors an agent's restart left all asking
        at the same instant do not knock at once, every time, while it starts."""
        interval = min(max(outage * AGENT_POLL_FRACTION, AGENT_POLL_MIN), self.backoff_max)
        return random.uniform(interval / 2, interval)

    async def _session(self) -> None:
        body = self._call(
            "SUBSCRIBE",
            subscribe={
                "unacknowledged_tasks": list(self._unacknowledged_tasks.values()),
                "unacknowledged_updates": [
                    {"framework_id": {"value": self.framework_id}, "status": status}
                    for status in self._unacknowledged_updates.values()
                ],
            },
        )
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        response, chunks, writer = await open_stream(self._calls.endpoint, EXECUTOR_API, body, headers)
        try:
            if response.status != 200:
                text = b"".join([c async for c in chunks]).decode(errors="replace")
                raise HttpError(f"SUBSCRIBE answered {response.status}: {text}")
            decoder = Decoder()
            async for chunk in chunks:
                for record in decoder.feed(chunk):
                    await self._dispatch(json.loads(record))
            raise HttpError("the agent closed the event stream")
        finally:
            writer.close()

    async def _dispatch(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "SUBSCRIBED":
            self.subscribed_event = event.get("subscribed", {})
            self.connected = True
            await self._executor.subscribed(self, self.subscribed_event)
        elif kind == "LAUNCH":
            task = event["launch"]["task"]
            self._unacknowledged_tasks[task["task_id"]["value"]] = task
            await self._executor.launch(self, task)
        elif kind == "LAUNCH_GROUP":
            group = event["launch_group"]["task_group"]
            for task in group.get("tasks", []):
                self._unacknowledged_tasks[task["task_id"]["value"]] = task
            await self._executor.launch_group(self, group)
        elif kind == "KILL":
            kill = event["kill"]
            await self._executor.kill(self, kill["task_id"]["value"], kill.get("kill_policy"))
        elif kind == "ACKNOWLEDGED":
            ack = event["acknowledged"]
            task_id = ack["task_id"]["value"]
            self._unacknowledged_updates.pop(ack["uuid"], None)
            self._unacknowledged_tasks.pop(task_id, None)
            await self._executor.acknowledged(self, task_id, ack["uuid"])
        elif kind == "MESSAGE":
            await self._executor.message(self, base64.b64decode(event["message"]["data"]))
        elif kind == "SHUTDOWN":
            await self._executor.shutdown(self)
        elif kind == "ERROR":
            await self._executor.error(self, event.get("error", {}).get("message", ""))
        # HEARTBEAT and unknown events need nothing.


def _duration(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        return parse_duration(text)
    except ValueError:
        log.warning("Ignoring %s=%r: not a duration; using %ss", name, text, default)
        return default
