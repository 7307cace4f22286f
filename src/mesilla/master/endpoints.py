"""The master's v0 JSON endpoints (``/state``, ``/slaves``, ``/tasks``, ...) in Mesos's shapes.

Mesos's tools and UIs read these; the shapes and field names follow Mesos's
`src/master/readonly_handler.cpp` and the `json()` models of
`src/common/http.cpp`: times are seconds as doubles, resources are
``{"cpus": 1.0, "mem": 128.0, "ports": "[31000-31005]"}`` summaries,
capabilities are lists of names. Every endpoint takes ``?jsonp=callback``.
"""

from __future__ import annotations

import asyncio
import getpass
import inspect
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from aiohttp import web

import mesilla
from mesilla import MESOS_VERSION
from mesilla.common import documents, secrets
from mesilla.common.authorization import require
from mesilla.common.documents import Pieces
from mesilla.common.errors import BadRequest
from mesilla.common.http import Handler, Router, jsonp_response, metrics_timeout, numify
from mesilla.common.models import (
    attributes_json,
    labels_json,
    resources_json,
    task_json,
)
from mesilla.common.resources import Resources
from mesilla.master import authorize, metrics
from mesilla.master.agent import Agent
from mesilla.master.framework import Framework
from mesilla.v1 import codec
from mesilla.v1.mesos import (
    AgentInfo,
    CommandInfo,
    ExecutorInfo,
    Offer,
    Task,
    VersionInfo,
)

if TYPE_CHECKING:
    from mesilla.master.master import Master

# Mesos's default page size for `/tasks` (`TASK_LIMIT`).
TASK_LIMIT = 100
READONLY = "mesos-master-readonly"
# Seconds of rendering between two returns to the event loop, at most (about: one item
# is never split). Items vary a thousandfold (a task; a framework with its thousands),
# so the slice is timed rather than counted.
RENDER_SLICE = 0.01

T = TypeVar("T")


async def rendered(
    items: Iterable[T], render: Callable[[T], Any] | Callable[[T], Awaitable[Any]]
) -> Pieces:
    """Each item rendered, encoded as JSON and redacted, handing the event loop back every
    `RENDER_SLICE` seconds.

    At 10,000 agents `/state` and GET_STATE take hundreds of milliseconds;
    done in one go, every scheduler and agent stream would stall meanwhile.
    The items are taken first: the loop may change the collection between chunks
    (the answer is then as of the moment each item was rendered). Encoding each
    item on its own gives the very bytes of encoding the whole at once.
    """
    out: list[bytes] = []
    clock = time.perf_counter
    due = clock() + RENDER_SLICE
    for item in list(items):
        if clock() >= due:
            await asyncio.sleep(0)
            due = clock() + RENDER_SLICE
        value = render(item)
        if inspect.isawaitable(value):
            value = await value
        out.append(secrets.redact(codec.encode(value)))
    return Pieces(out)


def install(router: Router, master: Master) -> None:
    """Registers the v0 endpoints on the master's router."""
    # Mesos's read-only endpoints do not look at the method; GET and POST are what clients use.
    get = ("GET", "POST")

    def view(render: Any, action: str | None = None, obj: str | None = None) -> Handler:
        """`action`: what the principal must be authorized for (view_flags, get_endpoints)."""

        async def handler(request: web.Request) -> web.StreamResponse:
            if action is not None:
                require(master.authorizer, request, action, obj)
            body = render(master, request.query)
            if inspect.isawaitable(body):
                body = await body
            seen = authorize.viewer(master, request)
            if seen is not None:
                return jsonp_response(request, msgspec.json.decode(seen.encode(body)))
            return await documents.answer(request, body, jsonp=request.query.get("jsonp"))

        return handler

    for path in ("/state", "/state.json"):
        router.add(path, view(state), methods=get, realm=READONLY)
    router.add("/slaves", view(slaves), methods=get, realm=READONLY)
    router.add("/frameworks", view(frameworks), methods=get, realm=READONLY)
    router.add("/tasks", view(tasks), methods=get, realm=READONLY)
    router.add("/state-summary", view(state_summary), methods=get, realm=READONLY)
    router.add("/roles", view(roles), methods=get, realm=READONLY)
    flags = view(lambda master, _q: {"flags": master.flags.as_strings()}, "view_flags")
    router.add("/flags", flags, methods=get, realm=READONLY)
    router.add("/version", view(lambda _m, _q: version()), methods=get)
    snapshot = view(lambda master, _q: metrics.snapshot(master), "get_endpoints", "/metrics/snapshot")

    async def metrics_snapshot(request: web.Request) -> web.StreamResponse:
        metrics_timeout(request)
        return await snapshot(request)

    router.add("/metrics/snapshot", metrics_snapshot, methods=get, realm=READONLY)

    async def health(_request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def redirect(request: web.Request) -> web.Response:
        info = master.master_info
        host = info.address.hostname if info.address and info.address.hostname else info.hostname
        return web.Response(status=307, headers={"Location": f"//{host}:{info.port}"})

    router.add("/health", health, methods=get)
    router.add("/redirect", redirect, methods=get)


# --- version ---------------------------------------------------------------------------


def _build_time() -> float:
    """When this Mesilla was installed: the package's own modification time."""
    return Path(mesilla.__file__).stat().st_mtime


def version_info() -> VersionInfo:
    built = _build_time()
    return VersionInfo(
        version=MESOS_VERSION,
        build_date=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(built)),
        build_time=float(int(built)),
        build_user=_build_user(),
    )


def _build_user() -> str:
    try:
        return Path(mesilla.__file__).owner()
    except (KeyError, NotImplementedError):
        return getpass.getuser()


def version() -> dict[str, Any]:
    built: dict[str, Any] = msgspec.to_builtins(version_info())
    return built


# --- models --------------------------------------------------------------------------------


def command_json(command: CommandInfo | None) -> dict[str, object]:
    command = command or CommandInfo()
    out: dict[str, object] = {"shell": command.shell}
    if command.value is not None:
        out["value"] = command.value
    out["argv"] = list(command.arguments)
    if command.environment is not None:
        out["environment"] = msgspec.to_builtins(command.environment)
    out["uris"] = [{"value": u.value, "executable": bool(u.executable)} for u in command.uris]
    return out


def executor_json(executor: ExecutorInfo, framework_id: str, agent_id: str) -> dict[str, object]:
    out: dict[str, object] = {
        "executor_id": executor.executor_id.value,
        "name": executor.name or "",
        "framework_id": executor.framework_id.value if executor.framework_id else framework_id,
        "command": command_json(executor.command),
        "resources": resources_json(executor.resources),
    }
    if executor.resources and executor.resources[0].allocation_info is not None:
        out["role"] = executor.resources[0].allocation_info.role
    if executor.labels is not None:
        out["labels"] = labels_json(executor.labels)
    if executor.type != "UNKNOWN":
        out["type"] = executor.type
    out["slave_id"] = agent_id
    return out


def offer_json(offer: Offer) -> dict[str, object]:
    return {
        "id": offer.id.value,
        "framework_id": offer.framework_id.value,
        "allocation_info": msgspec.to_builtins(offer.allocation_info) if offer.allocation_info else {},
        "slave_id": offer.agent_id.value,
        "resources": resources_json(offer.resources),
    }


def agent_info_json(info: AgentInfo) -> dict[str, object]:
    out: dict[str, object] = {
        "id": info.id.value if info.id else "",
        "hostname": info.hostname,
        "port": info.port,
        "attributes": attributes_json(info.attributes),
    }
    if info.domain is not None:
        out["domain"] = info.domain
    return out


def agent_json(agent: Agent) -> dict[str, object]:
    total = agent.total_resources
    used = agent.total_used_resources()
    out = agent_info_json(agent.info)
    out["pid"] = agent.pid
    out["registered_time"] = agent.registered_time
    if agent.reregistered_time is not None:
        out["reregistered_time"] = agent.reregistered_time
    out["resources"] = resources_json(total)
    out["used_resources"] = resources_json(used)
    out["offered_resources"] = resources_json(agent.offered_resources())
    out["reserved_resources"] = {
        role: resources_json(total.reserved(role)) for role in sorted(total.roles() - {"*"})
    }
    out["unreserved_resources"] = resources_json(total.unreserved())
    out["active"] = agent.active
    out["deactivated"] = False
    out["version"] = agent.version or MESOS_VERSION
    out["capabilities"] = [c.type for c in agent.capabilities]
    return out


def _framework_fields(framework: Framework) -> dict[str, object]:
    """A framework's own fields in `/state`, without its tasks, offers and executors."""
    info = framework.info
    used = framework.total_used_resources()
    offered = framework.offered_resources()
    out: dict[str, object] = {
        "id": framework.id,
        "name": info.name,
        "used_resources": resources_json(used),
        "offered_resources": resources_json(offered),
        "capabilities": [c.type for c in info.capabilities],
        "hostname": info.hostname or "",
        "webui_url": info.webui_url or "",
        "active": framework.active,
        "connected": framework.connected,
        "recovered": framework.recovered,
        "user": info.user,
        "failover_timeout": info.failover_timeout,
        "checkpoint": info.checkpoint,
        "registered_time": framework.registered_time or 0.0,
        "unregistered_time": framework.unregistered_time or 0.0,
    }
    if info.principal is not None:
        out["principal"] = info.principal
    out["resources"] = resources_json(used + offered)
    if framework.reregistered_time is not None:
        out["reregistered_time"] = framework.reregistered_time
    if info.has_capability("MULTI_ROLE"):
        out["roles"] = list(info.roles)
    else:
        out["role"] = info.role or "*"
    return out


async def framework_json(framework: Framework) -> dict[str, object]:
    info = framework.info
    out = _framework_fields(framework)
    out["tasks"] = await rendered(framework.tasks.values(), task_json)
    out["unreachable_tasks"] = await rendered(framework.unreachable_tasks.values(), task_json)
    out["completed_tasks"] = await rendered(framework.completed_tasks, task_json)
    out["offers"] = await rendered(framework.offers.values(), offer_json)
    placed = (
        (agent_id, executor)
        for agent_id, by_id in framework.executors.items()
        for executor in by_id.values()
    )
    out["executors"] = await rendered(placed, lambda at: executor_json(at[1], framework.id, at[0]))
    if info.labels is not None:
        out["labels"] = labels_json(info.labels)
    out["offer_constraints"] = {}
    return out


# --- endpoints ----------------------------------------------------------------------------------


async def _slaves(master: Master, agent_id: str | None) -> dict[str, object]:
    return {
        "slaves": await rendered((a for a in master.agents.values() if agent_id in (None, a.id)), agent_json),
        "recovered_slaves": [
            agent_info_json(info)
            for a_id, info in master.recovered_agents.items()
            if agent_id in (None, a_id)
        ],
    }


async def slaves(master: Master, query: Any) -> dict[str, object]:
    return await _slaves(master, query.get("slave_id"))


async def frameworks(master: Master, query: Any) -> dict[str, object]:
    wanted = query.get("framework_id")
    return {
        "frameworks": await rendered(
            (f for f in master.frameworks.values() if wanted in (None, f.id)), framework_json
        ),
        "completed_frameworks": await rendered(
            (f for f in master.completed_frameworks if wanted in (None, f.id)), framework_json
        ),
        "unregistered_frameworks": [],
    }


async def state(master: Master, _query: Any) -> dict[str, object]:
    info = master.master_info
    out: dict[str, object] = version()
    out["start_time"] = master.start_time
    if master.elected_time is not None:
        out["elected_time"] = master.elected_time
    out.update(
        {
            "id": info.id,
            "pid": info.pid or "",
            "hostname": info.hostname or "",
            "capabilities": [c.type for c in info.capabilities],
            "activated_slaves": float(sum(1 for a in master.agents.values() if a.active)),
            "deactivated_slaves": float(sum(1 for a in master.agents.values() if not a.active)),
            "unreachable_slaves": float(len(master.unreachable_agents)),
            "leader": info.pid or "",
            "leader_info": {
                "id": info.id,
                "pid": info.pid or "",
                "port": info.port,
                "hostname": info.hostname or "",
            },
        }
    )
    # The web UI shows the master's LOG link where the state names a log_dir, as Mesos's.
    for name in ("cluster", "log_dir"):
        if master.flags.get(name):
            out[name] = master.flags.get(name)
    out["flags"] = master.flags.as_strings()
    out.update(await _slaves(master, None))
    out["frameworks"] = await rendered(master.frameworks.values(), framework_json)
    out["completed_frameworks"] = await rendered(master.completed_frameworks, framework_json)
    out["orphan_tasks"] = []
    out["unregistered_frameworks"] = []
    return out


def _count(query: Any, name: str, default: int) -> int:
    """`limit` or `offset` as Mesos reads them: an int cast to size_t, so a negative one is
    past any end (`limit=-1`, what avmesos-cli sends, is no limit). Mesos silently takes the
    default for a malformed number; Mesilla answers 400 naming it."""
    text = query.get(name)
    if text is None:
        return default
    try:
        value = numify(text)
    except ValueError as exc:
        raise BadRequest(f"Invalid '{name}' query parameter: {exc}, expecting an integer") from None
    return sys.maxsize if value < 0 else value


def tasks(master: Master, query: Any) -> dict[str, object]:
    """Tasks of all frameworks (live, unreachable, completed) by their first status's time."""
    limit = _count(query, "limit", TASK_LIMIT)
    offset = _count(query, "offset", 0)
    ascending = query.get("order") == "asc"
    framework_id, task_id = query.get("framework_id"), query.get("task_id")
    selected: list[Task] = []
    for framework in [*master.frameworks.values(), *master.completed_frameworks]:
        if framework_id not in (None, framework.id):
            continue
        every = [*framework.tasks.values(), *framework.unreachable_tasks.values(), *framework.completed_tasks]
        for task in every:
            if task_id in (None, task.task_id.value):
                selected.append(task)
    # Tasks without a status yet sort first when ascending, last when descending, as in Mesos.
    with_time = [t for t in selected if t.statuses]
    without = [t for t in selected if not t.statuses]
    with_time.sort(key=lambda t: t.statuses[0].timestamp or 0.0, reverse=not ascending)
    ordered = without + with_time if ascending else with_time + without
    return {"tasks": [task_json(t) for t in ordered[offset : offset + limit]]}


def known_roles(master: Master) -> dict[str, list[Framework]]:
    """Roles with a framework, a weight or a reservation -> their frameworks, as Mesos lists them."""
    roles: dict[str, list[Framework]] = {}
    for framework in master.frameworks.values():
        for role in framework.roles:
            roles.setdefault(role, []).append(framework)
    for role in master.allocator.weights:
        roles.setdefault(role, [])
    for agent in master.agents.values():
        for role in agent.total_resources.roles():
            roles.setdefault(role, [])
    return roles


# Task states counted per agent and per framework in `/state-summary`.
_SUMMARY_STATES = (
    "TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING", "TASK_FINISHED",
    "TASK_KILLED", "TASK_FAILED", "TASK_LOST", "TASK_ERROR", "TASK_UNREACHABLE",
)


def _state_counts(tasks: Iterable[Task]) -> dict[str, int]:
    counts = dict.fromkeys(_SUMMARY_STATES, 0)
    for task in tasks:
        if task.state.value in counts:
            counts[task.state.value] += 1
    return counts


def state_summary(master: Master, _query: Any) -> dict[str, object]:
    """The cluster at a glance: agents and frameworks with task counts and who runs where."""
    live = [t for f in master.frameworks.values() for t in [*f.tasks.values(), *f.unreachable_tasks.values()]]
    completed = [t for f in master.frameworks.values() for t in f.completed_tasks]
    by_agent: dict[str, list[Task]] = {}
    by_framework: dict[str, list[Task]] = {}
    for task in [*live, *completed]:
        by_agent.setdefault(task.agent_id.value, []).append(task)
        by_framework.setdefault(task.framework_id.value, []).append(task)
    # Who runs where, from one pass over the live tasks.
    framework_ids: dict[str, set[str]] = {}
    agent_ids: dict[str, set[str]] = {}
    for task in live:
        framework_ids.setdefault(task.agent_id.value, set()).add(task.framework_id.value)
        agent_ids.setdefault(task.framework_id.value, set()).add(task.agent_id.value)
    agents = []
    for agent in master.agents.values():
        out = agent_json(agent)
        out.update(_state_counts(by_agent.get(agent.id, [])))
        out["framework_ids"] = sorted(framework_ids.get(agent.id, ()))
        agents.append(out)
    frameworks = []
    for framework in master.frameworks.values():
        out = {k: v for k, v in _framework_fields(framework).items() if k in _FRAMEWORK_SUMMARY}
        out.update(_state_counts(by_framework.get(framework.id, [])))
        out["slave_ids"] = sorted(agent_ids.get(framework.id, ()))
        frameworks.append(out)
    summary: dict[str, object] = {"hostname": master.master_info.hostname or ""}
    if master.flags.get("cluster"):
        summary["cluster"] = master.flags.cluster
    summary["slaves"] = agents
    summary["frameworks"] = frameworks
    return summary


# The fields of a framework's summary (Mesos's `Summary<Framework>`).
_FRAMEWORK_SUMMARY = (
    "id", "name", "used_resources", "offered_resources", "capabilities", "hostname",
    "webui_url", "active", "connected", "recovered",
)


def _quantities(resources: Resources) -> dict[str, float]:
    """Scalar totals by name, as Mesos's ResourceQuantities print."""
    out: dict[str, float] = {}
    for name, _role, value in resources:
        if isinstance(value, int):
            out[name] = out.get(name, 0.0) + value / 1000
    return out


def roles(master: Master, _query: Any) -> dict[str, object]:
    """Every known role: weight, frameworks, and what is offered, allocated and reserved to it."""
    weights = master.allocator.weights
    out = []
    for role, frameworks in sorted(known_roles(master).items()):
        offered = Resources()
        for offer in master.offers.values():
            if offer.allocation_info is not None and offer.allocation_info.role == role:
                offered = offered + Resources.from_list(offer.resources)
        allocated = master.allocator.role_allocation(role) - offered
        reserved = Resources()
        for agent in master.agents.values():
            reserved = reserved + agent.total_resources.reserved(role)
        out.append(
            {
                "name": role,
                "weight": weights.get(role, 1.0),
                "quota": {"role": role, "guarantee": {}, "limit": {}, "consumed": _quantities(allocated)},
                "resources": _quantities(allocated + offered),
                "allocated": _quantities(allocated),
                "offered": _quantities(offered),
                "reserved": _quantities(reserved),
                "frameworks": [f.id for f in frameworks],
            }
        )
    return {"roles": out}
