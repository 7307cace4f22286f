"""Task state from the outside: agents' status updates, frameworks' acknowledgements, kills
and reconciliation (Mesos's `Master::statusUpdate`, `acknowledge`, `kill`, `reconcile`).

An agent's update is recorded (`Tasks.update`) and forwarded to the framework
as UPDATE; the framework's ACKNOWLEDGE goes back to the agent, and an
acknowledged terminal task leaves the live tasks. RECONCILE answers from the
book, with what the master knows of each task or its agent.
"""

from __future__ import annotations

import logging

from mesilla.master.agent import Agent
from mesilla.master.framework import Framework
from mesilla.master.parts import Parts
from mesilla.master.tasks import Tasks, master_status
from mesilla.v1 import internal
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import AgentID, Reason, Task, TaskState, TaskStatus

log = logging.getLogger(__name__)


class StatusUpdates:
    def __init__(self, parts: Parts, tasks: Tasks) -> None:
        self._parts = parts
        self._tasks = tasks

    # --- from agents ---------------------------------------------------------------------

    async def status_update(self, agent: Agent, update: internal.StatusUpdate) -> None:
        """An agent's STATUS_UPDATE: record it and forward it to the framework as UPDATE."""
        self._parts.counters["master/messages_status_update"] += 1
        status = update.status
        self._parts.book.answered(agent.id, update.framework_id.value, status.task_id.value)
        framework = self._parts.book.frameworks.get(update.framework_id.value)
        if framework is None:
            self._parts.counters["master/invalid_status_updates"] += 1
            if self._parts.book.is_completed_framework(update.framework_id.value):
                # The framework is gone for good: acknowledge so the agent stops retrying.
                await self._parts.outbox.acknowledge(
                    agent, update.framework_id.value, status.task_id, status.uuid
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
            self._tasks.update(task, status, update.latest_state)
        self._parts.counters["master/valid_status_updates"] += 1
        await self._parts.outbox.update(framework, status)

    # --- from frameworks ----------------------------------------------------------------

    async def acknowledge(self, framework: Framework, ack: sched.Acknowledge) -> None:
        """ACKNOWLEDGE: relayed to the agent; an acknowledged terminal task is removed."""
        self._parts.counters["master/messages_status_update_acknowledgement"] += 1
        agent = self._parts.book.agents.get(ack.agent_id.value)
        if agent is None or not agent.connected:
            self._parts.counters["master/invalid_status_update_acknowledgements"] += 1
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
            self._tasks.remove(task)
        self._parts.counters["master/valid_status_update_acknowledgements"] += 1
        await self._parts.outbox.acknowledge(agent, framework.id, ack.task_id, ack.uuid)

    async def kill(self, framework: Framework, kill: sched.Kill) -> None:
        """KILL: to the task's agent; an unknown task is answered by reconciliation."""
        self._parts.counters["master/messages_kill_task"] += 1
        task = framework.tasks.get(kill.task_id.value)
        if task is None:
            await self.reconcile(
                framework,
                [sched.ReconcileTask(task_id=kill.task_id, agent_id=kill.agent_id)],
            )
            return
        agent = self._parts.book.agents.get(task.agent_id.value)
        if agent is None or not agent.connected:
            log.warning("cannot kill task %s: its agent is not connected", kill.task_id.value)
            return
        await self._parts.outbox.kill_task(agent, framework.id, kill.task_id, kill.kill_policy)

    async def reconcile(self, framework: Framework, tasks: list[sched.ReconcileTask]) -> None:
        """RECONCILE: explicit for the given tasks, implicit (all tasks) when none are given."""
        self._parts.counters["master/messages_reconcile_tasks"] += 1
        if not tasks:
            for task in [
                *framework.tasks.values(),
                *framework.unreachable_tasks.values(),
            ]:
                await self._parts.outbox.update(framework, self._latest_status(task))
            return
        for item in tasks:
            status = self._reconcile_one(framework, item)
            if status is not None:
                await self._parts.outbox.update(framework, status)

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

    def _reconcile_one(self, framework: Framework, item: sched.ReconcileTask) -> TaskStatus | None:
        task = framework.task(item.task_id.value)
        if task is not None:
            return self._latest_status(task)
        agent_id = item.agent_id.value if item.agent_id else None
        if (agent_id and agent_id in self._parts.book.recovered_agents) or (
            agent_id is None and self._parts.book.recovered_agents
        ):
            # The task may be on an agent that has not re-registered yet: answer later.
            return None
        aware = framework.partition_aware
        unreachable_time = None
        if agent_id and agent_id in self._parts.book.agents:
            state, message = (
                TaskState.TASK_GONE,
                "Reconciliation: Task is unknown to the agent",
            )
        elif agent_id and agent_id in self._parts.book.unreachable_agents:
            state, message = (
                TaskState.TASK_UNREACHABLE,
                "Reconciliation: Task is unreachable",
            )
            unreachable_time = self._parts.book.unreachable_agents[agent_id]
        elif agent_id and agent_id in self._parts.book.gone_agents:
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
