"""The agent's v0 JSON endpoints, as Mesos's `src/slave/http.cpp` renders them:
`/state`, `/health`, `/version`, `/flags`, `/containers`, `/monitor/statistics`
and `/metrics/snapshot`. They read what the v1 calls read (`agent_api`).
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from mesilla import MESOS_VERSION
from mesilla.agent import authorize
from mesilla.agent.agent import CAPABILITIES, Agent
from mesilla.agent.agent_api import ContainerEntry, list_containers, metrics, require_recovered
from mesilla.agent.state import Executor, Framework
from mesilla.common.authorization import require
from mesilla.common.http import Router, jsonp_response, metrics_timeout
from mesilla.common.models import attributes_json, task_json
from mesilla.common.protobuf_utils import create_task
from mesilla.common.resources import Resources, ResourcesError
from mesilla.v1 import codec
from mesilla.v1.mesos import FrameworkInfo, Json, Resource, TaskState


def _summary(resources: list[Resource]) -> dict[str, object]:
    try:
        return Resources.from_list(resources).to_json_summary()
    except ResourcesError:
        return {}


def v0_container(listed: ContainerEntry) -> dict[str, object]:
    """A container as Mesos's agent ``/containers`` renders it (ids as plain strings)."""
    entry: dict[str, object] = {}
    if listed.executor is not None:
        info = listed.executor.info
        entry.update(
            framework_id=listed.executor.framework_id.value,
            executor_id=info.executor_id.value,
            executor_name=info.name or "",
            source=info.source or "",
        )
    entry["container_id"] = listed.container_id.value
    if listed.status is not None:
        entry["status"] = codec.to_builtins(listed.status)
    if listed.statistics is not None:
        entry["statistics"] = listed.statistics
    return entry


def _executor_json(executor: Executor) -> Json:
    info = executor.info
    queued = [
        create_task(t, TaskState.TASK_STAGING, executor.framework_id, executor.agent_id)
        for t in executor.queued_tasks.values()
    ]
    return {
        "id": info.executor_id.value,
        "name": info.name or "",
        "source": info.source or "",
        "container": executor.container_id.value,
        "directory": executor.directory,
        "resources": _summary(executor.allocated_resources()),
        "type": info.type,
        "framework_id": executor.framework_id.value,
        "tasks": [task_json(t) for t in executor.launched_tasks.values()],
        "queued_tasks": [task_json(t) for t in queued],
        "completed_tasks": [
            task_json(t) for t in [*executor.terminated_tasks.values(), *executor.completed_tasks]
        ],
        **({"labels": codec.to_builtins(info.labels)} if info.labels else {}),
    }


def _framework_json(framework: Framework) -> Json:
    info: FrameworkInfo = framework.info
    return {
        "id": framework.id.value,
        "name": info.name,
        "user": info.user,
        "failover_timeout": info.failover_timeout,
        "checkpoint": info.checkpoint,
        "hostname": info.hostname or "",
        "role": info.role or "*",
        "roles": info.effective_roles(),
        "principal": info.principal or "",
        "capabilities": [c.type for c in info.capabilities],
        "executors": [_executor_json(e) for e in framework.executors.values()],
        "completed_executors": [_executor_json(e) for e in framework.completed_executors],
    }


def state_json(agent: Agent) -> Json:
    info = agent.info
    # The web UI shows the agent's LOG link where the state names a log_dir, as Mesos's.
    log_dir = {"log_dir": agent.flags.parsed.log_dir} if agent.flags.parsed.get("log_dir") else {}
    return {
        "version": MESOS_VERSION,
        "start_time": agent.start_time,
        "id": info.id.value if info.id else "",
        "pid": agent.pid,
        "hostname": info.hostname,
        "capabilities": list(CAPABILITIES),
        "resources": _summary(info.resources),
        "reserved_resources": {},
        "unreserved_resources": _summary(info.resources),
        "attributes": attributes_json(info.attributes),
        "master_hostname": agent.master_info.hostname if agent.master_info else "",
        **log_dir,
        "flags": agent.flags.parsed.as_strings(),
        "frameworks": [_framework_json(f) for f in agent.frameworks.values()],
        "completed_frameworks": [_framework_json(f) for f in agent.completed_frameworks],
    }


def install(router: Router, agent: Agent) -> None:
    async def state(request: web.Request) -> web.StreamResponse:
        require_recovered(agent)
        seen = authorize.viewer(agent, request)
        body = state_json(agent)
        return jsonp_response(request, msgspec.json.decode(seen.encode(body)) if seen else body)

    async def health(request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def version(request: web.Request) -> web.StreamResponse:
        return jsonp_response(
            request,
            {
                "version": MESOS_VERSION,
                "build_date": "",
                "build_time": 0,
                "build_user": "",
            },
        )

    async def flags(request: web.Request) -> web.StreamResponse:
        require(agent.authorizer, request, "view_flags")
        return jsonp_response(request, {"flags": agent.flags.parsed.as_strings()})

    async def containers(request: web.Request) -> web.StreamResponse:
        require_recovered(agent)
        listed = await list_containers(agent, show_nested=False, show_standalone=False)
        wanted = request.query.get("container_id")  # Mesos's one filter here
        body = [v0_container(e) for e in listed if wanted in (None, e.container_id.value)]
        seen = authorize.viewer(agent, request)
        # The viewer judges the items of a list it knows by name: `containers`.
        return jsonp_response(request, seen.filter({"containers": body})["containers"] if seen else body)

    async def statistics(request: web.Request) -> web.StreamResponse:
        # Mesos's ResourceUsage: the executors whose usage the containerizer has.
        require(agent.authorizer, request, "get_endpoints", "/monitor/statistics")
        require_recovered(agent)
        listed = await list_containers(agent, show_nested=False, show_standalone=False)
        body = [
            {k: v for k, v in v0_container(entry).items() if k not in ("container_id", "status")}
            for entry in listed
            if entry.executor is not None and entry.statistics is not None
        ]
        return jsonp_response(request, body)

    async def metrics_snapshot(request: web.Request) -> web.StreamResponse:
        metrics_timeout(request)
        return jsonp_response(request, metrics(agent))

    router.add("/state", state, methods=("GET",), realm="mesos-agent-readonly")
    router.add("/state.json", state, methods=("GET",), realm="mesos-agent-readonly")
    router.add("/health", health, methods=("GET",))
    router.add("/version", version, methods=("GET",))
    router.add("/flags", flags, methods=("GET",), realm="mesos-agent-readonly")
    router.add("/containers", containers, methods=("GET",), realm="mesos-agent-readonly")
    for path in ("/monitor/statistics", "/monitor/statistics.json"):
        router.add(path, statistics, methods=("GET",), realm="mesos-agent-readonly")
    router.add(
        "/metrics/snapshot", metrics_snapshot, methods=("GET",), realm="mesos-agent-readonly"
    )
