"""The agent's operator API: `POST /api/v1` (and `/files`).

v1 calls are dispatched through a table by call type, so that the container
calls (LAUNCH_CONTAINER, WAIT_CONTAINER, ...) can be added with
`AgentApi.register`. Every answer except GET_HEALTH, GET_VERSION and GET_FLAGS
needs a recovered agent: before that it is 503 "Agent has not finished
recovery", as Mesos.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from mesilla import MESOS_VERSION
from mesilla.agent import authorize, executor_auth
from mesilla.agent.agent import Agent, AgentStatus
from mesilla.agent.state import Executor, ExecutorState
from mesilla.common import attached_files
from mesilla.common.errors import BadRequest, ContainerError, HttpError, ServiceUnavailable
from mesilla.common.http import (
    Router,
    check_accept,
    json_response,
    read_message,
)
from mesilla.common.logging_level import VERBOSITY, set_logging_level
from mesilla.common.negotiation import RECORDIO
from mesilla.common.protobuf_utils import create_task
from mesilla.common.resources import Resources
from mesilla.common.validation import validate_ids
from mesilla.v1 import agent as api
from mesilla.v1 import codec
from mesilla.v1.mesos import (
    ContainerID,
    ContainerStatus,
    Flag,
    GetLoggingLevel,
    GetOperations,
    Image,
    Message,
    Metric,
    TaskState,
    VersionInfo,
)

log = logging.getLogger(__name__)

CallHandler = Callable[[api.Call, web.Request], Awaitable[web.StreamResponse]]
StreamingHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Calls a recovering agent still answers (Mesos's http.cpp lets these through).
_ANSWERED_WHILE_RECOVERING = {
    api.CallType.GET_HEALTH,
    api.CallType.GET_VERSION,
    api.CallType.GET_FLAGS,
    api.CallType.GET_METRICS,
    api.CallType.GET_LOGGING_LEVEL,
}


def require_recovered(agent: Agent) -> None:
    if agent.status is AgentStatus.RECOVERING:
        raise ServiceUnavailable("Agent has not finished recovery")


# --- v1 builders -------------------------------------------------------------------------


def get_frameworks(agent: Agent) -> api.GetFrameworks:
    return api.GetFrameworks(
        frameworks=[api.FrameworkEntry(framework_info=f.info) for f in agent.frameworks.values()],
        completed_frameworks=[
            api.FrameworkEntry(framework_info=f.info) for f in agent.completed_frameworks
        ],
    )


def get_executors(agent: Agent) -> api.GetExecutors:
    running, completed = [], []
    for framework in [*agent.frameworks.values(), *agent.completed_frameworks]:
        for executor in framework.executors.values():
            running.append(api.ExecutorEntry(executor_info=executor.info))
        for executor in framework.completed_executors:
            completed.append(api.ExecutorEntry(executor_info=executor.info))
    return api.GetExecutors(executors=running, completed_executors=completed)


def get_tasks(agent: Agent) -> api.GetTasks:
    out = api.GetTasks()
    for framework in [*agent.frameworks.values(), *agent.completed_frameworks]:
        for executor in [*framework.executors.values(), *framework.completed_executors]:
            out.queued_tasks.extend(
                create_task(t, TaskState.TASK_STAGING, framework.id, executor.agent_id)
                for t in executor.queued_tasks.values()
            )
            out.launched_tasks.extend(executor.launched_tasks.values())
            out.terminated_tasks.extend(executor.terminated_tasks.values())
            out.completed_tasks.extend(executor.completed_tasks)
    return out


class ContainerEntry(msgspec.Struct, kw_only=True):
    """One container as GET_CONTAINERS, ``/containers`` and ``/monitor/statistics`` see it."""

    container_id: ContainerID
    executor: Executor | None = None
    status: ContainerStatus | None = None
    statistics: dict[str, float] | None = None


async def list_containers(
    agent: Agent, *, show_nested: bool, show_standalone: bool
) -> list[ContainerEntry]:
    """The containerizer's containers with their executor, status and usage."""
    executors = {
        executor.container_id: executor
        for framework in agent.frameworks.values()
        for executor in framework.executors.values()
    }
    out = []
    for container_id in agent.containerizer.containers():
        if container_id.parent is not None and not show_nested:
            continue
        executor = executors.get(container_id.root())
        if executor is None and not show_standalone and container_id.parent is None:
            continue
        entry = ContainerEntry(container_id=container_id, executor=executor)
        try:
            entry.status = await agent.containerizer.status(container_id)
            entry.statistics = (await agent.containerizer.usage(container_id)).to_json()
        except ContainerError as exc:  # a container may end while it is being listed
            log.debug("No status for container %s: %s", container_id, exc)
        out.append(entry)
    return out


async def get_containers(agent: Agent, call: api.GetContainersCall) -> api.GetContainers:
    out = []
    for listed in await list_containers(
        agent, show_nested=call.show_nested, show_standalone=call.show_standalone
    ):
        entry = api.Container(container_id=listed.container_id)
        if listed.executor is not None:
            entry.framework_id = codec.to_builtins(listed.executor.framework_id)
            entry.executor_id = codec.to_builtins(listed.executor.info.executor_id)
            entry.executor_name = listed.executor.info.name
        if listed.status is not None:
            entry.container_status = codec.to_builtins(listed.status)
            entry.resource_statistics = listed.statistics
        out.append(entry)
    return api.GetContainers(containers=out)


def metrics(agent: Agent) -> dict[str, float]:
    """Mesos's agent metric names (`docs/monitoring.md`)."""
    tasks = get_tasks(agent)
    counts: dict[str, int] = {}
    for task in [
        *tasks.queued_tasks,
        *tasks.launched_tasks,
        *tasks.terminated_tasks,
        *tasks.completed_tasks,
    ]:
        counts[task.state.value] = counts.get(task.state.value, 0) + 1
    executors = [e for f in agent.frameworks.values() for e in f.executors.values()]
    total = Resources.from_list(agent.info.resources)
    used = Resources.from_list([r for e in executors for r in e.allocated_resources()])
    m: dict[str, float] = {
        "slave/registered": 1.0 if agent.status is AgentStatus.RUNNING else 0.0,
        "slave/uptime_secs": time.time() - agent.start_time,
        "slave/recovery_errors": float(agent.metrics["recovery_errors"]),
        "slave/container_launch_errors": float(agent.metrics["container_launch_errors"]),
        "slave/frameworks_active": float(len(agent.frameworks)),
        "slave/executors_registering": float(
            sum(e.state is ExecutorState.REGISTERING for e in executors)
        ),
        "slave/executors_running": float(sum(e.state is ExecutorState.RUNNING for e in executors)),
        "slave/executors_terminating": float(
            sum(e.state is ExecutorState.TERMINATING for e in executors)
        ),
        "slave/executors_terminated": float(agent.metrics["executors_terminated"]),
        "slave/executors_preempted": 0.0,
        "slave/valid_status_updates": float(agent.metrics["valid_status_updates"]),
        "slave/invalid_status_updates": float(agent.metrics["invalid_status_updates"]),
        "slave/valid_framework_messages": float(agent.metrics["valid_framework_messages"]),
        "slave/invalid_framework_messages": float(agent.metrics["invalid_framework_messages"]),
    }
    m["gc/path_removals_pending"] = float(agent.gc.pending)
    m["gc/path_removals_succeeded"] = float(agent.gc.succeeded)
    m["gc/path_removals_failed"] = float(agent.gc.failed)
    if agent.recovery_time is not None:
        m["slave/recovery_time_secs"] = agent.recovery_time
    for state in (
        "staging",
        "starting",
        "running",
        "killing",
        "finished",
        "failed",
        "killed",
        "lost",
        "gone",
    ):
        m[f"slave/tasks_{state}"] = float(counts.get(f"TASK_{state.upper()}", 0))
    for name in ("cpus", "mem", "disk", "gpus"):
        t, u = total.scalar(name), used.scalar(name)
        m[f"slave/{name}_total"] = t
        m[f"slave/{name}_used"] = u
        m[f"slave/{name}_percent"] = u / t if t else 0.0
    return m


# --- installation ----------------------------------------------------------------------


class AgentApi:
    def __init__(self, agent: Agent, files: attached_files.Files) -> None:
        self.agent = agent
        self.files = files
        self._streaming: StreamingHandler | None = None
        t = api.CallType
        # The container calls are added by `container_api` through `register`.
        self._handlers: dict[api.CallType, CallHandler] = {
            # The daemon's own facts.
            t.GET_HEALTH: self._health,
            t.GET_VERSION: self._version,
            t.GET_FLAGS: self._flags,
            t.GET_METRICS: self._metrics,
            t.GET_LOGGING_LEVEL: self._logging_level,
            t.SET_LOGGING_LEVEL: self._set_logging_level,
            # The agent's state.
            t.GET_STATE: self._state,
            t.GET_FRAMEWORKS: self._frameworks,
            t.GET_EXECUTORS: self._executors,
            t.GET_TASKS: self._tasks,
            t.GET_AGENT: self._agent_info,
            t.GET_CONTAINERS: self._containers,
            # The attached files (sandboxes, the agent's log), as /files serves them.
            t.LIST_FILES: self._list_files,
            t.READ_FILE: self._read_file,
            # Images and resource providers.
            t.PRUNE_IMAGES: self._prune_images,
            t.GET_OPERATIONS: self._operations,
            t.GET_RESOURCE_PROVIDERS: self._resource_providers,
            t.ADD_RESOURCE_PROVIDER_CONFIG: self._no_resource_providers,
            t.UPDATE_RESOURCE_PROVIDER_CONFIG: self._no_resource_providers,
            t.REMOVE_RESOURCE_PROVIDER_CONFIG: self._no_resource_providers,
            t.MARK_RESOURCE_PROVIDER_GONE: self._no_resource_providers,
        }

    def register(self, call_type: api.CallType, handler: CallHandler) -> None:
        self._handlers[call_type] = handler

    def respond(self, request: web.Request, **fields: Message) -> web.Response:
        """The answer to a call, in the encoding its Accept chose (checked by `handle`)."""
        (name,) = fields
        encoding = check_accept(request, api.Response, streaming=True)
        # One part, named as its call type (`get_state=GetState(...)`): mypy cannot pair them.
        response = api.Response(type=api.CallType(name.upper()), **fields)  # type: ignore[arg-type]
        return json_response(response, encoding=encoding)

    # --- the daemon's own facts ---------------------------------------------------------

    async def _health(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        return self.respond(request, get_health=api.GetHealth(healthy=True))

    async def _version(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        return self.respond(
            request,
            get_version=api.GetVersion(version_info=VersionInfo(version=MESOS_VERSION))
        )

    async def _flags(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        values = self.agent.flags.parsed.as_strings()
        return self.respond(
            request,
            get_flags=api.GetFlags(flags=[Flag(name=k, value=v) for k, v in values.items()])
        )

    async def _metrics(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        values = metrics(self.agent)
        return self.respond(
            request,
            get_metrics=api.GetMetrics(
                metrics=[Metric(name=k, value=v) for k, v in sorted(values.items())]
            )
        )

    async def _logging_level(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        return self.respond(request, get_logging_level=GetLoggingLevel(level=VERBOSITY.level()))

    async def _set_logging_level(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        if call.set_logging_level is None:
            raise BadRequest("Expecting 'set_logging_level' to be present")
        set_logging_level(call.set_logging_level)
        return web.Response(status=200)

    # --- the agent's state --------------------------------------------------------------

    async def _state(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        agent = self.agent
        return self.respond(
            request,
            get_state=api.GetState(
                get_tasks=get_tasks(agent),
                get_executors=get_executors(agent),
                get_frameworks=get_frameworks(agent),
            )
        )

    async def _frameworks(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        return self.respond(request, get_frameworks=get_frameworks(self.agent))

    async def _executors(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        return self.respond(request, get_executors=get_executors(self.agent))

    async def _tasks(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        return self.respond(request, get_tasks=get_tasks(self.agent))

    async def _agent_info(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        return self.respond(request, get_agent=api.GetAgent(agent_info=self.agent.info))

    async def _containers(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        return self.respond(
            request,
            get_containers=await get_containers(
                self.agent, call.get_containers or api.GetContainersCall()
            )
        )

    # --- files --------------------------------------------------------------------------

    async def _list_files(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        if call.list_files is None:
            raise BadRequest("Expecting 'list_files' to be present")
        listing = attached_files.list_files(self.files, request, call.list_files.path)
        return self.respond(request, list_files=listing)

    async def _read_file(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        if call.read_file is None:
            raise BadRequest("Expecting 'read_file' to be present")
        return self.respond(
            request, read_file=attached_files.read_file(self.files, request, call.read_file)
        )

    # --- images and resource providers --------------------------------------------------

    async def _prune_images(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        excluded = (call.prune_images or {}).get("excluded_images") or []
        try:
            images = codec.convert(excluded, list[Image])
        except BadRequest as exc:
            raise BadRequest(f"Invalid 'prune_images.excluded_images': {exc.reason}") from None
        await self.agent.containerizer.prune_images(images)
        return web.Response(status=200)

    async def _operations(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        # Operations come with resource providers, which this agent does not have.
        return self.respond(request, get_operations=GetOperations())

    async def _resource_providers(self, call: api.Call, request: web.Request) -> web.StreamResponse:
        return self.respond(request, get_resource_providers=api.GetResourceProviders())

    async def _no_resource_providers(
        self, call: api.Call, request: web.Request
    ) -> web.StreamResponse:
        raise BadRequest(
            f"{call.type.value}: this agent has no resource providers "
            "(there is no --resource_provider_config_dir)"
        )

    def register_streaming(self, handler: StreamingHandler) -> None:
        """The handler of requests whose body is a RecordIO stream of Calls."""
        self._streaming = handler

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.content_type == RECORDIO and self._streaming is not None:
            require_recovered(self.agent)
            return await self._streaming(request)
        call = await read_message(request, api.Call)
        if call.type not in _ANSWERED_WHILE_RECOVERING:
            # Before any check, as Mesos: a restarted agent answers its executors' calls
            # with this while it recovers, and each answer costs it little.
            require_recovered(self.agent)
        check_accept(request, api.Response, streaming=True)
        if call.type is api.CallType.UNKNOWN:
            raise BadRequest("Expecting 'type' to be present")
        try:
            validate_ids(call)
        except BadRequest as exc:
            raise BadRequest(f"Failed to validate agent::Call: {exc.reason}", field=exc.field) from exc
        executor_auth.check_agent_call(
            request, call, self.agent.executor_sandbox, self.files.resolve
        )
        authorize.check_call(self.agent, request, call)
        handler = self._handlers.get(call.type)
        if handler is None:
            raise NotImplementedCall(f"Call {call.type.value} is not implemented by this agent")
        response = await handler(call, request)
        seen = authorize.viewer(self.agent, request) if call.type in _FILTERED else None
        if seen is not None and isinstance(response, web.Response) and response.body:
            assert isinstance(response.body, bytes)
            # Filtered in JSON, answered in the encoding the call's Accept chose.
            encoding = check_accept(request, api.Response, streaming=True)
            document = encoding.decode(response.body, api.Response)
            body = encoding.encode(seen.encode(document), api.Response)
            return web.Response(body=body, content_type=encoding.content_type)
        return response


#: Read calls whose answer leaves out what the principal may not see (--acls).
_FILTERED = frozenset({
    api.CallType.GET_STATE, api.CallType.GET_TASKS, api.CallType.GET_FRAMEWORKS,
    api.CallType.GET_EXECUTORS, api.CallType.GET_CONTAINERS,
})


class NotImplementedCall(HttpError):
    status = 501


def install(router: Router, agent: Agent, files: attached_files.Files) -> AgentApi:
    """`POST /api/v1` and `/files`; the v0 JSON endpoints are `agent.endpoints`."""
    agent_api = AgentApi(agent, files)

    async def v1(request: web.Request) -> web.StreamResponse:
        return await agent_api.handle(request)

    router.add("/api/v1", v1, methods=("POST",), realm="mesos-agent-readwrite")
    attached_files.install(router, files, "mesos-agent-readonly", agent.authorizer)
    return agent_api
