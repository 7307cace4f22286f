"""Task state on the master: status updates, acknowledgements, kills and reconciliation.

A task is TASK_STAGING from launch until its first update; `Task.statuses`
holds the real updates only (without their `data`). A terminal task gives its
resources back at once but stays in `Framework.tasks` until the framework
acknowledges the terminal update, as Mesos does; updates the master makes
itself (reconciliation, lost agents) carry no uuid and need no ACK.
"""

from __future__ import annotations

import logging
import time

import msgspec

from mesilla.common.resources import Resources
from mesilla.master.agent import Agent
from mesilla.master.base import MasterBase
from mesilla.master.framework import Framework
from mesilla.v1 import internal
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import (
    AgentID,
    ExecutorID,
    Reason,
    StatusSource,
    Task,
    TaskID,
    TaskState,
    TaskStatus,
    TimeInfo,
)

log = logging.getLogger(__name__)


def master_status(
    task_id: str,
    state: TaskState,
    reason: Reason,
    message: str,
    *,
    agent_id: str | None = None,
    executor_id: ExecutorID | None = None,
    unreachable_time: float | None = None,
) -> TaskStatus:
    """A status the master makes itself (SOURCE_MASTER, no uuid: frameworks do not ACK it)."""
    return TaskStatus(
        task_id=TaskID(value=task_id),
        state=state,
        source=StatusSource.SOURCE_MASTER,
        reason=reason,
        message=message,
        agent_id=AgentID(value=agent_id) if agent_id else None,
        executor_id=executor_id,
        timestamp=time.time(),
        unreachable_time=(
            TimeInfo(nanoseconds=int(unreachable_time * 1e9))
            if unreachable_time
            else None
        ),
    )


def task_state_metric(state: TaskState) -> str:
    """Mesos's counter of tasks that reached `state`, e.g. ``master/tasks_finished``."""
    return "master/tasks_" + state.value.removeprefix("TASK_").lower()


def _without_data(status: TaskStatus) -> TaskStatus:
    """Statuses kept in `Task.statuses` drop `data`, which may be large, as Mesos does."""
    return msgspec.structs.replace(status, data=None)


class StatusUpdatesMixin(MasterBase):
    # --- bookkeeping ----------------------------------------------------------------

    def update_task(
        self,
        task: Task,
        status: TaskStatus,
        latest: TaskState | None = None,
        *,
        recover: bool = True,
    ) -> None:
        """Applies `status` to `task`; `latest` is the agent's newest state when it is ahead."""
        was_terminal = task.state.terminal
        task.state = latest or status.state
        task.status_update_state = status.state
        task.status_update_uuid = status.uuid
        if status.uuid is None or all(s.uuid != status.uuid for s in task.statuses):
            task.statuses.append(_without_data(status))
        if task.state.terminal and not was_terminal:
            self.counters[task_state_metric(task.state)] += 1
            if recover:
                self.allocator.recover_resources(
                    task.framework_id.value,
                    task.agent_id.value,
                    Resources.from_list(task.resources),
                )
        self.notify("TASK_UPDATED", (task.framework_id, status, task.state))

    def remove_task(self, task: Task, *, unreachable: bool = False) -> None:
        """Drops a task from its agent; into `unreachable_tasks` or `completed_tasks` of its framework."""
        agent = self.agents.get(task.agent_id.value)
        if agent is not None:
            agent.remove_task(task)
        framework = self.frameworks.get(task.framework_id.value)
        if framework is None:
            return
        if unreachable:
            framework.tasks.pop(task.task_id.value, None)
            framework.unreachable_tasks[task.task_id.value] = task
        else:
            framework.complete_task(task)

    async def forward_update(self, framework: Framework, status: TaskStatus) -> None:
        if framework.connected:
            await framework.send(
                sched.Event(
                    type=sched.EventType.UPDATE, update=sched.Update(status=status)
                )
            )

    def recover_executor(
        self, agent: Agent, framework_id: str, executor_id: str
    ) -> Resources:
        executor = agent.remove_executor(framework_id, executor_id)
        framework = self.frameworks.get(framework_id)
        if framework is not None:
            framework.executors.get(agent.id, {}).pop(executor_id, None)
            if not framework.executors.get(agent.id, True):
                framework.executors.pop(agent.id, None)
        if executor is None:
            return Resources()
        resources = Resources.from_list(executor.resources)
        self.allocator.recover_resources(framework_id, agent.id, resources)
        return resources

    # --- from agents ---------------------------------------------------------------------

    async def status_update(self, agent: Agent, update: internal.StatusUpdate) -> None:
        """An agent's STATUS_UPDATE: record it and forward it to the framework as UPDATE."""
        self.counters["master/messages_status_update"] += 1
        status = update.status
        framework = self.frameworks.get(update.framework_id.value)
        if framework is None:
            self.counters["master/invalid_status_updates"] += 1
            if any(
                f.id == update.framework_id.value for f in self.completed_frameworks
            ):
                # The framework is gone for good: acknowledge so the agent stops retrying.
                await agent.acknowledge(
                    update.framework_id.value, status.task_id, status.uuid
                )
            log.warning(
                "dropping status update for task %s of unknown framework %s",
                status.task_id.value,
                update.framework_id.value,
            )
            return
        status.agent_id = AgentID(value=agent.id)
        task = framework.task(status.task_id.value)
        if task is not None:
            self.update_task(task, status, update.latest_state)
        self.counters["master/valid_status_updates"] += 1
        await self.forward_update(framework, status)

    # --- from frameworks ----------------------------------------------------------------

    async def acknowledge(self, framework: Framework, ack: sched.Acknowledge) -> None:
        """ACKNOWLEDGE: relayed to the agent; an acknowledged terminal task is removed."""
        self.counters["master/messages_status_update_acknowledgement"] += 1
        agent = self.agents.get(ack.agent_id.value)
        if agent is None or not agent.connected:
            self.counters["master/invalid_status_update_acknowledgements"] += 1
            log.warning(
                "cannot relay acknowledgement for task %s: agent %s is not connected",
                ack.task_id.value,
                ack.agent_id.value,
            )
            return
        task = framework.tasks.get(ack.task_id.value)
        if (
            task is not None
            and task.status_update_uuid == ack.uuid
            and task.status_update_state is not None
            and task.status_update_state.terminal
        ):
            self.remove_task(task)
        self.counters["master/valid_status_update_acknowledgements"] += 1
        await agent.acknowledge(framework.id, ack.task_id, ack.uuid)

    async def kill(self, framework: Framework, kill: sched.Kill) -> None:
        """KILL: to the task's agent; an unknown task is answered by reconciliation."""
        self.counters["master/messages_kill_task"] += 1
        task = framework.tasks.get(kill.task_id.value)
        if task is None:
            await self.reconcile(
                framework,
                [sched.ReconcileTask(task_id=kill.task_id, agent_id=kill.agent_id)],
            )
            return
        agent = self.agents.get(task.agent_id.value)
        if agent is None or not agent.connected:
            log.warning(
                "cannot kill task %s: its agent is not connected", kill.task_id.value
            )
            return
        await agent.send(
            internal.AgentEvent(
                type=internal.AgentEventType.KILL_TASK,
                kill_task=internal.KillTask(
                    framework_id=_fid(framework.id),
                    task_id=kill.task_id,
                    kill_policy=kill.kill_policy,
                ),
            )
        )

    async def reconcile(
        self, framework: Framework, tasks: list[sched.ReconcileTask]
    ) -> None:
        """RECONCILE: explicit for the given tasks, implicit (all tasks) when none are given."""
        self.counters["master/messages_reconcile_tasks"] += 1
        if not tasks:
            for task in [
                *framework.tasks.values(),
                *framework.unreachable_tasks.values(),
            ]:
                await self.forward_update(framework, self._latest_status(task))
            return
        for item in tasks:
            status = self._reconcile_one(framework, item)
            if status is not None:
                await self.forward_update(framework, status)

    def _latest_status(self, task: Task) -> TaskStatus:
        last = task.statuses[-1] if task.statuses else None
        status = master_status(
            task.task_id.value,
            task.status_update_state or task.state,
            Reason.REASON_RECONCILIATION,
            "Reconciliation: Latest task state",
            agent_id=task.agent_id.value,
            executor_id=task.executor_id,
        )
        if last is not None:
            status.healthy = last.healthy
            status.check_status = last.check_status
            status.container_status = last.container_status
            status.unreachable_time = last.unreachable_time
        return status

    def _reconcile_one(
        self, framework: Framework, item: sched.ReconcileTask
    ) -> TaskStatus | None:
        task = framework.task(item.task_id.value)
        if task is not None:
            return self._latest_status(task)
        agent_id = item.agent_id.value if item.agent_id else None
        if (agent_id and agent_id in self.recovered_agents) or (
            agent_id is None and self.recovered_agents
        ):
            # The task may be on an agent that has not re-registered yet: answer later.
            return None
        aware = framework.partition_aware
        unreachable_time = None
        if agent_id and agent_id in self.agents:
            state, message = (
                TaskState.TASK_GONE,
                "Reconciliation: Task is unknown to the agent",
            )
        elif agent_id and agent_id in self.unreachable_agents:
            state, message = (
                TaskState.TASK_UNREACHABLE,
                "Reconciliation: Task is unreachable",
            )
            unreachable_time = self.unreachable_agents[agent_id]
        elif agent_id and agent_id in self.gone_agents:
            state, message = (
                TaskState.TASK_GONE_BY_OPERATOR,
                "Reconciliation: Task is gone",
            )
        else:
            state, message = TaskState.TASK_UNKNOWN, "Reconciliation: Task is unknown"
        return master_status(
            item.task_id.value,
            state if aware else TaskState.TASK_LOST,
            Reason.REASON_RECONCILIATION,
            message,
            agent_id=agent_id,
            unreachable_time=unreachable_time,
        )


def _fid(framework_id: str) -> internal.FrameworkID:
    return internal.FrameworkID(value=framework_id)
