"""ACCEPT: launching tasks and task groups on offered resources (Mesos's `Master::accept`).

Offers are checked first; if they are invalid, every task of the call is
answered TASK_DROPPED (PARTITION_AWARE frameworks) or TASK_LOST with
REASON_INVALID_OFFERS. Then operations run in order against the offers'
resources: an invalid task is answered TASK_ERROR (REASON_TASK_INVALID), an
invalid group fails whole (REASON_TASK_GROUP_INVALID). What is left goes back
to the allocator with the call's refuse filter.
"""

from __future__ import annotations

import logging

import msgspec

from mesilla.common.authentication import Principal
from mesilla.common.errors import BadRequest
from mesilla.common.resources import Resources, with_default_executor_resources
from mesilla.master.agent import Agent
from mesilla.master.authorize import task_user
from mesilla.master.base import MasterBase
from mesilla.master.framework import Framework
from mesilla.master.status_updates import master_status, task_state_metric
from mesilla.master.validation import (
    InvalidTask,
    LaunchContext,
    check_task,
    check_task_group,
    validate_offers,
)
from mesilla.v1 import internal
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import (
    ExecutorInfo,
    Filters,
    FrameworkID,
    LaunchGroup,
    Operation,
    OperationType,
    Reason,
    Task,
    TaskGroupInfo,
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
            raise BadRequest(
                f"Operation {index} of type LAUNCH_GROUP needs 'launch_group'"
            )


def _tasks_of(operations: list[Operation]) -> list[TaskInfo]:
    tasks: list[TaskInfo] = []
    for op in operations:
        if op.launch is not None:
            tasks.extend(op.launch.task_infos)
        if op.launch_group is not None:
            tasks.extend(op.launch_group.task_group.tasks)
    return tasks


def new_task_record(framework: Framework, task: TaskInfo) -> Task:
    """The master's Task for a TaskInfo; TASK_STAGING, with no statuses yet."""
    user = task.command.user if task.command is not None and task.command.user else None
    return Task(
        name=task.name,
        task_id=task.task_id,
        framework_id=FrameworkID(value=framework.id),
        agent_id=task.agent_id,
        state=TaskState.TASK_STAGING,
        resources=list(task.resources),
        executor_id=task.executor.executor_id if task.executor is not None else None,
        labels=task.labels,
        discovery=task.discovery,
        container=task.container,
        health_check=task.health_check,
        check=task.check,
        kill_policy=task.kill_policy,
        user=user or framework.info.user or None,
        limits=dict(task.limits),
    )


class LaunchMixin(MasterBase):
    async def accept(self, framework: Framework, call: sched.Accept) -> None:
        check_operations(call.operations)
        self.counters["master/messages_accept"] += 1
        offer_ids = [o.value for o in call.offer_ids]
        error = validate_offers(
            offer_ids, self.offers, framework.id, self._agent_connected
        )
        if error is not None:
            await self._reject_invalid_offers(
                framework, offer_ids, call.operations, error
            )
            return
        offers = [self.offers[offer_id] for offer_id in offer_ids]
        agent = self.agents[offers[0].agent_id.value]
        available = Resources()
        for offer in offers:
            available = available + Resources.from_list(offer.resources)
            self.remove_offer(offer, rescind=False, recover=False)
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
                self.counters["master/messages_launch_tasks"] += 1
                for task in op.launch.task_infos:
                    await self._launch_task(framework, agent, task, ctx)
            elif op.launch_group is not None:
                await self._launch_group(framework, agent, op.launch_group, ctx)
        if ctx.available:
            self.allocator.recover_resources(
                framework.id,
                agent.id,
                ctx.available,
                refuse_seconds=(call.filters or Filters()).refuse_seconds,
            )

    def _agent_connected(self, agent_id: str) -> bool:
        agent = self.agents.get(agent_id)
        return agent is not None and agent.connected

    async def _reject_invalid_offers(
        self,
        framework: Framework,
        offer_ids: list[str],
        operations: list[Operation],
        error: str,
    ) -> None:
        for offer_id in offer_ids:
            offer = self.offers.get(offer_id)
            if offer is not None and offer.framework_id.value == framework.id:
                self.remove_offer(offer, rescind=False)
        state = (
            TaskState.TASK_DROPPED if framework.partition_aware else TaskState.TASK_LOST
        )
        for task in _tasks_of(operations):
            self.counters[task_state_metric(state)] += 1
            await self.forward_update(
                framework,
                master_status(
                    task.task_id.value,
                    state,
                    Reason.REASON_INVALID_OFFERS,
                    f"Task launched with invalid offers: {error}",
                    agent_id=task.agent_id.value,
                ),
            )

    async def _task_error(
        self, framework: Framework, task: TaskInfo, reason: Reason, error: str
    ) -> None:
        self.counters[task_state_metric(TaskState.TASK_ERROR)] += 1
        await self.forward_update(
            framework,
            master_status(
                task.task_id.value,
                TaskState.TASK_ERROR,
                reason,
                error,
                agent_id=task.agent_id.value,
            ),
        )

    def _add_executor(
        self,
        framework: Framework,
        agent: Agent,
        executor: ExecutorInfo,
        ctx: LaunchContext,
    ) -> None:
        if executor.executor_id.value in ctx.executors:
            return
        ctx.executors[executor.executor_id.value] = executor
        agent.add_executor(framework.id, executor)
        framework.executors.setdefault(agent.id, {})[executor.executor_id.value] = (
            executor
        )

    def _add_task(
        self, framework: Framework, agent: Agent, task: TaskInfo, ctx: LaunchContext
    ) -> None:
        record = new_task_record(framework, task)
        framework.tasks[task.task_id.value] = record
        agent.add_task(record)
        ctx.task_ids.add(task.task_id.value)
        self.notify("TASK_ADDED", record)

    def _may_run(self, framework: Framework, task: TaskInfo) -> bool:
        """The run_tasks ACL, for the user the task would run as."""
        if self.authorizer is None:
            return True
        principal = Principal(framework.info.principal) if framework.info.principal else None
        return self.authorizer.authorized(principal, "run_tasks", task_user(task, framework.info))

    def _unauthorized(self, framework: Framework, task: TaskInfo) -> str:
        return (
            f"Task {task.task_id.value} is not authorized to launch: principal "
            f"'{framework.info.principal or ''}' may not run tasks as user "
            f"'{task_user(task, framework.info)}'"
        )

    async def _launch_task(
        self, framework: Framework, agent: Agent, task: TaskInfo, ctx: LaunchContext
    ) -> None:
        if task.executor is not None:
            executor = msgspec.structs.replace(
                task.executor, framework_id=FrameworkID(value=framework.id)
            )
            task = msgspec.structs.replace(task, executor=executor)
        if not self._may_run(framework, task):
            await self._task_error(framework, task, Reason.REASON_TASK_UNAUTHORIZED, self._unauthorized(framework, task))
            return
        try:
            needed = check_task(task, ctx)
        except InvalidTask as exc:
            log.info(
                "task %s of framework %s is invalid: %s",
                task.task_id.value,
                framework.id,
                exc,
            )
            await self._task_error(
                framework, task, Reason.REASON_TASK_INVALID, str(exc)
            )
            return
        ctx.available = ctx.available - needed
        if task.executor is not None:
            self._add_executor(framework, agent, task.executor, ctx)
        self._add_task(framework, agent, task, ctx)
        await agent.send(
            internal.AgentEvent(
                type=internal.AgentEventType.RUN_TASK,
                run_task=internal.RunTask(framework_info=framework.info, task=task),
            )
        )

    async def _launch_group(
        self, framework: Framework, agent: Agent, op: LaunchGroup, ctx: LaunchContext
    ) -> None:
        executor = msgspec.structs.replace(
            op.executor, framework_id=FrameworkID(value=framework.id)
        )
        if executor.type == "DEFAULT":
            executor.resources = with_default_executor_resources(executor.resources, ctx.role)
        refused = next((t for t in op.task_group.tasks if not self._may_run(framework, msgspec.structs.replace(t, executor=executor))), None)
        if refused is not None:
            reason = self._unauthorized(framework, msgspec.structs.replace(refused, executor=executor))
            for task in op.task_group.tasks:
                await self._task_error(framework, task, Reason.REASON_TASK_GROUP_UNAUTHORIZED, reason)
            return
        try:
            needed = check_task_group(executor, op.task_group, ctx)
        except InvalidTask as exc:
            log.info("task group of framework %s is invalid: %s", framework.id, exc)
            for task in op.task_group.tasks:
                await self._task_error(
                    framework, task, Reason.REASON_TASK_GROUP_INVALID, str(exc)
                )
            return
        tasks = [
            msgspec.structs.replace(t, executor=executor) for t in op.task_group.tasks
        ]
        ctx.available = ctx.available - needed
        self._add_executor(framework, agent, executor, ctx)
        for task in tasks:
            self._add_task(framework, agent, task, ctx)
        await agent.send(
            internal.AgentEvent(
                type=internal.AgentEventType.RUN_TASK_GROUP,
                run_task_group=internal.RunTaskGroup(
                    framework_info=framework.info,
                    executor_info=executor,
                    task_group=TaskGroupInfo(tasks=tasks),
                ),
            )
        )
