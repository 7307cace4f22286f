"""A small master speaking `mesilla.v1.internal`, and an in-process agent to test against it.

It sits below the interface under test (the agent): it accepts REGISTER
streams, answers REGISTERED, pings the agent as the master does, records every
call the agent makes, and lets a test push events (RUN_TASK, KILL_TASK,
ACKNOWLEDGE, ...) down the stream.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import msgspec
from aiohttp import web

from mesilla.agent import main as agent_main
from mesilla.agent.agent import Agent
from mesilla.common import recordio
from mesilla.common.flags import parse
from mesilla.v1 import codec
from mesilla.v1.internal import (
    Acknowledge,
    AgentCall,
    AgentCallType,
    AgentEvent,
    AgentEventType,
    MasterAgentConnection,
    Registered,
)
from mesilla.v1.mesos import AgentID, MasterInfo


class FakeMaster:
    # As the master's --max_agent_ping_timeouts: what REGISTERED announces is this many pings.
    MAX_PING_TIMEOUTS = 3

    def __init__(self, *, auto_ack: bool = True, ping_interval: float = 5.0) -> None:
        self.auto_ack = auto_ack
        self.pings = True  # False: the stream stays open but goes silent
        self.ping_interval = ping_interval
        self.calls: list[AgentCall] = []
        self.registers: list[AgentCall] = []
        self.stream_id: str | None = None
        self.agent_id: str | None = None
        self._response: web.StreamResponse | None = None
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._stop_stream = asyncio.Event()
        self._streams: list[asyncio.Event] = []
        # Set to a cleared Event to hold REGISTERED back until it is set; `registering`
        # counts the REGISTER calls received.
        self.hold_registered: asyncio.Event | None = None
        self.registering = 0
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/internal/agent", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        for stop in self._streams:
            stop.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        call = codec.decode(await request.read(), AgentCall)
        if call.type is AgentCallType.REGISTER:
            return await self._register(request, call)
        if request.headers.get("Mesos-Stream-Id") != self.stream_id:
            return web.Response(status=403, text="wrong stream id")
        # A call carrying several updates is kept as one call per update, as the tests read them.
        singles = [
            msgspec.structs.replace(call, status_update=update, status_updates=[])
            for update in ([call.status_update] if call.status_update else []) + call.status_updates
        ] or [call]
        async with self._changed:
            self.calls.extend(singles)
            self._changed.notify_all()
        for single in singles:
            await self._auto_acknowledge(single)
        return web.Response(status=202)

    async def _auto_acknowledge(self, call: AgentCall) -> None:
        if self.auto_ack and call.type is AgentCallType.STATUS_UPDATE and call.status_update:
            update = call.status_update
            await self.send(
                AgentEvent(
                    type=AgentEventType.ACKNOWLEDGE,
                    acknowledge=Acknowledge(
                        framework_id=update.framework_id,
                        task_id=update.status.task_id,
                        uuid=update.status.uuid or b"",
                    ),
                )
            )

    async def _register(self, request: web.Request, call: AgentCall) -> web.StreamResponse:
        assert call.register is not None
        given = call.register.agent_info.id
        self.agent_id = given.value if given else self.agent_id or str(uuid.uuid4())
        self.stream_id = str(uuid.uuid4())
        self._stop_stream = asyncio.Event()
        self._streams.append(self._stop_stream)
        response = web.StreamResponse(headers={"Mesos-Stream-Id": self.stream_id})
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(request)
        async with self._changed:
            self.registering += 1
            self._changed.notify_all()
        if self.hold_registered is not None:
            await self.hold_registered.wait()
        self._response = response
        await self.send(
            AgentEvent(
                type=AgentEventType.REGISTERED,
                registered=Registered(
                    agent_id=AgentID(value=self.agent_id),
                    master_info=MasterInfo(
                        id="fake", ip=16777343, port=self.port, hostname="localhost"
                    ),
                    connection=MasterAgentConnection(
                        total_ping_timeout_seconds=self.ping_interval * self.MAX_PING_TIMEOUTS
                    ),
                ),
            )
        )
        async with self._changed:
            self.registers.append(call)
            self._changed.notify_all()
        stop = self._stop_stream
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.ping_interval)
            except TimeoutError:
                if self.pings:
                    await self.send(AgentEvent(type=AgentEventType.PING))
        return response

    def drop_stream(self) -> None:
        """Ends the current stream, as a master restart would."""
        self._stop_stream.set()
        self._response = None
        self.stream_id = None

    async def send(self, event: AgentEvent) -> None:
        assert self._response is not None, "the agent is not registered"
        await self._response.write(recordio.encode(codec.encode(event)))

    async def wait_for(self, predicate: Callable[[], object], timeout: float = 30.0) -> object:
        async def waiter() -> object:
            async with self._changed:
                while True:
                    value = predicate()
                    if value:
                        return value
                    # Also re-check now and then: some predicates look at the agent.
                    try:
                        await asyncio.wait_for(self._changed.wait(), 0.1)
                    except TimeoutError:
                        pass

        return await asyncio.wait_for(waiter(), timeout)

    def updates(self, task_id: str | None = None) -> list:
        return [
            c.status_update
            for c in self.calls
            if c.type is AgentCallType.STATUS_UPDATE
            and c.status_update is not None
            and (task_id is None or c.status_update.status.task_id.value == task_id)
        ]

    async def wait_update(self, task_id: str, state: str, timeout: float = 30.0):  # type: ignore[no-untyped-def]
        def found():  # type: ignore[no-untyped-def]
            for u in self.updates(task_id):
                if u.status.state.value == state:
                    return u
            return None

        return await self.wait_for(found, timeout)


class AgentProcess:
    """An in-process agent and the task running it."""

    def __init__(self, master: FakeMaster, work_dir: str, runtime_dir: str, *extra: str) -> None:
        self.argv = [
            f"--master={master.address}",
            f"--work_dir={work_dir}",
            "--port=0",
            "--launcher=posix",
            f"--runtime_dir={runtime_dir}",
            "--resources=cpus:2;mem:1024;disk:1024;ports:[31000-32000]",
            "--registration_backoff_factor=100ms",
            "--executor_shutdown_grace_period=2secs",
            *extra,
        ]
        self.agent: Agent | None = None
        self.task: asyncio.Task[Agent] | None = None

    async def start(self, status_update_interval: float = 10.0) -> Agent:
        flags = parse(agent_main.AGENT_FLAGS, self.argv, environ={})
        ready: asyncio.Future[Agent] = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(
            agent_main.run(flags, status_update_interval=status_update_interval, ready=ready)
        )
        done, _ = await asyncio.wait(
            {ready, self.task}, timeout=30, return_when=asyncio.FIRST_COMPLETED
        )
        if self.task in done:
            self.task.result()
        self.agent = await ready
        return self.agent

    async def stop(self, *, destroy: bool = True) -> None:
        """Stops the agent; with `destroy`, also every container it started."""
        if self.agent is not None and destroy:
            for container_id in list(self.agent.containerizer.containers()):
                await self.agent.containerizer.destroy(container_id)
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    @property
    def url(self) -> str:
        assert self.agent is not None
        return f"http://{self.agent.endpoint}"
