"""Validation of scheduler input as Mesos's `src/master/validation.cpp` does it.

Every function returns None when the input is valid, else a message that names
the object at fault; the caller decides what an error becomes (a 400, an
ERROR event, TASK_ERROR with REASON_TASK_INVALID / REASON_TASK_GROUP_INVALID,
or TASK_DROPPED / TASK_LOST with REASON_INVALID_OFFERS).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field

import msgspec

from mesilla.common.resources import Resources, ResourcesError, to_fixed
from mesilla.common.validation import validate_ids
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import ExecutorInfo, FrameworkInfo, Offer, TaskGroupInfo, TaskInfo

# The least a task group's executor may have (Mesos's MIN_CPUS and MIN_MEM).
MIN_EXECUTOR_CPUS = 0.01
MIN_EXECUTOR_MEM_MB = 32


# --- identifiers and roles ---------------------------------------------------------------


# Whitespace and DEL, as Mesos's roles::validate refuses them.
_ROLE_INVALID_CHARACTERS = frozenset("\t\n\v\f\r \x7f")


def validate_role(role: str) -> str | None:
    """Why `role` is not a valid role name, by Mesos's rules (`roles::validate`), or None."""
    if role == "*":
        return None
    if role.startswith("/"):
        return f"Role '{role}' cannot start with a slash"
    if role.endswith("/"):
        return f"Role '{role}' cannot end with a slash"
    if "//" in role:
        return f"Role '{role}' cannot contain two adjacent slashes"
    if not role:
        return "Role names cannot be the empty string"
    for part in role.split("/"):
        if part in (".", "..", "*"):
            return f"Role '{role}' cannot include '{part}' as a component"
        if part.startswith("-"):
            return f"Role component '{part}' is invalid because it starts with a dash"
        if not _ROLE_INVALID_CHARACTERS.isdisjoint(part):
            return (
                f"Role component '{part}' is invalid because it contains backspace or whitespace"
            )
    return None


# --- frameworks ----------------------------------------------------------------------------


def validate_framework_info(
    info: FrameworkInfo, suppressed_roles: Iterable[str] = ()
) -> str | None:
    multi_role = info.has_capability("MULTI_ROLE")
    if multi_role and info.role is not None:
        return "'FrameworkInfo.role' must not be set when the MULTI_ROLE capability is declared; use 'roles'"
    if not multi_role and info.roles:
        return "'FrameworkInfo.roles' needs the MULTI_ROLE capability; use 'role' otherwise"
    roles = info.effective_roles()
    if len(set(roles)) != len(roles):
        return f"'FrameworkInfo.roles' contains duplicates: {roles}"
    for role in roles:
        error = validate_role(role)
        if error is not None:
            if multi_role:
                return f"'FrameworkInfo.roles' contains invalid role: {error}"
            return f"'FrameworkInfo.role' is not a valid role: {error}"
    if info.failover_timeout < 0:
        return f"'FrameworkInfo.failover_timeout' must not be negative, got {info.failover_timeout}"
    unknown = sorted(set(suppressed_roles) - set(roles))
    if unknown:
        return f"suppressed role(s) {', '.join(unknown)} are not among the framework's roles {roles}"
    return None


def validate_framework_update(old: FrameworkInfo, new: FrameworkInfo) -> str | None:
    """UPDATE_FRAMEWORK may not change the framework's identity, principal, user or checkpointing."""
    if new.id != old.id:
        return "'FrameworkInfo.id' must be set to the framework's id"
    for name in ("principal", "user", "checkpoint"):
        if getattr(new, name) != getattr(old, name):
            return f"'FrameworkInfo.{name}' cannot be changed (from {getattr(old, name)!r} to {getattr(new, name)!r})"
    return None


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
    return msgspec.structs.replace(
        call, accept=msgspec.structs.replace(call.accept, operations=operations)
    )


def validate_call(call: sched.Call) -> str | None:
    """The shape of a scheduler Call: its type's field present, every id valid, framework ids consistent."""
    if call.type is sched.CallType.UNKNOWN:
        return "Expecting 'type' to be present and known"
    error = validate_ids(_without_launches(call))
    if error is not None:
        return error
    name = _CALL_FIELDS.get(call.type)
    if name is not None and getattr(call, name) is None:
        return f"Expecting '{name}' to be present"
    if call.type is sched.CallType.SUBSCRIBE:
        assert call.subscribe is not None
        info_id = call.subscribe.framework_info.id
        if info_id is not None and call.framework_id != info_id:
            return "'framework_id' differs from 'subscribe.framework_info.id'"
        return None
    if call.framework_id is None:
        return "Expecting 'framework_id' to be present"
    if call.type is sched.CallType.ACKNOWLEDGE:
        assert call.acknowledge is not None
        if len(call.acknowledge.uuid) != 16:
            return (
                "Failed to parse 'acknowledge.uuid': expecting the 16 bytes of a UUID"
            )
    if call.type is sched.CallType.UPDATE_FRAMEWORK:
        assert call.update_framework is not None
        if call.update_framework.framework_info.id != call.framework_id:
            return "'framework_id' differs from 'update_framework.framework_info.id'"
    return None


# --- offers ----------------------------------------------------------------------------------


def validate_offers(
    offer_ids: list[str],
    offers: dict[str, Offer],
    framework_id: str,
    agent_connected: Callable[[str], bool],
) -> str | None:
    """The offers of one ACCEPT: outstanding, the framework's own, one agent, one role."""
    if not offer_ids:
        return "No offers specified"
    if len(set(offer_ids)) != len(offer_ids):
        return f"Duplicate offer ids in {offer_ids}"
    chosen = []
    for offer_id in offer_ids:
        offer = offers.get(offer_id)
        if offer is None:
            return f"Offer {offer_id} is no longer valid"
        if offer.framework_id.value != framework_id:
            return f"Offer {offer_id} was not made to framework {framework_id}"
        chosen.append(offer)
    if len({o.agent_id.value for o in chosen}) > 1:
        return "Aggregated offers must belong to one single agent"
    roles = {o.allocation_info.role if o.allocation_info else None for o in chosen}
    if len(roles) > 1:
        return "Aggregated offers must be allocated to the same role"
    if not agent_connected(chosen[0].agent_id.value):
        return f"Agent {chosen[0].agent_id.value} is not connected"
    return None


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


def _resources(kind: str, resources: list) -> Resources | str:  # type: ignore[type-arg]
    try:
        return Resources.from_list(resources)
    except ResourcesError as exc:
        return f"Invalid {kind} resources: {exc}"


def _validate_executor(executor: ExecutorInfo, ctx: LaunchContext) -> str | None:
    error = validate_ids(executor)
    if error is not None:
        return f"Executor has an invalid id: {error}"
    if (
        executor.framework_id is not None
        and executor.framework_id.value != ctx.framework_id
    ):
        return (
            f"ExecutorInfo has an invalid FrameworkID (Actual: {executor.framework_id.value} "
            f"vs Expected: {ctx.framework_id})"
        )
    if executor.type == "CUSTOM" and executor.command is None:
        return f"Executor {executor.executor_id.value} of type CUSTOM needs 'command'"
    if executor.type == "DEFAULT":
        if executor.command is not None:
            return f"Executor {executor.executor_id.value} of type DEFAULT must not set 'command'"
        container = executor.container
        if container is not None and container.type != "MESOS":
            return f"Executor {executor.executor_id.value} of type DEFAULT must use a MESOS container"
        if (
            container is not None
            and container.mesos is not None
            and container.mesos.image is not None
        ):
            return (
                f"Executor {executor.executor_id.value} of type DEFAULT must not set "
                "'container.mesos.image': give the image to its tasks"
            )
    grace = executor.shutdown_grace_period
    if grace is not None and grace.nanoseconds < 0:
        return f"Executor {executor.executor_id.value}'s shutdown_grace_period must not be negative"
    resources = _resources("executor", executor.resources)
    if isinstance(resources, str):
        return resources
    existing = ctx.executors.get(executor.executor_id.value)
    if existing is not None and _comparable(existing) != _comparable(executor):
        return (
            f"ExecutorInfo for executor {executor.executor_id.value} is not compatible with "
            "the one it already runs with: use a new executor id"
        )
    return None


def _comparable(executor: ExecutorInfo) -> ExecutorInfo:
    return msgspec.structs.replace(executor, framework_id=None)


class InvalidTask(ValueError):
    """A task (or task group) that cannot be launched; the message says why."""


def _validate_task_basics(task: TaskInfo, ctx: LaunchContext) -> str | Resources:
    """An error, or the task's resources."""
    error = validate_ids(task)
    if error is not None:
        return f"Task has an invalid id: {error}"
    task_id = task.task_id.value
    if task_id in ctx.task_ids or any(task_id in ids for ids in ctx.live_task_ids):
        return f"Task has duplicate ID: {task_id}"
    if task.agent_id.value != ctx.agent_id:
        return f"Task uses agent {task.agent_id.value} but the offer is for agent {ctx.agent_id}"
    if (
        task.kill_policy
        and task.kill_policy.grace_period
        and task.kill_policy.grace_period.nanoseconds < 0
    ):
        return "Task's 'kill_policy.grace_period' must not be negative"
    if (
        task.max_completion_time is not None
        and task.max_completion_time.nanoseconds < 0
    ):
        return "Task's 'max_completion_time' must not be negative"
    if task.command is not None and task.command.value is None:
        return "Task's 'command.value' must be set"
    if (
        task.container is not None
        and task.container.type == "DOCKER"
        and task.container.docker is None
    ):
        return "Task's DOCKER container needs 'container.docker'"
    resources = _resources("task", task.resources)
    if isinstance(resources, str):
        return resources
    if not resources:
        return "Task uses no resources"
    return resources


def check_task(task: TaskInfo, ctx: LaunchContext) -> Resources:
    """A task of a LAUNCH operation: what it takes from the offer (its resources plus a
    new executor's), or `InvalidTask`."""
    resources = _validate_task_basics(task, ctx)
    if isinstance(resources, str):
        raise InvalidTask(resources)
    if (task.executor is None) == (task.command is None):
        raise InvalidTask(
            "Task should have at least one (but not both) of CommandInfo or ExecutorInfo present"
        )
    needed = resources
    if task.executor is not None:
        error = _validate_executor(task.executor, ctx)
        if error is not None:
            raise InvalidTask(error)
        # A DEFAULT executor runs task groups only (LAUNCH_GROUP).
        if task.executor.type not in ("CUSTOM", "UNKNOWN"):
            raise InvalidTask(
                "'ExecutorInfo.type' must be 'CUSTOM' in a LAUNCH operation: use LAUNCH_GROUP"
            )
        if task.executor.command is None:
            raise InvalidTask("'ExecutorInfo.command' must be set")
        if task.executor.executor_id.value not in ctx.executors:
            needed = needed + Resources.from_list(task.executor.resources)
    if not ctx.available.contains(needed):
        raise InvalidTask(
            f"Task uses more resources {needed} than available {ctx.available}"
        )
    return needed


def validate_task(task: TaskInfo, ctx: LaunchContext) -> str | None:
    """`check_task` as a message (None when valid)."""
    try:
        check_task(task, ctx)
    except InvalidTask as exc:
        return str(exc)
    return None


def check_task_group(
    executor: ExecutorInfo, group: TaskGroupInfo, ctx: LaunchContext
) -> Resources:
    """A LAUNCH_GROUP operation, whole: what the group and a new executor take from the
    offer, or `InvalidTask`."""
    error = _task_group_error(executor, group, ctx)
    if isinstance(error, str):
        raise InvalidTask(error)
    return error


def validate_task_group(
    executor: ExecutorInfo, group: TaskGroupInfo, ctx: LaunchContext
) -> str | None:
    """`check_task_group` as a message (None when valid)."""
    try:
        check_task_group(executor, group, ctx)
    except InvalidTask as exc:
        return str(exc)
    return None


def _task_group_error(
    executor: ExecutorInfo, group: TaskGroupInfo, ctx: LaunchContext
) -> str | Resources:
    """An error, or what the group (and a new executor) needs."""
    if not group.tasks:
        return "Task group must not be empty"
    if executor.type not in ("DEFAULT", "CUSTOM"):
        return "'ExecutorInfo.type' must be set to DEFAULT or CUSTOM"
    error = _validate_executor(executor, ctx)
    if error is not None:
        return error
    executor_resources = Resources.from_list(executor.resources)
    if executor.executor_id.value not in ctx.executors:
        if executor_resources.scalar_fixed("cpus") < to_fixed(MIN_EXECUTOR_CPUS):
            return f"Executor {executor.executor_id.value} needs at least {MIN_EXECUTOR_CPUS} cpus"
        if executor_resources.scalar_fixed("mem") < to_fixed(MIN_EXECUTOR_MEM_MB):
            return f"Executor {executor.executor_id.value} needs at least {MIN_EXECUTOR_MEM_MB} MB of mem"
        if executor_resources.scalar_fixed("disk") <= 0:
            return f"Executor {executor.executor_id.value} needs some disk"
    seen: set[str] = set()
    share_cgroups: set[bool] = set()
    needed = Resources()
    for task in group.tasks:
        resources = _validate_task_basics(task, ctx)
        if isinstance(resources, str):
            return f"Task {task.task_id.value}: {resources}"
        if task.task_id.value in seen:
            return f"Task group has duplicate task ID: {task.task_id.value}"
        seen.add(task.task_id.value)
        if task.executor is not None and _comparable(task.executor) != _comparable(
            executor
        ):
            return (
                f"The ExecutorInfo of task {task.task_id.value} differs from the group's "
                f"executor {executor.executor_id.value}: leave 'TaskInfo.executor' unset"
            )
        if task.container is not None and (
            task.container.type == "DOCKER" or task.container.docker
        ):
            return f"Task {task.task_id.value}: tasks of a group cannot use a DOCKER container"
        if (
            task.container is not None
            and task.container.network_infos
            and (task.health_check or {}).get("type") in ("HTTP", "TCP")
        ):
            return (
                f"Task {task.task_id.value} joins its own network: HTTP and TCP health checks "
                "run in the executor's network and cannot reach it"
            )
        linux = task.container.linux_info if task.container is not None else None
        shares = (
            True
            if linux is None or linux.share_cgroups is None
            else linux.share_cgroups
        )
        share_cgroups.add(shares)
        if task.limits and shares:
            return (
                f"Task {task.task_id.value} sets 'limits', which needs "
                "'container.linux_info.share_cgroups' to be false"
            )
        needed = needed + resources
    if len(share_cgroups) > 1:
        return "All tasks of a group must use the same 'container.linux_info.share_cgroups'"
    if executor.executor_id.value not in ctx.executors:
        needed = needed + executor_resources
    if not ctx.available.contains(needed):
        return f"Task group and executor use more resources {needed} than available {ctx.available}"
    return needed
