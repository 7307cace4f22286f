"""ACCEPT: launching tasks and task groups on offered resources (Mesos's `Master::accept`).

Offers are checked first; if they are invalid, every task of the call is
answered TASK_DROPPED (PARTITION_AWARE frameworks) or TASK_LOST with
REASON_INVALID_OFFERS. Then operations run in order against the offers'
resources: an invalid task is answered TASK_ERROR (REASON_TASK_INVALID), an
invalid group fails whole (REASON_TASK_GROUP_INVALID). Each valid task is
added (`Tasks.add`) and sent to its agent (`Outbox.run_task`,
`Outbox.run_task_group`). What is left goes back to the allocator with the
call's refuse filter.
"""

from __future__ import annotations

import logging

import msgspec

from mesilla.common.authentication import Principal
from mesilla.common.authorization import Authorizer
from mesilla.common.errors import BadRequest, Forbidden
from mesilla.common.resources import with_default_executor_resources
from mesilla.master.agent import Agent
from mesilla.master.authorize import task_user
from mesilla.master.framework import Framework
from mesilla.master.offers import Offerer
from mesilla.master.parts import Parts
from mesilla.master.tasks import (
    Tasks,
    inject_allocation_info,
    master_status,
    new_task_record,
    task_state_metric,
)
from mesilla.master.validation import (
    InvalidOffers,
    InvalidTask,
    LaunchContext,
    check_task,
    check_task_group,
    validate_offers,
)
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import (
    ExecutorInfo,
    Filters,
    FrameworkID,
    LaunchGroup,
    Operation,
    OperationType,
    Reason,
    TaskInfo,
    TaskState,
)

log = logging.getLogger(__name__)

_SUPPORTED = (OperationType.LAUNCH, OperationType.LAUNCH_GROUP)


def check_operations(operations: list[Operation]) -> None:
    """Rejects (400) operations Mesilla does not implement, before any offer is used."""
    for index, op in enumerate(operations):
        if op.type not in _SUPPORTED:
            raise BadRequest(
                f"Operation {index} of type {op.type.value} is not supported by Mesilla: "
                "only LAUNCH and LAUNCH_GROUP are"
            )
        if op.type is OperationType.LAUNCH and op.launch is None:
            raise BadRequest(f"Operation {index} of type LAUNCH needs 'launch'")
        if op.type is OperationType.LAUNCH_GROUP and op.launch_group is None:
            raise BadRequest(f"Operation {index} of type LAUNCH_GROUP needs 'launch_group'")


def _tasks_of(operations: list[Operation]) -> list[TaskInfo]:
    tasks: list[TaskInfo] = []
    for op in operations:
        if op.launch is not None:
            tasks.extend(op.launch.task_infos)
        if op.launch_group is not None:
            tasks.extend(op.launch_group.task_group.tasks)
    return tasks


def _with_executor(task: TaskInfo, executor: ExecutorInfo) -> TaskInfo:
    return msgspec.structs.replace(task, executor=executor)


class Launcher:
    def __init__(self, parts: Parts, offerer: Offerer, tasks: Tasks, authorizer: Authorizer | None) -> None:
        self._parts = parts
        self._offerer = offerer
        self._tasks = tasks
        self._authorizer = authorizer

    async def accept(self, framework: Framework, call: sched.Accept) -> None:
        check_operations(call.operations)
        self._parts.counters["master/messages_accept"] += 1
        offer_ids = [o.value for o in call.offer_ids]
        try:
            validate_offers(offer_ids, self._parts.book.offers, framework.id, self._agent_connected)
        except InvalidOffers as exc:
            await self._reject_invalid_offers(framework, offer_ids, call.operations, exc.reason)
            return
        offers, available = self._offerer.take(offer_ids)
        agent = self._parts.book.agents[offers[0].agent_id.value]
        ctx = LaunchContext(
            framework_id=framework.id,
            agent_id=agent.id,
            available=available,
            live_task_ids=(framework.tasks, framework.unreachable_tasks),
            executors=dict(agent.executors.get(framework.id, {})),
            role=offers[0].allocation_info.role if offers[0].allocation_info else None,
        )
        for op in call.operations:
            if op.launch is not None:
                self._parts.counters["master/messages_launch_tasks"] += 1
                for task in op.launch.task_infos:
                    await self._launch_task(framework, agent, task, ctx)
            elif op.launch_group is not None:
                await self._launch_group(framework, agent, op.launch_group, ctx)
        if ctx.available:
            self._parts.allocator.recover_resources(
                framework.id,
                agent.id,
                ctx.available,
                refuse_seconds=(call.filters or Filters()).refuse_seconds,
            )

    def _agent_connected(self, agent_id: str) -> bool:
        agent = self._parts.book.agents.get(agent_id)
        return agent is not None and agent.connected

    async def _reject_invalid_offers(
        self, framework: Framework, offer_ids: list[str], operations: list[Operation], error: str
    ) -> None:
        for offer_id in offer_ids:
            offer = self._parts.book.offers.get(offer_id)
            if offer is not None and offer.framework_id.value == framework.id:
                self._offerer.remove(offer, rescind=False)
        state = TaskState.TASK_DROPPED if framework.partition_aware else TaskState.TASK_LOST
        for task in _tasks_of(operations):
            self._parts.counters[task_state_metric(state)] += 1
            await self._parts.outbox.update(
                framework,
                master_status(
                    task.task_id.value,
                    state,
                    Reason.REASON_INVALID_OFFERS,
                    f"Task launched with invalid offers: {error}",
                    agent_id=task.agent_id.value,
                ),
            )

    async def _task_error(self, framework: Framework, task: TaskInfo, reason: Reason, error: str) -> None:
        self._parts.counters[task_state_metric(TaskState.TASK_ERROR)] += 1
        status = master_status(
            task.task_id.value, TaskState.TASK_ERROR, reason, error, agent_id=task.agent_id.value
        )
        await self._parts.outbox.update(framework, status)

    def _authorize(self, framework: Framework, task: TaskInfo) -> None:
        """Raises Forbidden, saying why, when the run_tasks ACL refuses the task for the user
        it would run as."""
        if self._authorizer is None:
            return
        info = framework.info
        principal = Principal(info.principal) if info.principal else None
        user = task_user(task, info)
        if not self._authorizer.authorized(principal, "run_tasks", user):
            raise Forbidden(
                f"Task {task.task_id.value} is not authorized to launch: principal "
                f"'{info.principal or ''}' may not run tasks as user '{user}'"
            )

    def _add(self, framework: Framework, agent: Agent, task: TaskInfo, ctx: LaunchContext) -> None:
        """Books a valid task (and its executor, if new on the agent) of this ACCEPT."""
        if task.executor is not None and task.executor.executor_id.value not in ctx.executors:
            ctx.executors[task.executor.executor_id.value] = task.executor
            self._tasks.add_executor(framework.id, agent.id, task.executor)
        ctx.task_ids.add(task.task_id.value)
        self._tasks.add(new_task_record(framework, task))

    async def _launch_task(
        self, framework: Framework, agent: Agent, task: TaskInfo, ctx: LaunchContext
    ) -> None:
        if task.executor is not None:
            executor = msgspec.structs.replace(task.executor, framework_id=FrameworkID(value=framework.id))
            task = _with_executor(task, executor)
        inject_allocation_info(task, ctx.role)
        try:
            self._authorize(framework, task)
        except Forbidden as exc:
            await self._task_error(framework, task, Reason.REASON_TASK_UNAUTHORIZED, exc.reason)
            return
        try:
            needed = check_task(task, ctx)
        except InvalidTask as exc:
            log.info("task %s of framework %s is invalid: %s", task.task_id.value, framework.id, exc)
            await self._task_error(framework, task, Reason.REASON_TASK_INVALID, exc.reason)
            return
        ctx.available = ctx.available - needed
        self._add(framework, agent, task, ctx)
        await self._parts.outbox.run_task(agent, framework.info, task)

    async def _launch_group(
        self, framework: Framework, agent: Agent, op: LaunchGroup, ctx: LaunchContext
    ) -> None:
        executor = msgspec.structs.replace(op.executor, framework_id=FrameworkID(value=framework.id))
        inject_allocation_info(executor, ctx.role)
        for task in op.task_group.tasks:
            inject_allocation_info(task, ctx.role)
        if executor.type == "DEFAULT":
            executor.resources = with_default_executor_resources(executor.resources, ctx.role)
        try:
            for task in op.task_group.tasks:
                self._authorize(framework, _with_executor(task, executor))
        except Forbidden as exc:
            for task in op.task_group.tasks:
                await self._task_error(framework, task, Reason.REASON_TASK_GROUP_UNAUTHORIZED, exc.reason)
            return
        try:
            needed = check_task_group(executor, op.task_group, ctx)
        except InvalidTask as exc:
            log.info("task group of framework %s is invalid: %s", framework.id, exc)
            for task in op.task_group.tasks:
                await self._task_error(framework, task, Reason.REASON_TASK_GROUP_INVALID, exc.reason)
            return
        tasks = [_with_executor(t, executor) for t in op.task_group.tasks]
        ctx.available = ctx.available - needed
        for task in tasks:
            self._add(framework, agent, task, ctx)
        await self._parts.outbox.run_task_group(agent, framework.info, executor, tasks)
