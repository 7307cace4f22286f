"""The agent API calls an executor makes for its nested containers (`POST /api/v1`).

LAUNCH_CONTAINER, WAIT_CONTAINER (long poll; retried after 1 s when the agent
answers 503, as when it recovers, and once the executor is subscribed again
when the connection is lost), KILL_CONTAINER,
REMOVE_CONTAINER and LAUNCH_NESTED_CONTAINER_SESSION, as JSON over the
driver's HTTP/1.1 helpers (`mesilla.executor.driver`), with the executor's
bearer token. Calls run in parallel on a small pool of keep-alive connections:
a pod's containers launch at once, and a long WAIT never blocks a KILL.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

from mesilla.executor.driver import AgentEndpoint, HttpConnection, HttpError, HttpResponse, open_stream

log = logging.getLogger(__name__)

Json = dict[str, Any]

AGENT_API = "/api/v1"
WAIT_RETRY_INTERVAL = 1.0


class Subscription(Protocol):
    """The executor's subscription to the agent (the driver), which WAITs follow."""

    async def until_subscribed(self) -> None: ...


class AgentCallError(Exception):
    """The agent refused a call; the message names the call, the container and the agent's reason."""

    def __init__(self, call: str, container_id: Json, status: int, body: str) -> None:
        super().__init__(f"{call} of container {container_id.get('value')} answered {status}: {body.strip()}")
        self.status = status


def _encode(call_type: str, **body: Any) -> bytes:
    return json.dumps({"type": call_type, **body}, separators=(",", ":")).encode()


class Session:
    """A LAUNCH_NESTED_CONTAINER_SESSION: the container lives while this connection is open."""

    def __init__(self, body: AsyncIterator[bytes], writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        # Output is not needed (only the exit code is), but must be read so the
        # agent never blocks on a full socket.
        self._drain = asyncio.get_running_loop().create_task(self._discard(body))

    @staticmethod
    async def _discard(body: AsyncIterator[bytes]) -> None:
        try:
            async for _ in body:
                pass
        except HttpError:
            pass

    async def close(self) -> None:
        self._drain.cancel()
        await asyncio.gather(self._drain, return_exceptions=True)
        self._writer.close()


class AgentClient:
    def __init__(
        self, host: str, port: int, headers: Mapping[str, str] | None = None,
        unix_socket: str | None = None, subscription: Subscription | None = None,
    ) -> None:  # fmt: skip
        self.endpoint = AgentEndpoint(host, port, dict(headers or {}), unix_socket)
        self._idle: list[HttpConnection] = []
        self._subscription = subscription

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[HttpConnection]:
        connection = self._idle.pop() if self._idle else HttpConnection(self.endpoint)
        try:
            yield connection
        except BaseException:
            await connection.close()
            raise
        self._idle.append(connection)

    async def _post(self, body: bytes) -> HttpResponse:
        """One call; OSError (HttpError is one) when the agent cannot be reached."""
        async with self._connection() as connection:
            try:
                return await connection.post(AGENT_API, body)
            except HttpError as exc:
                raise ConnectionError(str(exc)) from None

    async def launch_container(
        self,
        container_id: Json,
        command: Json | None,
        container: Json | None,
        resources: list[Json],
        limits: Json | None = None,
    ) -> None:
        launch: Json = {"container_id": container_id, "resources": resources}
        if command is not None:
            launch["command"] = command
        if container is not None:
            launch["container"] = container
        if limits:
            launch["limits"] = limits
        response = await self._post(_encode("LAUNCH_CONTAINER", launch_container=launch))
        # 202: the ID is already in use, which for a fresh uuid means our own
        # earlier attempt got through before a connection broke.
        if response.status not in (200, 202):
            raise AgentCallError(
                "LAUNCH_CONTAINER", container_id, response.status, response.body.decode(errors="replace")
            )

    async def wait_container(self, container_id: Json) -> Json:
        """The container's termination (`exit_status`, `state`, `reason`, `message`, `limitation`).

        An unknown container (404) comes back as an empty termination; a lost
        connection or a 503 is retried, since the agent may be restarting.
        """
        body = _encode("WAIT_CONTAINER", wait_container={"container_id": container_id})
        while True:
            # Its own connection: the answer may take as long as the container runs.
            connection = HttpConnection(self.endpoint)
            try:
                response = await connection.post(AGENT_API, body)
            except HttpError as exc:
                log.warning("WAIT_CONTAINER %s interrupted (%s); retrying", container_id["value"], exc)
                await self._resume()
                continue
            finally:
                await connection.close()
            if response.status == 200:
                wait: dict[str, Any] = response.json().get("wait_container", {})
                return wait
            if response.status == 404:
                return {"message": f"Container {container_id['value']} is unknown to the agent"}
            if response.status == 503:
                await asyncio.sleep(WAIT_RETRY_INTERVAL)
                continue
            raise AgentCallError(
                "WAIT_CONTAINER", container_id, response.status, response.body.decode(errors="replace")
            )

    async def _resume(self) -> None:
        """After a lost WAIT: a moment, then, as Mesos's default executor (which waits
        again on every container once re-subscribed), until the executor is subscribed:
        a restarted agent's recovery at a thousand containers slowed under the WAITs
        that each asked it again every second on their own while it started."""
        await asyncio.sleep(WAIT_RETRY_INTERVAL)
        if self._subscription is not None:
            await self._subscription.until_subscribed()

    async def kill_container(self, container_id: Json, signal: int) -> None:
        body = _encode("KILL_CONTAINER", kill_container={"container_id": container_id, "signal": int(signal)})
        response = await self._post(body)
        if response.status not in (200, 404):  # 404: already gone
            raise AgentCallError(
                "KILL_CONTAINER", container_id, response.status, response.body.decode(errors="replace")
            )

    async def remove_container(self, container_id: Json) -> None:
        response = await self._post(
            _encode("REMOVE_CONTAINER", remove_container={"container_id": container_id})
        )
        if response.status not in (200, 404):
            raise AgentCallError(
                "REMOVE_CONTAINER", container_id, response.status, response.body.decode(errors="replace")
            )

    async def launch_session(self, container_id: Json, command: Json) -> Session:
        body = _encode(
            "LAUNCH_NESTED_CONTAINER_SESSION",
            launch_nested_container_session={"container_id": container_id, "command": command},
        )
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/recordio",
            "Message-Accept": "application/json",
        }
        try:
            response, chunks, writer = await open_stream(self.endpoint, AGENT_API, body, headers)
        except HttpError as exc:
            raise ConnectionError(str(exc)) from None
        if response.status != 200:
            text = b"".join([c async for c in chunks]).decode(errors="replace")
            writer.close()
            raise AgentCallError("LAUNCH_NESTED_CONTAINER_SESSION", container_id, response.status, text)
        return Session(chunks, writer)

    async def close(self) -> None:
        while self._idle:
            await self._idle.pop().close()
