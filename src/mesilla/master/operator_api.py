"""The master's operator API: ``POST /api/v1`` with Mesos's v1 master Call/Response.

Read-only calls answer ``200`` with a `Response` (``{"type": "GET_HEALTH",
"get_health": {"healthy": true}}``); write calls (UPDATE_WEIGHTS, TEARDOWN,
MARK_AGENT_GONE) answer ``200`` with no body, as Mesos does. SUBSCRIBE opens
a chunked RecordIO stream: SUBSCRIBED with the whole state first, then an
event for every change the master reports to its observers, and HEARTBEAT
every 15 seconds. Calls Mesilla does not implement, and bad input, get
``400`` with the reason.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web

from mesilla import MESOS_VERSION
from mesilla.common import attached_files, documents, secrets
from mesilla.common.authorization import require
from mesilla.common.errors import BadRequest, NotFound
from mesilla.common.http import (
    EventStream,
    Router,
    check_accept,
    json_response,
    jsonp_response,
    read_message,
)
from mesilla.common.logging_level import VERBOSITY, set_logging_level
from mesilla.common.negotiation import RECORDIO, message_encoding, wants_recordio
from mesilla.common.resources import Resources
from mesilla.common.validation import validate_ids
from mesilla.master import authorize, metrics
from mesilla.master.agent import Agent
from mesilla.master.endpoints import known_roles, rendered, version_info
from mesilla.master.framework import Framework
from mesilla.master.outbox import ObserverEvent, ObserverKind, TaskUpdated
from mesilla.master.validation import validate_role
from mesilla.v1 import codec
from mesilla.v1 import master as m
from mesilla.v1.mesos import (
    AgentID,
    Flag,
    FrameworkID,
    GetLoggingLevel,
    GetOperations,
    Metric,
    Offer,
    Resource,
    Task,
    TimeInfo,
)

if TYPE_CHECKING:
    from mesilla.master.master import Master

log = logging.getLogger(__name__)

# Mesos's operator event stream heartbeat (`DEFAULT_HEARTBEAT_INTERVAL`).
HEARTBEAT_INTERVAL = 15.0
SUBSCRIBERS_METRIC = "master/operator_event_stream_subscribers"
READWRITE = "mesos-master-readwrite"


def install(router: Router, master: Master, files: attached_files.Files) -> None:
    """Registers ``/api/v1`` on the master's router; `files` are what LIST_FILES and READ_FILE read."""
    api = OperatorApi(master, files)
    router.add("/api/v1", api.handle, methods=("POST",), realm=READWRITE)
    # Mesos's v0 forms of TEARDOWN and GET/UPDATE_WEIGHTS, answered by the same calls.
    router.add("/teardown", api.teardown_endpoint, methods=("POST",), realm=READWRITE)
    router.add("/weights", api.weights_endpoint, methods=("GET", "PUT"), realm=READWRITE)


# --- master state as v1 messages --------------------------------------------------------


def time_info(seconds: float | None) -> TimeInfo | None:
    return None if seconds is None else TimeInfo(nanoseconds=int(seconds * 1e9))


def _offered(offers: dict[str, Offer], total: Callable[[], Resources]) -> list[Resource]:
    """The resources of outstanding offers, summed by `total` (a single offer's are already)."""
    if len(offers) <= 1:
        return [r for offer in offers.values() for r in offer.resources]
    return total().to_list()


def agent_response(agent: Agent) -> m.AgentResponse:
    return m.AgentResponse(
        agent_info=agent.info,
        active=agent.active,
        deactivated=False,
        version=agent.version or MESOS_VERSION,
        pid=agent.pid,
        registered_time=time_info(agent.registered_time),
        reregistered_time=time_info(agent.reregistered_time),
        # As registered; rebuilding them through `Resources` costs GET_STATE seconds at 10,000 agents.
        total_resources=list(agent.info.resources),
        allocated_resources=agent.total_used_resources().to_list()
        if agent.tasks or agent.executors
        else [],
        offered_resources=_offered(agent.offers, agent.offered_resources),
        capabilities=list(agent.capabilities),
    )


def framework_response(framework: Framework) -> m.FrameworkResponse:
    return m.FrameworkResponse(
        framework_info=framework.info,
        active=framework.active,
        connected=framework.connected,
        recovered=framework.recovered,
        registered_time=time_info(framework.registered_time),
        reregistered_time=time_info(framework.reregistered_time),
        unregistered_time=time_info(framework.unregistered_time),
        offers=list(framework.offers.values()),
        allocated_resources=framework.total_used_resources().to_list(),
        offered_resources=_offered(framework.offers, framework.offered_resources),
    )


# The large answers are built with `rendered`: pre-encoded in chunks, handing the
# event loop back in between (their lists then hold `msgspec.Raw`, which encodes as is).


async def get_agents(master: Master) -> m.GetAgents:
    return m.GetAgents(
        agents=await rendered(master.agents.values(), agent_response),  # type: ignore[arg-type]
        recovered_agents=list(master.recovered_agents.values()),
    )


async def get_frameworks(master: Master) -> m.GetFrameworks:
    return m.GetFrameworks(
        frameworks=await rendered(master.frameworks.values(), framework_response),  # type: ignore[arg-type]
        completed_frameworks=await rendered(master.completed_frameworks, framework_response),  # type: ignore[arg-type]
    )


async def get_executors(master: Master) -> m.GetExecutors:
    placed = (
        (agent_id, executor)
        for framework in master.frameworks.values()
        for agent_id, executors in framework.executors.items()
        for executor in executors.values()
    )
    return m.GetExecutors(
        executors=await rendered(  # type: ignore[arg-type]
            placed, lambda at: m.ExecutorResponse(executor_info=at[1], agent_id=AgentID(value=at[0]))
        )
    )


async def get_tasks(master: Master) -> m.GetTasks:
    tasks: list[Task] = []
    unreachable: list[Task] = []
    completed: list[Task] = []
    for framework in [*master.frameworks.values(), *master.completed_frameworks]:
        tasks.extend(framework.tasks.values())
        unreachable.extend(framework.unreachable_tasks.values())
        completed.extend(framework.completed_tasks)
    return m.GetTasks(
        tasks=await rendered(tasks, _itself),  # type: ignore[arg-type]
        unreachable_tasks=await rendered(unreachable, _itself),  # type: ignore[arg-type]
        completed_tasks=await rendered(completed, _itself),  # type: ignore[arg-type]
    )


def _itself(task: Task) -> Task:
    return task


async def get_state(master: Master) -> m.GetState:
    return m.GetState(
        get_tasks=await get_tasks(master),
        get_executors=await get_executors(master),
        get_frameworks=await get_frameworks(master),
        get_agents=await get_agents(master),
    )


def get_roles(master: Master) -> m.GetRoles:
    weights = master.allocator.weights
    return m.GetRoles(
        roles=[
            m.Role(
                name=role,
                weight=weights.get(role, 1.0),
                frameworks=[FrameworkID(value=f.id) for f in frameworks],
                resources=master.allocator.role_allocation(role).to_list(),
            )
            for role, frameworks in sorted(known_roles(master).items())
        ]
    )


def get_metrics(master: Master) -> m.GetMetrics:
    return m.GetMetrics(
        metrics=[Metric(name=k, value=float(v)) for k, v in sorted(metrics.snapshot(master).items())]
    )


def get_flags(master: Master) -> m.GetFlags:
    return m.GetFlags(flags=[Flag(name=k, value=v) for k, v in master.flags.as_strings().items()])


def get_weights(master: Master) -> m.GetWeights:
    weights = sorted(master.allocator.weights.items())
    return m.GetWeights(weight_infos=[m.WeightInfo(weight=w, role=r) for r, w in weights])


def get_master(master: Master) -> m.GetMaster:
    return m.GetMaster(
        master_info=master.master_info, start_time=master.start_time, elected_time=master.elected_time
    )


_READ_ONLY: dict[m.CallType, Callable[[Master], Any]] = {
    m.CallType.GET_HEALTH: lambda _master: m.GetHealth(healthy=True),
    m.CallType.GET_FLAGS: get_flags,
    m.CallType.GET_VERSION: lambda _master: m.GetVersion(version_info=version_info()),
    m.CallType.GET_METRICS: get_metrics,
    m.CallType.GET_STATE: get_state,
    m.CallType.GET_AGENTS: get_agents,
    m.CallType.GET_FRAMEWORKS: get_frameworks,
    m.CallType.GET_EXECUTORS: get_executors,
    m.CallType.GET_TASKS: get_tasks,
    m.CallType.GET_ROLES: get_roles,
    m.CallType.GET_WEIGHTS: get_weights,
    m.CallType.GET_MASTER: get_master,
    m.CallType.GET_LOGGING_LEVEL: lambda _master: GetLoggingLevel(level=VERBOSITY.level()),
    # Operations come with resource providers, which Mesilla does not have.
    m.CallType.GET_OPERATIONS: lambda _master: GetOperations(),
}
# Calls answered before the master has recovered its registry.
_BEFORE_RECOVERY = {m.CallType.GET_HEALTH, m.CallType.GET_FLAGS, m.CallType.GET_VERSION}


def event_for(kind: ObserverKind, event: ObserverEvent) -> m.Event:
    """The operator event for one of the master's observer notifications."""
    if isinstance(event, Task):
        return m.Event(type=m.EventType.TASK_ADDED, task_added=m.TaskAdded(task=event))
    if isinstance(event, TaskUpdated):
        updated = m.TaskUpdated(framework_id=event.framework_id, status=event.status, state=event.state)
        return m.Event(type=m.EventType.TASK_UPDATED, task_updated=updated)
    if isinstance(event, Agent):
        return m.Event(type=m.EventType.AGENT_ADDED, agent_added=m.AgentAdded(agent=agent_response(event)))
    if isinstance(event, AgentID):
        return m.Event(type=m.EventType.AGENT_REMOVED, agent_removed=m.AgentRemoved(agent_id=event))
    if kind == "FRAMEWORK_REMOVED":
        return m.Event(
            type=m.EventType.FRAMEWORK_REMOVED,
            framework_removed=m.FrameworkRemoved(framework_info=event.info),
        )
    framework = framework_response(event)
    if kind == "FRAMEWORK_ADDED":
        return m.Event(
            type=m.EventType.FRAMEWORK_ADDED, framework_added=m.FrameworkAdded(framework=framework)
        )
    return m.Event(
        type=m.EventType.FRAMEWORK_UPDATED, framework_updated=m.FrameworkUpdated(framework=framework)
    )


# --- the endpoint --------------------------------------------------------------------------------


class OperatorApi:
    def __init__(self, master: Master, files: attached_files.Files) -> None:
        self.master = master
        self.files = files
        self.heartbeat_interval = HEARTBEAT_INTERVAL

    async def handle(self, request: web.Request) -> web.StreamResponse:
        call: m.Call = await read_message(request, m.Call)
        if call.type is m.CallType.SUBSCRIBE:
            self._check(call)
            return await self._subscribe(request)
        encoding = check_accept(request, m.Response)
        response = await self.call(request, call)
        if response is None:
            return web.Response(status=200)
        seen = authorize.viewer(self.master, request)
        if seen is not None:
            body = encoding.encode(secrets.redact(seen.encode(response)), m.Response)
            return web.Response(body=body, content_type=encoding.content_type)
        if encoding.protobuf:
            return json_response(response, encoding=encoding)
        return await documents.answer(request, response)

    def _check(self, call: m.Call) -> None:
        try:
            validate_ids(call)
        except BadRequest as exc:
            raise BadRequest(f"Failed to validate master::Call: {exc.reason}", field=exc.field) from exc
        if call.type not in _BEFORE_RECOVERY:
            self.master.check_serving()

    async def call(self, request: web.Request, call: m.Call) -> m.Response | None:
        """A call other than SUBSCRIBE validated, authorized and answered (None: 200 with no body)."""
        self._check(call)
        self._authorize(request, call)
        return self._file_answer(request, call) or await self._answer(call)

    async def teardown_endpoint(self, request: web.Request) -> web.Response:
        """``POST /teardown`` with ``frameworkId=<id>`` in a form body, as Mesos's v0 endpoint."""
        # As Mesos, the body is read as a query string whatever its Content-Type.
        try:
            form = urllib.parse.parse_qs((await request.read()).decode(), strict_parsing=False)
        except UnicodeDecodeError as exc:
            raise BadRequest(f"Unable to decode query string: {exc}") from exc
        values = form.get("frameworkId")
        if not values:
            raise BadRequest("Missing 'frameworkId' query parameter in the request body")
        framework_id = values[-1]
        teardown = m.Teardown(framework_id=FrameworkID(value=framework_id))
        await self.call(request, m.Call(type=m.CallType.TEARDOWN, teardown=teardown))
        return web.Response(status=200)

    async def weights_endpoint(self, request: web.Request) -> web.Response:
        """``GET /weights`` lists the roles' weights; ``PUT /weights`` with a JSON array of
        ``{"role", "weight"}`` updates them, as Mesos's v0 endpoint."""
        if request.method == "PUT":
            try:
                infos = msgspec.json.decode(await request.read(), type=list[m.WeightInfo])
            except msgspec.DecodeError as exc:
                raise BadRequest(f"Failed to parse update weights request JSON: {exc}") from exc
            update = m.UpdateWeights(weight_infos=infos)
            await self.call(request, m.Call(type=m.CallType.UPDATE_WEIGHTS, update_weights=update))
            return web.Response(status=200)
        response = await self.call(request, m.Call(type=m.CallType.GET_WEIGHTS))
        weights = response.get_weights if response is not None else None
        infos = weights.weight_infos if weights is not None else []
        return jsonp_response(request, msgspec.Raw(codec.encode(infos)))

    def _authorize(self, request: web.Request, call: m.Call) -> None:
        """The calls with an ACL action of their own; the read calls filter instead."""
        authorizer = self.master.authorizer
        if authorizer is None:
            return
        t = call.type
        if t is m.CallType.GET_FLAGS:
            require(authorizer, request, "view_flags")
        elif t is m.CallType.UPDATE_WEIGHTS and call.update_weights is not None:
            for info in call.update_weights.weight_infos:
                require(authorizer, request, "update_weights", info.role)
        elif t is m.CallType.TEARDOWN and call.teardown is not None:
            framework = self.master.frameworks.get(call.teardown.framework_id.value)
            principal = framework.info.principal if framework is not None else None
            require(authorizer, request, "teardown_frameworks", principal)
        elif t is m.CallType.MARK_AGENT_GONE:
            require(authorizer, request, "mark_agents_gone")

    def _file_answer(self, request: web.Request, call: m.Call) -> m.Response | None:
        """LIST_FILES and READ_FILE, authorized by the files they read (the log's access_mesos_logs)."""
        t = call.type
        if t is m.CallType.LIST_FILES:
            path = _required(call.list_files, "list_files", t).path
            listing = attached_files.list_files(self.files, request, path)
            return m.Response(type=m.ResponseType.LIST_FILES, list_files=listing)
        if t is m.CallType.READ_FILE:
            read = attached_files.read_file(self.files, request, _required(call.read_file, "read_file", t))
            return m.Response(type=m.ResponseType.READ_FILE, read_file=read)
        return None

    async def _answer(self, call: m.Call) -> m.Response | None:
        render = _READ_ONLY.get(call.type)
        if render is not None:
            # Each GET_FOO answers a Response of type GET_FOO carrying `get_foo`.
            name = call.type.value
            answer = render(self.master)
            if inspect.isawaitable(answer):
                answer = await answer
            return m.Response(type=m.ResponseType[name], **{name.lower(): answer})
        t = call.type
        if t is m.CallType.UPDATE_WEIGHTS:
            self._update_weights(_required(call.update_weights, "update_weights", t))
        elif t is m.CallType.TEARDOWN:
            await self._teardown(_required(call.teardown, "teardown", t).framework_id.value)
        elif t is m.CallType.SET_LOGGING_LEVEL:
            set_logging_level(_required(call.set_logging_level, "set_logging_level", t))
        elif t is m.CallType.MARK_AGENT_GONE:
            await self._mark_agent_gone(_required(call.mark_agent_gone, "mark_agent_gone", t).agent_id.value)
        elif t is m.CallType.UNKNOWN:
            raise BadRequest("Expecting 'type' to be present and known")
        else:
            raise BadRequest(f"Mesilla does not support the master call '{t.value}'")
        return None

    def _update_weights(self, update: m.UpdateWeights) -> None:
        weights: dict[str, float] = {}
        for info in update.weight_infos:
            if info.role is None:
                raise BadRequest("Expecting 'weight_infos[].role' to be present")
            try:
                validate_role(info.role)
            except BadRequest as exc:
                reason = f"BadRequest 'weight_infos[].role': {exc.reason}"
                raise BadRequest(reason, field="weight_infos[].role") from exc
            if not info.weight > 0:
                raise BadRequest(
                    f"BadRequest weight {info.weight} for role '{info.role}': weights must be positive",
                    field="weight_infos[].weight",
                )
            weights[info.role] = info.weight
        self.master.allocator.update_weights(weights)

    async def _teardown(self, framework_id: str) -> None:
        framework = self.master.frameworks.get(framework_id)
        if framework is None:
            raise BadRequest(f"No framework found with ID '{framework_id}'")
        await self.master.framework_streams.teardown(framework)

    async def _mark_agent_gone(self, agent_id: str) -> None:
        master = self.master
        if agent_id in master.gone_agents:
            return
        known = (master.agents, master.recovered_agents, master.unreachable_agents)
        if all(agent_id not in each for each in known):
            raise NotFound(f"Agent '{agent_id}' not found")
        await master.agent_links.mark_gone(agent_id)

    # --- SUBSCRIBE ---------------------------------------------------------------------------

    async def _subscribe(self, request: web.Request) -> web.StreamResponse:
        master = self.master
        queue: asyncio.Queue[msgspec.Raw] = asyncio.Queue()

        seen = authorize.viewer(master, request)

        def observe(kind: ObserverKind, observed: ObserverEvent) -> None:
            # Encoded now: the objects change after the notification.
            encoded = codec.encode(event_for(kind, observed))
            if seen is not None:
                document = msgspec.json.decode(encoded)
                if not seen.event(document):
                    return
                encoded = msgspec.json.encode(seen.filter(document))
            queue.put_nowait(msgspec.Raw(secrets.redact(encoded)))

        # Mesos's operator streams: RecordIO of Message-Accept's encoding, or (the
        # older form) a stream named by its messages' encoding, Accept's.
        if wants_recordio(request):
            encoding = message_encoding(request, m.Event)
            stream = await EventStream.open(
                request,
                headers={"Message-Content-Type": encoding.content_type},
                encoding=encoding,
                event_type=m.Event,
                content_type=RECORDIO,
            )
        else:
            encoding = check_accept(request, m.Event, streaming=True)
            stream = await EventStream.open(request, encoding=encoding, event_type=m.Event)
        master.add_observer(observe)
        master.counters[SUBSCRIBERS_METRIC] += 1
        try:
            subscribed = m.Event(
                type=m.EventType.SUBSCRIBED,
                subscribed=m.Subscribed(
                    get_state=await get_state(master), heartbeat_interval_seconds=self.heartbeat_interval
                ),
            )
            encoded = seen.encode(subscribed) if seen is not None else codec.encode(subscribed)
            if not await stream.send(msgspec.Raw(secrets.redact(encoded))):
                return stream.response
            heartbeat = m.Event(type=m.EventType.HEARTBEAT)
            if not await stream.send(heartbeat):
                return stream.response
            await self._stream_events(request, stream, queue, heartbeat)
        finally:
            master.remove_observer(observe)
            master.counters[SUBSCRIBERS_METRIC] -= 1
        return stream.response

    async def _stream_events(
        self, request: web.Request, stream: EventStream, queue: asyncio.Queue[msgspec.Raw], heartbeat: m.Event
    ) -> None:
        """Sends queued events, and a HEARTBEAT every interval, until the stream closes."""
        async with asyncio.TaskGroup() as group:  # every wait below is awaited on the way out
            # The master's watch of held streams notices a client that went away.
            closed = group.create_task(self.master.streams.hold(request, stream))
            deadline = time.monotonic() + self.heartbeat_interval
            try:
                while True:
                    next_event = group.create_task(queue.get())
                    done, _ = await asyncio.wait(
                        {next_event, closed},
                        timeout=max(0.0, deadline - time.monotonic()),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if next_event not in done:
                        next_event.cancel()
                    if closed in done:
                        return
                    if next_event in done:
                        event: Any = next_event.result()
                    else:
                        event = heartbeat
                        deadline = time.monotonic() + self.heartbeat_interval
                    if not await stream.send(event):
                        return
            finally:
                closed.cancel()


def _required(value: Any, field: str, call_type: m.CallType) -> Any:
    if value is None:
        raise BadRequest(f"Expecting '{field}' to be present for {call_type.value}")
    return value

