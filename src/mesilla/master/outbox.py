"""Everything the master sends: events to frameworks and agents, notifications to observers.

One method per message, named as the event it sends, so that what the master
says to whom is read in one place. A method that is awaited sends before it
returns; `offers` and `rescind`, made from the allocator's synchronous
callback, send in the background (children of the master's `TaskOwner`).
Sending to a framework or agent without a stream does nothing: the peer
catches up when it reconnects (reconciliation, re-registration).

Observers (`add_observer`) receive the operator API's events, synchronously,
as a kind and what it is about: TASK_ADDED a `Task`, TASK_UPDATED a
`TaskUpdated`, AGENT_ADDED an `Agent`, AGENT_REMOVED its `AgentID`, and
FRAMEWORK_ADDED, FRAMEWORK_UPDATED, FRAMEWORK_REMOVED a `Framework`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Literal, NamedTuple

from mesilla.common.http import EventStream
from mesilla.common.tasks import TaskOwner
from mesilla.master.agent import Agent
from mesilla.master.framework import Framework
from mesilla.v1 import internal, mesos
from mesilla.v1 import scheduler as sched

log = logging.getLogger(__name__)



class TaskUpdated(NamedTuple):
    """TASK_UPDATED: the update, and the state of the task now (the agent's latest when ahead)."""

    framework_id: mesos.FrameworkID
    status: mesos.TaskStatus
    state: mesos.TaskState


ObserverKind = Literal[
    "TASK_ADDED",
    "TASK_UPDATED",
    "AGENT_ADDED",
    "AGENT_REMOVED",
    "FRAMEWORK_ADDED",
    "FRAMEWORK_UPDATED",
    "FRAMEWORK_REMOVED",
]
ObserverEvent = mesos.Task | TaskUpdated | Agent | mesos.AgentID | Framework
Observer = Callable[[ObserverKind, ObserverEvent], None]


def _agent_event(kind: internal.AgentEventType, **fields: Any) -> internal.AgentEvent:
    return internal.AgentEvent(type=kind, **fields)


class Outbox:
    def __init__(self, owner: TaskOwner) -> None:
        self._owner = owner
        self._observers: list[Observer] = []

    # --- observers ----------------------------------------------------------------------

    def add_observer(self, callback: Observer) -> None:
        self._observers.append(callback)

    def remove_observer(self, callback: Observer) -> None:
        if callback in self._observers:
            self._observers.remove(callback)

    def notify(self, kind: ObserverKind, event: ObserverEvent) -> None:
        if not self._observers:
            return  # the common case, on every task added and updated
        for callback in list(self._observers):
            try:
                callback(kind, event)
            except Exception:
                log.exception("observer failed on %s", kind)

    # --- to frameworks ---------------------------------------------------------------------

    async def to_framework(self, framework: Framework, event: sched.Event) -> None:
        if framework.stream is not None:
            await framework.stream.send(event)

    async def subscribed(
        self, framework: Framework, heartbeat_interval: float, master_info: mesos.MasterInfo
    ) -> None:
        subscribed = sched.Subscribed(
            framework_id=mesos.FrameworkID(value=framework.id),
            heartbeat_interval_seconds=heartbeat_interval,
            master_info=master_info,
        )
        await self.to_framework(
            framework, sched.Event(type=sched.EventType.SUBSCRIBED, subscribed=subscribed)
        )

    async def error(self, stream: EventStream, message: str) -> None:
        """ERROR on a scheduler's stream, which then closes (a refused or replaced subscription)."""
        await stream.send(sched.Event(type=sched.EventType.ERROR, error=sched.Error(message=message)))
        stream.close()

    async def update(self, framework: Framework, status: mesos.TaskStatus) -> None:
        """A task's status, to its framework if connected (one that is not reconciles later)."""
        if framework.connected:
            await self.to_framework(
                framework, sched.Event(type=sched.EventType.UPDATE, update=sched.Update(status=status))
            )

    async def updates(self, framework: Framework, statuses: list[mesos.TaskStatus]) -> None:
        for status in statuses:
            await self.update(framework, status)

    def offers(self, framework: Framework, offers: list[mesos.Offer]) -> None:
        event = sched.Event(type=sched.EventType.OFFERS, offers=sched.Offers(offers=offers))
        self._owner.spawn(self.to_framework(framework, event), f"OFFERS to {framework.id}")

    def rescind(self, framework: Framework, offer_id: mesos.OfferID) -> None:
        if framework.connected:
            event = sched.Event(type=sched.EventType.RESCIND, rescind=sched.Rescind(offer_id=offer_id))
            self._owner.spawn(self.to_framework(framework, event), f"RESCIND to {framework.id}")

    async def executor_message(
        self, framework: Framework, agent_id: str, executor_id: mesos.ExecutorID, data: bytes
    ) -> None:
        message = sched.FrameworkMessage(
            agent_id=mesos.AgentID(value=agent_id), executor_id=executor_id, data=data
        )
        await self.to_framework(framework, sched.Event(type=sched.EventType.MESSAGE, message=message))

    async def failure(
        self, framework: Framework, agent_id: str, executor_id: mesos.ExecutorID, status: int | None
    ) -> None:
        """An executor exited. `status` is always there, as in Mesos (-1 when unknown): clients
        such as pymesos read it unconditionally."""
        failure = sched.Failure(
            agent_id=mesos.AgentID(value=agent_id),
            executor_id=executor_id,
            status=-1 if status is None else status,
        )
        await self.to_framework(framework, sched.Event(type=sched.EventType.FAILURE, failure=failure))

    async def agent_lost(self, frameworks: Iterable[Framework], agent_id: str) -> None:
        """An agent left the cluster (unreachable, gone, unregistered, not back after a failover):
        every connected framework hears it, as Mesos's `sendSlaveLost`: FAILURE with the agent
        alone (schedulers' `slaveLost`), LostSlaveMessage for v0 drivers."""
        failure = sched.Failure(agent_id=mesos.AgentID(value=agent_id))
        event = sched.Event(type=sched.EventType.FAILURE, failure=failure)
        for framework in list(frameworks):
            if framework.connected:
                await self.to_framework(framework, event)

    # --- to agents -----------------------------------------------------------------------------

    async def to_agent(self, agent: Agent, event: internal.AgentEvent) -> bool:
        if agent.stream is None:
            return False
        return await agent.stream.send(event)

    async def registered(
        self, agent: Agent, master_info: mesos.MasterInfo, total_ping_timeout: float
    ) -> None:
        registered = internal.Registered(
            agent_id=mesos.AgentID(value=agent.id),
            master_info=master_info,
            connection=internal.MasterAgentConnection(total_ping_timeout_seconds=total_ping_timeout),
        )
        await self.to_agent(agent, _agent_event(internal.AgentEventType.REGISTERED, registered=registered))

    async def reconcile_tasks(self, agent: Agent, asks: list[internal.ReconcileTasks]) -> None:
        for each in asks:
            await self.to_agent(
                agent, _agent_event(internal.AgentEventType.RECONCILE_TASKS, reconcile_tasks=each)
            )

    async def ping(self, agent: Agent) -> None:
        await self.to_agent(agent, _agent_event(internal.AgentEventType.PING))

    async def shutdown(self, stream: EventStream, message: str) -> None:
        """SHUTDOWN on an agent's stream: it must stop (it was marked gone)."""
        shutdown = internal.Shutdown(message=message)
        await stream.send(_agent_event(internal.AgentEventType.SHUTDOWN, shutdown=shutdown))

    async def run_task(self, agent: Agent, framework_info: mesos.FrameworkInfo, task: mesos.TaskInfo) -> None:
        run_task = internal.RunTask(framework_info=framework_info, task=task)
        await self.to_agent(agent, _agent_event(internal.AgentEventType.RUN_TASK, run_task=run_task))

    async def run_task_group(
        self,
        agent: Agent,
        framework_info: mesos.FrameworkInfo,
        executor: mesos.ExecutorInfo,
        tasks: list[mesos.TaskInfo],
    ) -> None:
        run = internal.RunTaskGroup(
            framework_info=framework_info, executor_info=executor, task_group=mesos.TaskGroupInfo(tasks=tasks)
        )
        await self.to_agent(agent, _agent_event(internal.AgentEventType.RUN_TASK_GROUP, run_task_group=run))

    async def kill_task(
        self, agent: Agent, framework_id: str, task_id: mesos.TaskID, kill_policy: mesos.KillPolicy | None
    ) -> None:
        kill = internal.KillTask(
            framework_id=mesos.FrameworkID(value=framework_id), task_id=task_id, kill_policy=kill_policy
        )
        await self.to_agent(agent, _agent_event(internal.AgentEventType.KILL_TASK, kill_task=kill))

    async def acknowledge(
        self, agent: Agent, framework_id: str, task_id: mesos.TaskID, uuid: bytes | None
    ) -> None:
        """Relays a framework's acknowledgement of a status update (none without a uuid)."""
        if uuid is None:
            return
        ack = internal.Acknowledge(
            framework_id=mesos.FrameworkID(value=framework_id), task_id=task_id, uuid=uuid
        )
        await self.to_agent(agent, _agent_event(internal.AgentEventType.ACKNOWLEDGE, acknowledge=ack))

    async def framework_message(
        self, agent: Agent, framework_id: str, executor_id: mesos.ExecutorID, data: bytes
    ) -> None:
        message = internal.FrameworkToExecutor(
            framework_id=mesos.FrameworkID(value=framework_id), executor_id=executor_id, data=data
        )
        await self.to_agent(
            agent, _agent_event(internal.AgentEventType.FRAMEWORK_MESSAGE, framework_message=message)
        )

    async def shutdown_executor(self, agent: Agent, framework_id: str, executor_id: mesos.ExecutorID) -> None:
        shutdown = internal.ShutdownExecutor(
            framework_id=mesos.FrameworkID(value=framework_id), executor_id=executor_id
        )
        await self.to_agent(
            agent, _agent_event(internal.AgentEventType.SHUTDOWN_EXECUTOR, shutdown_executor=shutdown)
        )

    async def shutdown_framework(self, agent: Agent, framework_id: str) -> None:
        """Tells the agent to shut the framework's executors down (its tasks end killed)."""
        shutdown = internal.ShutdownFramework(framework_id=mesos.FrameworkID(value=framework_id))
        await self.to_agent(
            agent, _agent_event(internal.AgentEventType.SHUTDOWN_FRAMEWORK, shutdown_framework=shutdown)
        )

    async def update_framework(self, agent: Agent, info: mesos.FrameworkInfo) -> None:
        update = internal.UpdateFramework(framework_info=info)
        await self.to_agent(
            agent, _agent_event(internal.AgentEventType.UPDATE_FRAMEWORK, update_framework=update)
        )
