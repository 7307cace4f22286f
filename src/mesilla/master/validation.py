"""Validation of scheduler input as Mesos's `src/master/validation.cpp` does it.

Every function returns when the input is valid and raises otherwise: a
`BadRequest` (400) whose message names the object at fault and whose `field`
names the field. The caller decides what an error becomes: a 400 answer
(`mesilla.common.http`), an ERROR event (a refused SUBSCRIBE), TASK_ERROR
with REASON_TASK_INVALID / REASON_TASK_GROUP_INVALID (`InvalidTask`), or
TASK_DROPPED / TASK_LOST with REASON_INVALID_OFFERS (`InvalidOffers`).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field

import msgspec

from mesilla.common.errors import BadRequest
from mesilla.common.resources import Resources, ResourcesError, to_fixed
from mesilla.common.validation import validate_ids
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import ExecutorInfo, FrameworkInfo, Offer, Resource, TaskGroupInfo, TaskInfo

# The least a task group's executor may have (Mesos's MIN_CPUS and MIN_MEM).
MIN_EXECUTOR_CPUS = 0.01
MIN_EXECUTOR_MEM_MB = 32


# --- identifiers and roles ---------------------------------------------------------------


# Whitespace and DEL, as Mesos's roles::validate refuses them.
_ROLE_INVALID_CHARACTERS = frozenset("\t\n\v\f\r \x7f")


def validate_role(role: str, field: str = "role") -> None:
    """Raises `BadRequest` if `role` is not a valid role name, by Mesos's rules (`roles::validate`)."""
    if role == "*":
        return
    if role.startswith("/"):
        raise BadRequest(f"Role '{role}' cannot start with a slash", field=field)
    if role.endswith("/"):
        raise BadRequest(f"Role '{role}' cannot end with a slash", field=field)
    if "//" in role:
        raise BadRequest(f"Role '{role}' cannot contain two adjacent slashes", field=field)
    if not role:
        raise BadRequest("Role names cannot be the empty string", field=field)
    for part in role.split("/"):
        if part in (".", "..", "*"):
            raise BadRequest(f"Role '{role}' cannot include '{part}' as a component", field=field)
        if part.startswith("-"):
            raise BadRequest(f"Role component '{part}' is invalid because it starts with a dash", field=field)
        if not _ROLE_INVALID_CHARACTERS.isdisjoint(part):
            raise BadRequest(
                f"Role component '{part}' is invalid because it contains backspace or whitespace", field=field
            )


# --- frameworks ----------------------------------------------------------------------------


def validate_framework_info(info: FrameworkInfo, suppressed_roles: Iterable[str] = ()) -> None:
    """A SUBSCRIBE's or UPDATE_FRAMEWORK's FrameworkInfo and suppressed roles."""
    multi_role = info.has_capability("MULTI_ROLE")
    if multi_role and info.role is not None:
        raise BadRequest(
            "'FrameworkInfo.role' must not be set when the MULTI_ROLE capability is declared; use 'roles'",
            field="framework_info.role",
        )
    if not multi_role and info.roles:
        raise BadRequest(
            "'FrameworkInfo.roles' needs the MULTI_ROLE capability; use 'role' otherwise",
            field="framework_info.roles",
        )
    roles = info.effective_roles()
    field = "framework_info.roles" if multi_role else "framework_info.role"
    if len(set(roles)) != len(roles):
        raise BadRequest(f"'FrameworkInfo.roles' contains duplicates: {roles}", field=field)
    for role in roles:
        try:
            validate_role(role, field)
        except BadRequest as exc:
            what = (
                "'FrameworkInfo.roles' contains invalid role"
                if multi_role
                else "'FrameworkInfo.role' is not a valid role"
            )
            raise BadRequest(f"{what}: {exc.reason}", field=field) from exc
    if info.failover_timeout < 0:
        raise BadRequest(
            f"'FrameworkInfo.failover_timeout' must not be negative, got {info.failover_timeout}",
            field="framework_info.failover_timeout",
        )
    unknown = sorted(set(suppressed_roles) - set(roles))
    if unknown:
        raise BadRequest(
            f"suppressed role(s) {', '.join(unknown)} are not among the framework's roles {roles}",
            field="suppressed_roles",
        )


def validate_framework_update(old: FrameworkInfo, new: FrameworkInfo) -> None:
    """UPDATE_FRAMEWORK may not change the framework's identity, principal, user or checkpointing."""
    if new.id != old.id:
        raise BadRequest("'FrameworkInfo.id' must be set to the framework's id", field="framework_info.id")
    for name in ("principal", "user", "checkpoint"):
        before, after = getattr(old, name), getattr(new, name)
        if after != before:
            raise BadRequest(
                f"'FrameworkInfo.{name}' cannot be changed (from {before!r} to {after!r})",
                field=f"framework_info.{name}",
            )


# --- scheduler calls ---------------------------------------------------------------------

_CALL_FIELDS = {
    sched.CallType.SUBSCRIBE: "subscribe",
    sched.CallType.ACCEPT: "accept",
    sched.CallType.DECLINE: "decline",
    sched.CallType.ACCEPT_INVERSE_OFFERS: "accept_inverse_offers",
    sched.CallType.DECLINE_INVERSE_OFFERS: "decline_inverse_offers",
    sched.CallType.KILL: "kill",
    sched.CallType.SHUTDOWN: "shutdown",
    sched.CallType.ACKNOWLEDGE: "acknowledge",
    sched.CallType.ACKNOWLEDGE_OPERATION_STATUS: "acknowledge_operation_status",
    sched.CallType.RECONCILE: "reconcile",
    sched.CallType.RECONCILE_OPERATIONS: "reconcile_operations",
    sched.CallType.MESSAGE: "message",
    sched.CallType.REQUEST: "request",
    sched.CallType.UPDATE_FRAMEWORK: "update_framework",
}


def _without_launches(call: sched.Call) -> sched.Call:
    """The call less the tasks and executors its ACCEPT launches: as in Mesos, their ids
    are checked with the rest of each task, and an invalid one is the task's TASK_ERROR."""
    if call.accept is None:
        return call
    operations = [
        msgspec.structs.replace(op, launch=None, launch_group=None) for op in call.accept.operations
    ]
    return msgspec.structs.replace(call, accept=msgspec.structs.replace(call.accept, operations=operations))


def validate_call(call: sched.Call) -> None:
    """The shape of a scheduler Call: its type's field present, every id valid, framework ids consistent.

    The message is what follows Mesos's "Failed to validate scheduler::Call: ".
    """
    if call.type is sched.CallType.UNKNOWN:
        raise BadRequest("Expecting 'type' to be present and known", field="type")
    validate_ids(_without_launches(call))  # its message names the id's field path
    name = _CALL_FIELDS.get(call.type)
    if name is not None and getattr(call, name) is None:
        raise BadRequest(f"Expecting '{name}' to be present", field=name)
    if call.type is sched.CallType.SUBSCRIBE:
        assert call.subscribe is not None
        info_id = call.subscribe.framework_info.id
        if info_id is not None and call.framework_id != info_id:
            raise BadRequest(
                "'framework_id' differs from 'subscribe.framework_info.id'", field="framework_id"
            )
        return
    if call.framework_id is None:
        raise BadRequest("Expecting 'framework_id' to be present", field="framework_id")
    if call.type is sched.CallType.ACKNOWLEDGE:
        assert call.acknowledge is not None
        if len(call.acknowledge.uuid) != 16:
            raise BadRequest(
                "Failed to parse 'acknowledge.uuid': expecting the 16 bytes of a UUID",
                field="acknowledge.uuid",
            )
    if call.type is sched.CallType.UPDATE_FRAMEWORK:
        assert call.update_framework is not None
        if call.update_framework.framework_info.id != call.framework_id:
            raise BadRequest(
                "'framework_id' differs from 'update_framework.framework_info.id'", field="framework_id"
            )


# --- offers ----------------------------------------------------------------------------------


class InvalidOffers(BadRequest):
    """The offers of an ACCEPT cannot be used; its tasks are answered TASK_DROPPED or TASK_LOST."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, field="accept.offer_ids")


def validate_offers(
    offer_ids: list[str],
    offers: dict[str, Offer],
    framework_id: str,
    agent_connected: Callable[[str], bool],
) -> None:
    """The offers of one ACCEPT: outstanding, the framework's own, one agent, one role."""
    if not offer_ids:
        raise InvalidOffers("No offers specified")
    if len(set(offer_ids)) != len(offer_ids):
        raise InvalidOffers(f"Duplicate offer ids in {offer_ids}")
    chosen = []
    for offer_id in offer_ids:
        offer = offers.get(offer_id)
        if offer is None:
            raise InvalidOffers(f"Offer {offer_id} is no longer valid")
        if offer.framework_id.value != framework_id:
            raise InvalidOffers(f"Offer {offer_id} was not made to framework {framework_id}")
        chosen.append(offer)
    if len({o.agent_id.value for o in chosen}) > 1:
        raise InvalidOffers("Aggregated offers must belong to one single agent")
    roles = {o.allocation_info.role if o.allocation_info else None for o in chosen}
    if len(roles) > 1:
        raise InvalidOffers("Aggregated offers must be allocated to the same role")
    if not agent_connected(chosen[0].agent_id.value):
        raise InvalidOffers(f"Agent {chosen[0].agent_id.value} is not connected")


# --- tasks -------------------------------------------------------------------------------------


@dataclass
class LaunchContext:
    """What task validation checks against, updated as an ACCEPT launches tasks one by one."""

    framework_id: str
    agent_id: str
    available: Resources
    #: Ids of tasks launched earlier in this ACCEPT.
    task_ids: set[str] = field(default_factory=set)
    #: The framework's live task ids (e.g. its `tasks` dict), looked up, never copied.
    live_task_ids: tuple[Container[str], ...] = ()
    #: executor_id -> ExecutorInfo of the framework's executors on the agent (running or launched).
    executors: dict[str, ExecutorInfo] = field(default_factory=dict)
    #: The role the offers were allocated to.
    role: str | None = None


class InvalidTask(BadRequest):
    """A task (or task group) that cannot be launched; the message, which says why, is its
    TASK_ERROR's."""


def _resources(kind: str, resources: list[Resource]) -> Resources:
    try:
        return Resources.from_list(resources)
    except ResourcesError as exc:
        raise InvalidTask(f"BadRequest {kind} resources: {exc}", field="resources") from exc


def _validate_executor(executor: ExecutorInfo, ctx: LaunchContext) -> None:
    executor_id = executor.executor_id.value
    try:
        validate_ids(executor)
    except BadRequest as exc:
        raise InvalidTask(
            f"Executor has an invalid id: {exc.reason}", field="executor.executor_id"
        ) from exc
    if executor.framework_id is not None and executor.framework_id.value != ctx.framework_id:
        raise InvalidTask(
            f"ExecutorInfo has an invalid FrameworkID (Actual: {executor.framework_id.value} "
            f"vs Expected: {ctx.framework_id})",
            field="executor.framework_id",
        )
    if executor.type == "CUSTOM" and executor.command is None:
        raise InvalidTask(f"Executor {executor_id} of type CUSTOM needs 'command'", field="executor.command")
    if executor.type == "DEFAULT":
        _validate_default_executor(executor)
    grace = executor.shutdown_grace_period
    if grace is not None and grace.nanoseconds < 0:
        raise InvalidTask(
            f"Executor {executor_id}'s shutdown_grace_period must not be negative",
            field="executor.shutdown_grace_period",
        )
    _resources("executor", executor.resources)
    existing = ctx.executors.get(executor_id)
    if existing is not None and _comparable(existing) != _comparable(executor):
        raise InvalidTask(
            f"ExecutorInfo for executor {executor_id} is not compatible with "
            "the one it already runs with: use a new executor id",
            field="executor",
        )


def _validate_default_executor(executor: ExecutorInfo) -> None:
    executor_id = executor.executor_id.value
    if executor.command is not None:
        raise InvalidTask(
            f"Executor {executor_id} of type DEFAULT must not set 'command'", field="executor.command"
        )
    container = executor.container
    if container is not None and container.type != "MESOS":
        raise InvalidTask(
            f"Executor {executor_id} of type DEFAULT must use a MESOS container",
            field="executor.container.type",
        )
    if container is not None and container.mesos is not None and container.mesos.image is not None:
        raise InvalidTask(
            f"Executor {executor_id} of type DEFAULT must not set "
            "'container.mesos.image': give the image to its tasks",
            field="executor.container.mesos.image",
        )


def _comparable(executor: ExecutorInfo) -> ExecutorInfo:
    return msgspec.structs.replace(executor, framework_id=None)


def _validate_task_basics(task: TaskInfo, ctx: LaunchContext) -> Resources:
    """The task's resources, or `InvalidTask`."""
    try:
        validate_ids(task)
    except BadRequest as exc:
        raise InvalidTask(f"Task has an invalid id: {exc.reason}", field="task_id") from exc
    task_id = task.task_id.value
    if task_id in ctx.task_ids or any(task_id in ids for ids in ctx.live_task_ids):
        raise InvalidTask(f"Task has duplicate ID: {task_id}", field="task_id")
    if task.agent_id.value != ctx.agent_id:
        raise InvalidTask(
            f"Task uses agent {task.agent_id.value} but the offer is for agent {ctx.agent_id}",
            field="agent_id",
        )
    if task.kill_policy and task.kill_policy.grace_period and task.kill_policy.grace_period.nanoseconds < 0:
        raise InvalidTask(
            "Task's 'kill_policy.grace_period' must not be negative", field="kill_policy.grace_period"
        )
    if task.max_completion_time is not None and task.max_completion_time.nanoseconds < 0:
        raise InvalidTask("Task's 'max_completion_time' must not be negative", field="max_completion_time")
    if task.command is not None and task.command.value is None:
        raise InvalidTask("Task's 'command.value' must be set", field="command.value")
    if task.container is not None and task.container.type == "DOCKER" and task.container.docker is None:
        raise InvalidTask("Task's DOCKER container needs 'container.docker'", field="container.docker")
    resources = _resources("task", task.resources)
    if not resources:
        raise InvalidTask("Task uses no resources", field="resources")
    return resources


def check_task(task: TaskInfo, ctx: LaunchContext) -> Resources:
    """A task of a LAUNCH operation: what it takes from the offer (its resources plus a
    new executor's), or `InvalidTask`."""
    resources = _validate_task_basics(task, ctx)
    if (task.executor is None) == (task.command is None):
        raise InvalidTask(
            "Task should have at least one (but not both) of CommandInfo or ExecutorInfo present",
            field="executor",
        )
    needed = resources
    if task.executor is not None:
        _validate_executor(task.executor, ctx)
        # A DEFAULT executor runs task groups only (LAUNCH_GROUP).
        if task.executor.type not in ("CUSTOM", "UNKNOWN"):
            raise InvalidTask(
                "'ExecutorInfo.type' must be 'CUSTOM' in a LAUNCH operation: use LAUNCH_GROUP",
                field="executor.type",
            )
        if task.executor.command is None:
            raise InvalidTask("'ExecutorInfo.command' must be set", field="executor.command")
        if task.executor.executor_id.value not in ctx.executors:
            needed = needed + Resources.from_list(task.executor.resources)
    if not ctx.available.contains(needed):
        raise InvalidTask(
            f"Task uses more resources {needed} than available {ctx.available}", field="resources"
        )
    return needed


def check_task_group(executor: ExecutorInfo, group: TaskGroupInfo, ctx: LaunchContext) -> Resources:
    """A LAUNCH_GROUP operation, whole: what the group and a new executor take from the
    offer, or `InvalidTask`."""
    if not group.tasks:
        raise InvalidTask("Task group must not be empty", field="task_group.tasks")
    if executor.type not in ("DEFAULT", "CUSTOM"):
        raise InvalidTask("'ExecutorInfo.type' must be set to DEFAULT or CUSTOM", field="executor.type")
    _validate_executor(executor, ctx)
    executor_resources = Resources.from_list(executor.resources)
    if executor.executor_id.value not in ctx.executors:
        _check_executor_minimum(executor, executor_resources)
    seen: set[str] = set()
    share_cgroups: set[bool] = set()
    needed = Resources()
    for task in group.tasks:
        needed = needed + _check_group_task(task, executor, ctx, seen)
        linux = task.container.linux_info if task.container is not None else None
        share_cgroups.add(True if linux is None or linux.share_cgroups is None else linux.share_cgroups)
    if len(share_cgroups) > 1:
        raise InvalidTask(
            "All tasks of a group must use the same 'container.linux_info.share_cgroups'",
            field="container.linux_info.share_cgroups",
        )
    if executor.executor_id.value not in ctx.executors:
        needed = needed + executor_resources
    if not ctx.available.contains(needed):
        raise InvalidTask(
            f"Task group and executor use more resources {needed} than available {ctx.available}",
            field="resources",
        )
    return needed


def _check_executor_minimum(executor: ExecutorInfo, resources: Resources) -> None:
    """A group's new executor needs Mesos's least cpus and mem, and some disk."""
    executor_id = executor.executor_id.value
    if resources.scalar_fixed("cpus") < to_fixed(MIN_EXECUTOR_CPUS):
        raise InvalidTask(
            f"Executor {executor_id} needs at least {MIN_EXECUTOR_CPUS} cpus", field="executor.resources"
        )
    if resources.scalar_fixed("mem") < to_fixed(MIN_EXECUTOR_MEM_MB):
        raise InvalidTask(
            f"Executor {executor_id} needs at least {MIN_EXECUTOR_MEM_MB} MB of mem",
            field="executor.resources",
        )
    if resources.scalar_fixed("disk") <= 0:
        raise InvalidTask(f"Executor {executor_id} needs some disk", field="executor.resources")


def _check_group_task(
    task: TaskInfo, executor: ExecutorInfo, ctx: LaunchContext, seen: set[str]
) -> Resources:
    """One task of a group: its resources, or `InvalidTask` naming it."""
    task_id = task.task_id.value
    try:
        resources = _validate_task_basics(task, ctx)
    except InvalidTask as exc:
        raise InvalidTask(f"Task {task_id}: {exc.reason}", field=exc.field) from exc
    if task_id in seen:
        raise InvalidTask(f"Task group has duplicate task ID: {task_id}", field="task_id")
    seen.add(task_id)
    if task.executor is not None and _comparable(task.executor) != _comparable(executor):
        raise InvalidTask(
            f"The ExecutorInfo of task {task_id} differs from the group's "
            f"executor {executor.executor_id.value}: leave 'TaskInfo.executor' unset",
            field="executor",
        )
    if task.container is not None and (task.container.type == "DOCKER" or task.container.docker):
        raise InvalidTask(
            f"Task {task_id}: tasks of a group cannot use a DOCKER container", field="container"
        )
    if (
        task.container is not None
        and task.container.network_infos
        and (task.health_check or {}).get("type") in ("HTTP", "TCP")
    ):
        raise InvalidTask(
            f"Task {task_id} joins its own network: HTTP and TCP health checks "
            "run in the executor's network and cannot reach it",
            field="health_check",
        )
    linux = task.container.linux_info if task.container is not None else None
    shares = True if linux is None or linux.share_cgroups is None else linux.share_cgroups
    if task.limits and shares:
        raise InvalidTask(
            f"Task {task_id} sets 'limits', which needs 'container.linux_info.share_cgroups' to be false",
            field="limits",
        )
    return resources
