"""The agent's connection to the master (the agent side of `mesilla.v1.internal`).

`MasterLink.run` keeps one REGISTER stream open to ``POST /internal/agent``:
it registers (or re-registers with what the agent runs, once it has an id),
hands every event to the agent, answers the master's PINGs with PONG, and
reconnects with backoff when the stream ends or nothing arrives on it for the
total ping timeout the master announced in REGISTERED (Mesos's
``pingTimeout``: the master is taken as lost). Other calls are separate
POSTs carrying the stream's ``Mesos-Stream-Id``, sent in order by one sender
task (status updates queued together go in one call); a call that fails
while disconnected is dropped, since status updates are retried by the
status update manager and the rest is best effort as in Mesos. Calls made
between building REGISTER and its REGISTERED (an executor that exits
meanwhile, reported in REGISTER as running) are held and sent right after
REGISTERED, in order, as Mesos's messages follow its re-registration on the
same connection.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections import deque
from typing import Protocol

import aiohttp

from mesilla.common import recordio
from mesilla.common.authentication import basic_authorization
from mesilla.common.errors import BadRequest
from mesilla.common.validation import validate_ids
from mesilla.v1 import codec
from mesilla.v1.internal import (
    AgentCall,
    AgentCallType,
    AgentEvent,
    AgentEventType,
    Register,
    Registered,
)
from mesilla.v1.mesos import AgentID

log = logging.getLogger(__name__)

# Status updates sent in one call, at most.
MAX_BATCHED_UPDATES = 100

# Mesos's REGISTER_RETRY_INTERVAL_MAX: backoff doubles up to this.
REGISTER_RETRY_INTERVAL_MAX = 60.0
# A REGISTER unanswered this long is sent again, as Mesos's agent retries its registration
# until it is registered: a connection left half-open by a lossy network would hang it forever.
REGISTRATION_TIMEOUT = REGISTER_RETRY_INTERVAL_MAX


class Registrant(Protocol):
    """What the link drives (`mesilla.agent.master_events.MasterEvents`)."""

    def register_call(self) -> Register: ...

    def registered(self, registered: Registered) -> None: ...

    def disconnected(self) -> None: ...

    def handle_event(self, event: AgentEvent) -> None: ...


class MasterLink:
    """The agent's `MasterChannel`: built first, passed to the agent, then `run` with
    the agent's `Registrant`."""

    def __init__(
        self,
        master: str,
        backoff_factor: float,
        credential: tuple[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._ssl = ssl_context  # TLS to the master, when the agent has it on
        # --credential: sent on every call, for a master with --authenticate_agents.
        self._headers = {} if credential is None else {"Authorization": basic_authorization(*credential)}
        scheme = "https" if ssl_context is not None else "http"
        address = master.removeprefix("http://").removeprefix("https://").rstrip("/")
        self.url = f"{scheme}://{address}/internal/agent"
        self.backoff_factor = backoff_factor
        self.stream_id: str | None = None
        self.connected = asyncio.Event()
        self._outbox: asyncio.Queue[AgentCall] = asyncio.Queue()
        self._registering: list[AgentCall] | None = None  # held until REGISTERED
        self._session: aiohttp.ClientSession | None = None
        self._agent_id: AgentID | None = None  # for PONG, from REGISTERED

    def send(self, call: AgentCall) -> None:
        if self.stream_id is None:
            if self._registering is not None:
                self._registering.append(call)
                return
            log.debug("Not connected to the master: dropping %s", call.type.value)
            return
        self._outbox.put_nowait(call)

    async def run(self, agent: Registrant) -> None:
        timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_read=None)
        connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True)
        async with aiohttp.ClientSession(
            timeout=timeout, headers=self._headers, connector=connector
        ) as session:
            self._session = session
            sender = asyncio.create_task(self._sender(session), name="master sender")
            try:
                await self._connect_loop(session, agent)
            finally:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
                self._session = None

    async def _connect_loop(self, session: aiohttp.ClientSession, agent: Registrant) -> None:
        delay = self.backoff_factor
        while True:
            try:
                registered = await self._session_once(session, agent)
            except (TimeoutError, aiohttp.ClientError, OSError, BadRequest) as exc:
                log.info("Connection to the master at %s failed: %s", self.url, exc)
                registered = False
            finally:
                self._disconnected(agent)
            if registered:
                delay = self.backoff_factor
            # A random wait in [0, delay] spreads agents out, as Mesos does.
            await asyncio.sleep(random.uniform(0, delay) if delay > 0 else 0)
            delay = min(max(delay, 0.1) * 2, REGISTER_RETRY_INTERVAL_MAX)

    def _disconnected(self, agent: Registrant) -> None:
        if self.stream_id is not None:
            log.info("Lost the connection to the master")
        self.stream_id = None
        self._registering = None  # the next REGISTER reports what they told
        self.connected.clear()
        while not self._outbox.empty():
            self._outbox.get_nowait()
        agent.disconnected()

    async def _session_once(self, session: aiohttp.ClientSession, agent: Registrant) -> bool:
        register = agent.register_call()
        self._registering = []
        call = AgentCall(
            type=AgentCallType.REGISTER, agent_id=register.agent_info.id, register=register
        )
        request = session.post(
            self.url,
            data=codec.encode(call),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            async with asyncio.timeout(REGISTRATION_TIMEOUT):
                response = await request
        except TimeoutError:
            log.warning("No answer to REGISTER within %ss: sending it again", REGISTRATION_TIMEOUT)
            return False
        async with response:
            if response.status != 200:
                text = await response.text()
                log.warning("The master refused registration (%d): %s", response.status, text)
                return False
            stream_id = response.headers.get("Mesos-Stream-Id")
            registered = False
            ping_timeout: float | None = None
            decoder = recordio.Decoder()
            while True:
                try:
                    # Not wait_for: on Python 3.11 it swallows a cancellation that
                    # comes with the read's completion (say the master dying as
                    # the agent is told to stop), and the agent would never stop.
                    wait = ping_timeout if registered else REGISTRATION_TIMEOUT
                    async with asyncio.timeout(wait):
                        chunk = await response.content.readany()
                except TimeoutError:
                    what = "pings" if registered else "REGISTERED"
                    log.warning("No %s from the master within %ss: re-registering", what, wait)
                    return registered
                if not chunk:
                    return registered
                for record in decoder.feed(chunk):
                    event = codec.decode(record, AgentEvent)
                    try:
                        validate_ids(event)
                    except BadRequest as exc:
                        # Ids become paths here: a bad one is never acted on.
                        log.error("Dropping the %s event from the master: %s", event.type.value, exc)
                        continue
                    if event.type is AgentEventType.REGISTERED and event.registered:
                        ping_timeout = event.registered.connection.total_ping_timeout_seconds
                        self.stream_id = stream_id
                        held, self._registering = self._registering or [], None
                        for call in held:
                            self._outbox.put_nowait(call)
                        registered = True
                        self._agent_id = event.registered.agent_id
                        agent.registered(event.registered)
                        self.connected.set()
                    elif event.type is AgentEventType.PING:
                        self.send(AgentCall(type=AgentCallType.PONG, agent_id=self._agent_id))
                    else:
                        agent.handle_event(event)

    def _batched(self, call: AgentCall, held: deque[AgentCall]) -> AgentCall:
        """`call` and the status updates queued right behind it, as one STATUS_UPDATE call
        (`status_updates`): a busy agent's updates cost the master one request, not one
        each. The first call that is not an update waits in `held`, keeping the order."""
        if call.type is not AgentCallType.STATUS_UPDATE or call.status_update is None:
            return call
        updates = [call.status_update]
        while not self._outbox.empty() and len(updates) < MAX_BATCHED_UPDATES:
            following = self._outbox.get_nowait()
            if following.type is not AgentCallType.STATUS_UPDATE or following.status_update is None:
                held.append(following)
                break
            updates.append(following.status_update)
        if len(updates) == 1:
            return call
        return AgentCall(type=AgentCallType.STATUS_UPDATE, agent_id=call.agent_id, status_updates=updates)

    async def _sender(self, session: aiohttp.ClientSession) -> None:
        held: deque[AgentCall] = deque()
        while True:
            call = self._batched(held.popleft() if held else await self._outbox.get(), held)
            stream_id = self.stream_id
            if stream_id is None:
                continue
            try:
                async with session.post(
                    self.url,
                    data=codec.encode(call),
                    headers={"Content-Type": "application/json", "Mesos-Stream-Id": stream_id},
                ) as response:
                    if response.status != 202:
                        log.warning(
                            "The master answered %d to %s: %s",
                            response.status,
                            call.type.value,
                            await response.text(),
                        )
            except (aiohttp.ClientError, OSError) as exc:
                log.info("Sending %s to the master failed: %s", call.type.value, exc)
