"""The master's side of the agent: registration and the master's events.

`MasterEvents` is what `MasterLink` drives: it builds REGISTER (with what the
agent runs, once it has an id), takes REGISTERED, and hands every other event
to its handler through one table from event type to function, as Mesos's
`Slave::initialize` installs a handler per message. A handler gets the
agent and the event's own message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mesilla import MESOS_VERSION
from mesilla.agent import launches, messages, status_updates, terminations
from mesilla.agent.agent import CAPABILITIES, Agent, AgentStatus, partition_aware
from mesilla.agent.state import ExecutorState
from mesilla.common.protobuf_utils import create_task
from mesilla.v1 import internal
from mesilla.v1.internal import AgentEvent, AgentEventType
from mesilla.v1.mesos import (
    AgentCapability,
    ExecutorInfo,
    FrameworkInfo,
    Reason,
    Task,
    TaskState,
)

log = logging.getLogger(__name__)


class MasterEvents:
    """The agent as its `MasterLink` sees it."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._sessions = 0  # connections to the master so far (one ends at `disconnected`)

    def register_call(self) -> internal.Register:
        """REGISTER, with what the agent runs when it already has an id (re-registration)."""
        agent = self.agent
        tasks: list[Task] = []
        executors: list[ExecutorInfo] = []
        frameworks: list[FrameworkInfo] = []
        for framework in agent.frameworks.values():
            frameworks.append(framework.info)
            for executor in framework.executors.values():
                # As Mesos: no command executors (the master never knew them) and no
                # terminated ones (they hold nothing; reported, the master would keep them).
                if not executor.command_task and executor.state is not ExecutorState.TERMINATED:
                    executors.append(executor.info)
                for info in executor.queued_tasks.values():
                    tasks.append(create_task(info, TaskState.TASK_STAGING, framework.id, agent.id()))
                tasks.extend(executor.launched_tasks.values())
                tasks.extend(executor.terminated_tasks.values())
        return internal.Register(
            agent_info=agent.info,
            version=MESOS_VERSION,
            capabilities=[AgentCapability(type=name) for name in CAPABILITIES],
            tasks=tasks,
            executor_infos=executors,
            frameworks=frameworks,
        )

    def registered(self, registered: internal.Registered) -> None:
        agent = self.agent
        if agent.info.id is not None and agent.info.id != registered.agent_id:
            log.error(
                "The master gave agent id %s but this agent is %s: shutting down",
                registered.agent_id.value,
                agent.info.id.value,
            )
            agent.shutdown_requested.set()
            return
        first = agent.info.id is None
        agent.info.id = registered.agent_id
        agent.master_info = registered.master_info
        if first:
            # As Mesos: the id is durable before the agent counts as registered, so that
            # an agent killed from then on recovers as this agent, not a new one.
            agent.spawn(self._checkpoint_then_run(self._sessions), "checkpoint of the agent's id")
        else:
            self._running()

    async def _checkpoint_then_run(self, session: int) -> None:
        agent = self.agent
        try:
            await agent.checkpointer.agent(agent.info)
        except OSError as exc:
            log.critical("Failed to checkpoint the agent's id: %s", exc)
            agent.shutdown_requested.set()
            raise
        if session == self._sessions:  # still connected
            self._running()

    def _running(self) -> None:
        agent = self.agent
        assert agent.info.id is not None
        agent.metrics["registrations"] += 1
        agent.status = AgentStatus.RUNNING
        log.info("Registered with the master as agent %s", agent.info.id.value)
        agent.status_updates.resume()

    def disconnected(self) -> None:
        agent = self.agent
        self._sessions += 1
        if agent.status is AgentStatus.RUNNING:
            agent.status = AgentStatus.DISCONNECTED
            log.info("Disconnected from the master; status updates are paused")
        agent.status_updates.pause()

    def handle_event(self, event: AgentEvent) -> None:
        handler = HANDLERS.get(event.type)
        if handler is not None:
            handler(self.agent, event)


def _run_task(agent: Agent, event: AgentEvent) -> None:
    if event.run_task:
        launches.run_task(agent, event.run_task.framework_info, event.run_task.task)


def _run_task_group(agent: Agent, event: AgentEvent) -> None:
    if msg := event.run_task_group:
        launches.run_task_group(agent, msg.framework_info, msg.executor_info, msg.task_group)


def _kill_task(agent: Agent, event: AgentEvent) -> None:
    if msg := event.kill_task:
        terminations.kill_task(agent, msg.framework_id, msg.task_id.value, msg.kill_policy)


def _shutdown_executor(agent: Agent, event: AgentEvent) -> None:
    if msg := event.shutdown_executor:
        terminations.shutdown_executor(agent, msg.framework_id.value, msg.executor_id.value)


def _shutdown_framework(agent: Agent, event: AgentEvent) -> None:
    if msg := event.shutdown_framework:
        terminations.shutdown_framework(agent, msg.framework_id.value)


def _update_framework(agent: Agent, event: AgentEvent) -> None:
    if event.update_framework is None:
        return
    info = event.update_framework.framework_info
    if info.id is None or info.id.value not in agent.frameworks:
        return
    framework = agent.frameworks[info.id.value]
    framework.info = info
    if framework.checkpoint:
        write = agent.checkpointer.framework(agent.id().value, info)
        agent.spawn(write, f"checkpoint of framework {info.id.value}")


def _acknowledge(agent: Agent, event: AgentEvent) -> None:
    if (ack := event.acknowledge) is None:
        return
    framework_id, task_id = ack.framework_id.value, ack.task_id.value
    ended = agent.status_updates.acknowledgement(framework_id, task_id, ack.uuid)
    if ended is None:
        return
    framework = agent.frameworks.get(framework_id)
    executor = framework.executor_of_task(task_id) if framework else None
    if framework is None or executor is None:
        return
    if ended and task_id in executor.terminated_tasks:
        executor.complete_task(task_id)
    if executor.state is ExecutorState.TERMINATED and not executor.incomplete_tasks():
        terminations.remove_executor(agent, framework, executor)
    if framework.idle():
        terminations.remove_framework(agent, framework)


def _framework_message(agent: Agent, event: AgentEvent) -> None:
    if msg := event.framework_message:
        messages.framework_message(agent, msg.framework_id.value, msg.executor_id.value, msg.data)


def _shutdown(agent: Agent, event: AgentEvent) -> None:
    reason = event.shutdown.message if event.shutdown else None
    log.warning("The master asked this agent to shut down: %s", reason or "no reason")
    terminations.shutdown(agent)


def _reconcile_tasks(agent: Agent, event: AgentEvent) -> None:
    """Tasks the master expects here that the agent does not know end LOST (DROPPED)."""
    if (msg := event.reconcile_tasks) is None:
        return
    framework = agent.frameworks.get(msg.framework_id.value)
    for task_id in msg.task_ids:
        if framework is not None and framework.executor_of_task(task_id.value) is not None:
            continue
        if agent.status_updates.pending(msg.framework_id.value, task_id.value):
            continue  # asked again before its answer was acknowledged: that answer is on its way
        info = framework.info if framework is not None else msg.framework_info
        aware = info is not None and partition_aware(info)
        status_updates.agent_update(
            agent,
            msg.framework_id,
            None,
            task_id.value,
            TaskState.TASK_DROPPED if aware else TaskState.TASK_LOST,
            Reason.REASON_RECONCILIATION,
            "Reconciliation: task unknown to the agent",
        )


HANDLERS: dict[AgentEventType, Callable[[Agent, AgentEvent], None]] = {
    AgentEventType.RUN_TASK: _run_task,
    AgentEventType.RUN_TASK_GROUP: _run_task_group,
    AgentEventType.KILL_TASK: _kill_task,
    AgentEventType.SHUTDOWN_EXECUTOR: _shutdown_executor,
    AgentEventType.SHUTDOWN_FRAMEWORK: _shutdown_framework,
    AgentEventType.UPDATE_FRAMEWORK: _update_framework,
    AgentEventType.ACKNOWLEDGE: _acknowledge,
    AgentEventType.FRAMEWORK_MESSAGE: _framework_message,
    AgentEventType.SHUTDOWN: _shutdown,
    AgentEventType.RECONCILE_TASKS: _reconcile_tasks,
}
