"""Agent life cycle on the master: registration, re-registration, disconnection, unreachability.

A re-registering agent reports what it runs; the master takes that as the
truth: tasks it did not know (after a master restart) are added, tasks it
believed were there but the agent does not report are reconciled with the
agent. Each registered agent is health-checked (`agent_health.AgentHealth`);
one that stops answering is marked unreachable: its tasks go
TASK_UNREACHABLE (PARTITION_AWARE frameworks) or TASK_LOST, and come back if
it re-registers.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from mesilla.common.http import EventStream
from mesilla.master.agent import Agent
from mesilla.master.agent_health import AgentHealth, forgive
from mesilla.master.framework import Framework
from mesilla.master.frameworks import FrameworkStreams
from mesilla.master.offers import Offerer
from mesilla.master.parts import Parts
from mesilla.master.tasks import Tasks, task_status
from mesilla.v1 import internal
from mesilla.v1.mesos import (
    AgentID,
    AgentInfo,
    FrameworkID,
    FrameworkInfo,
    Reason,
    TaskID,
    TaskState,
    TaskStatus,
)

log = logging.getLogger(__name__)


class AgentLinks:
    def __init__(
        self,
        parts: Parts,
        offerer: Offerer,
        tasks: Tasks,
        frameworks: FrameworkStreams,
        *,
        ping_timeout: float,
        max_ping_timeouts: int,
        reregister_timeout: float,
    ) -> None:
        self._parts = parts
        self._offerer = offerer
        self._tasks = tasks
        self._frameworks = frameworks
        self.health = AgentHealth(
            parts.outbox,
            parts.counters,
            ping_timeout=ping_timeout,
            max_ping_timeouts=max_ping_timeouts,
            registered=lambda agent: self._parts.book.agents.get(agent.id) is agent,
            unreachable=self.mark_unreachable,
        )
        self._reregister_timeout = reregister_timeout
        self._reregister_timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Agents recovered from the registry have ``--agent_reregister_timeout`` to come back."""
        if self._parts.book.recovered_agents:
            self._reregister_timer = asyncio.get_running_loop().call_later(
                self._reregister_timeout,
                lambda: self._parts.owner.spawn(
                    self._expire_recovered_agents(), "expiry of recovered agents"
                ),
            )

    def stop(self) -> None:
        """Closes every agent's stream (the master is `stopping`: a closing stream is its own doing)."""
        if self._reregister_timer is not None:
            self._reregister_timer.cancel()
        for agent in self._parts.book.agents.values():
            self._close_stream(agent)

    # --- registration -------------------------------------------------------------------

    async def register(
        self, stream: EventStream, stream_id: str, call: internal.Register, remote_ip: str
    ) -> Agent | None:
        """REGISTER on an open stream; returns the agent, or None if it was told to shut down."""
        info = call.agent_info
        pid = f"slave(1)@{remote_ip}:{info.port}"
        reconcile: list[internal.ReconcileTasks] = []
        if info.id is None:
            agent = await self._register_new(info, pid, call)
        elif info.id.value in self._parts.book.gone_agents:
            await self._parts.outbox.shutdown(stream, f"Agent {info.id.value} has been marked gone")
            stream.close()
            return None
        else:
            self._parts.counters["master/messages_reregister_slave"] += 1
            self._parts.counters["master/slave_reregistrations"] += 1
            known = self._parts.book.agents.get(info.id.value)
            if known is not None and known.stream_id is not None:
                # A REGISTER on a new stream means the old connection is gone, whether or
                # not the stream watch has seen it yet: its disconnection comes first, so
                # that what follows does not depend on which the master noticed first.
                self.disconnected(known, known.stream_id)
            if known is not None:
                reconcile = self._unknown_to_agent(known, call)
                agent = await self._reregister_known(known, info, pid, call)
            else:
                agent = await self._reregister_unknown(info, pid, call)
                self._ask_unreported_unreachable(agent)
            reconcile += self._asked(agent, call)
        agent.stream, agent.stream_id = stream, stream_id
        agent.connected = agent.active = True
        await self._parts.outbox.registered(agent, self._parts.master_info(), self.health.total_ping_timeout)
        await self._parts.outbox.reconcile_tasks(agent, reconcile)
        await self._shutdown_completed_frameworks(agent, call)
        if agent.observer is None:  # a known agent that re-registers keeps its observer
            agent.observer = self._parts.owner.spawn(
                self.health.observe(agent), f"health of agent {agent.id}"
            )
        log.info("agent %s (%s) registered at %s", agent.id, agent.hostname, pid)
        return agent

    async def _register_new(self, info: AgentInfo, pid: str, call: internal.Register) -> Agent:
        info = msgspec.structs.replace(info, id=AgentID(value=self._parts.book.new_agent_id()))
        await self._parts.registry.admit_agent(info)
        agent = self._add(info, pid, call)
        self._parts.counters["master/slave_registrations"] += 1
        self._parts.counters["master/messages_register_slave"] += 1
        return agent

    async def _reregister_unknown(self, info: AgentInfo, pid: str, call: internal.Register) -> Agent:
        """An agent the master does not hold: recovered from the registry, unreachable, or unknown."""
        assert info.id is not None
        await self._parts.registry.readmit_agent(info)
        recovered = info.id.value in self._parts.book.recovered_agents
        unreachable = info.id.value in self._parts.book.unreachable_agents
        agent = self._add(info, pid, call)
        agent.reregistered_time = time.time()
        if not recovered:
            await self._announce_readded_tasks(agent, unreachable)
        return agent

    def _add(self, info: AgentInfo, pid: str, call: internal.Register) -> Agent:
        agent = self._parts.book.add_agent(
            info, pid, version=call.version, capabilities=list(call.capabilities), now=time.time()
        )
        self._adopt_reported(agent, call)
        self._parts.allocator.add_agent(
            agent.id, agent.hostname, agent.total_resources, used=agent.used_resources()
        )
        self._parts.outbox.notify("AGENT_ADDED", agent)
        return agent

    def _adopt_reported(self, agent: Agent, call: internal.Register) -> None:
        """Takes in the executors and live tasks a re-registering agent reports and the master
        does not know (after a master restart, or tasks that were unreachable)."""
        frameworks = {f.id.value: f for f in call.frameworks if f.id is not None}
        for executor in call.executor_infos:
            framework_id = executor.framework_id.value if executor.framework_id else None
            if framework_id is None or self._parts.book.is_completed_framework(framework_id):
                continue
            if not agent.has_executor(framework_id, executor.executor_id.value):
                framework = self._framework_for(framework_id, frameworks)
                self._tasks.add_executor(framework.id, agent.id, executor)
        for task in call.tasks:
            framework_id = task.framework_id.value
            if task.state.terminal or self._parts.book.is_completed_framework(framework_id):
                continue
            if task.task_id.value in agent.tasks.get(framework_id, {}):
                continue
            self._framework_for(framework_id, frameworks)
            self._tasks.add(msgspec.structs.replace(task, agent_id=AgentID(value=agent.id)))

    def _framework_for(self, framework_id: str, reported: dict[str, FrameworkInfo]) -> Framework:
        info = reported.get(framework_id) or FrameworkInfo(id=FrameworkID(value=framework_id))
        return self._frameworks.recover(framework_id, info)

    async def _announce_readded_tasks(self, agent: Agent, unreachable: bool) -> None:
        """As Mesos: when an agent the master had removed (unreachable) or never knew comes
        back, each connected framework hears the state of its re-added tasks
        (REASON_AGENT_REREGISTERED). Not after a master failover: frameworks reconcile then."""
        message = "Unreachable agent re-reregistered" if unreachable else "Unknown agent reregistered"
        for framework_id, tasks in agent.tasks.items():
            framework = self._parts.book.frameworks.get(framework_id)
            if framework is None:
                continue
            for task in tasks.values():
                status = task_status(task, task.state, Reason.REASON_AGENT_REREGISTERED, message)
                if task.statuses:  # what the task's last update said of it, as Mesos keeps
                    last = task.statuses[-1]
                    status = msgspec.structs.replace(
                        status,
                        healthy=last.healthy,
                        check_status=last.check_status,
                        container_status=last.container_status,
                    )
                await self._parts.outbox.update(framework, status)

    async def _shutdown_completed_frameworks(self, agent: Agent, call: internal.Register) -> None:
        """Frameworks removed while the agent was away must not keep running there."""
        reported = {t.framework_id.value for t in call.tasks} | {
            e.framework_id.value for e in call.executor_infos if e.framework_id is not None
        }
        for framework_id in sorted(reported):
            if self._parts.book.is_completed_framework(framework_id):
                await self._parts.outbox.shutdown_framework(agent, framework_id)

    def _unknown_to_agent(self, agent: Agent, call: internal.Register) -> list[internal.ReconcileTasks]:
        """Live tasks the master places on a re-registering agent that it does not report (the
        launch was lost, or raced the re-registration). As Mesos, the master asks the agent,
        which answers the ones it does not know with a TASK_LOST (or TASK_DROPPED) of its
        own: reliable, retried until acknowledged, and never for a task it did receive."""
        reported = {(t.framework_id.value, t.task_id.value) for t in call.tasks}
        asks = []
        for framework_id, tasks in agent.tasks.items():
            framework = self._parts.book.frameworks.get(framework_id)
            if framework is None:
                continue
            missing = [
                task.task_id
                for task in tasks.values()
                if not task.state.terminal and (framework_id, task.task_id.value) not in reported
            ]
            for task_id in missing:
                log.warning(
                    "task %s of framework %s unknown to agent %s during re-registration: "
                    "reconciling with the agent", task_id.value, framework_id, agent.id,
                )  # fmt: skip
            if missing:
                asks.append(
                    internal.ReconcileTasks(
                        framework_id=FrameworkID(value=framework_id),
                        task_ids=missing,
                        framework_info=framework.info,
                    )
                )
        return asks

    def _ask_unreported_unreachable(self, agent: Agent) -> None:
        """As Mesos, once an unreachable agent is back none of its tasks stay unreachable:
        those it reported were adopted, the others leave the master. Those it never
        received (launched while it hung), their framework told TASK_UNREACHABLE and no
        end, are asked of the agent, which ends them with a TASK_DROPPED of its own."""
        book = self._parts.book
        for framework_id, left in book.drop_unreachable_tasks(agent.id).items():
            unheard = [
                t.task_id.value for t in left
                if t.status_update_state is None or not t.status_update_state.terminal
            ]  # fmt: skip
            if unheard:
                log.warning(
                    "tasks %s of framework %s unknown to agent %s, back from unreachable: "
                    "reconciling with the agent", unheard, framework_id, agent.id,
                )  # fmt: skip
                book.ask_tasks(agent.id, framework_id, unheard)

    def _asked(self, agent: Agent, call: internal.Register) -> list[internal.ReconcileTasks]:
        """The tasks asked of the agent and not answered yet, asked (again) at each of its
        re-registrations: an agent that dies before it answers would otherwise leave them
        without an end. One it reports is its answer."""
        book = self._parts.book
        for task in call.tasks:
            book.answered(agent.id, task.framework_id.value, task.task_id.value)
        asks = []
        for framework_id, task_ids in list(book.asked_tasks.get(agent.id, {}).items()):
            framework = book.frameworks.get(framework_id)
            if framework is None:  # torn down meanwhile: nobody waits for an answer
                for task_id in list(task_ids):
                    book.answered(agent.id, framework_id, task_id)
                continue
            asks.append(
                internal.ReconcileTasks(
                    framework_id=FrameworkID(value=framework_id),
                    task_ids=[TaskID(value=task_id) for task_id in sorted(task_ids)],
                    framework_info=framework.info,
                )
            )
        return asks

    async def _reregister_known(
        self, agent: Agent, info: AgentInfo, pid: str, call: internal.Register
    ) -> Agent:
        """The agent reconnected (either side may have restarted): reconcile its tasks."""
        forgive(agent)  # pings that found no stream while it was away do not count against it
        self._close_stream(agent)
        if info != agent.info:
            await self._parts.registry.readmit_agent(info)
            agent.info = info
            self._parts.allocator.update_agent(agent.id, agent.total_resources)
        agent.pid = pid
        agent.version = call.version
        agent.reregistered_time = time.time()
        self._remove_unreported_executors(agent, call)
        before = agent.used_resources()
        self._adopt_reported(agent, call)
        if agent.used_resources() != before:
            # Resources of adopted tasks are in use: re-add the agent with them
            # (its offers go, as the allocator forgets what it had offered).
            self._offerer.remove_all(agent.offers, rescind=True, recover=False)
            self._parts.allocator.remove_agent(agent.id)
            self._parts.allocator.add_agent(
                agent.id, agent.hostname, agent.total_resources, used=agent.used_resources()
            )
        self._parts.allocator.activate_agent(agent.id)
        return agent

    def _remove_unreported_executors(self, agent: Agent, call: internal.Register) -> None:
        """As Mesos's `reconcileKnownSlave`: executors the agent no longer reports are gone
        (one that ended while the agent was away could not tell the master), and so are
        their resources."""
        reported = {
            (e.framework_id.value, e.executor_id.value)
            for e in call.executor_infos
            if e.framework_id is not None
        }
        for framework_id, executors in list(agent.executors.items()):
            for executor_id in list(executors):
                if (framework_id, executor_id) not in reported:
                    log.warning(
                        "executor %s of framework %s unknown to agent %s during re-registration: "
                        "removed", executor_id, framework_id, agent.id,
                    )  # fmt: skip
                    self._tasks.recover_executor(agent, framework_id, executor_id)

    def _close_stream(self, agent: Agent) -> None:
        stream, agent.stream, agent.stream_id = agent.stream, None, None
        if stream is not None:
            stream.close()

    # --- disconnection and removal --------------------------------------------------------

    def pong(self, agent: Agent) -> None:
        forgive(agent)

    def disconnected(self, agent: Agent, stream_id: str) -> None:
        if (
            agent.stream_id != stream_id
            or self._parts.book.agents.get(agent.id) is not agent
            or self._parts.stopping()
        ):
            return
        self._close_stream(agent)
        agent.connected = agent.active = False
        self._parts.allocator.deactivate_agent(agent.id)
        self._offerer.remove_all(agent.offers, rescind=True)
        for framework_id in sorted(set(agent.tasks) | set(agent.executors)):
            framework = self._parts.book.frameworks.get(framework_id)
            if framework is not None and not framework.info.checkpoint:
                lost = self._remove_framework_from(agent, framework)
                self._parts.owner.spawn(
                    self._parts.outbox.updates(framework, lost), f"updates to {framework.id}"
                )
        log.info(
            "agent %s disconnected; unreachable after %d missed pings unless it comes back",
            agent.id,
            self.health.max_ping_timeouts,
        )

    def _remove_framework_from(self, agent: Agent, framework: Framework) -> list[TaskStatus]:
        """As Mesos: a framework without checkpointing loses what it ran on an agent that
        disconnected (nothing of it survives an agent restart); returns the updates to send."""
        statuses = []
        for task in list(agent.tasks.get(framework.id, {}).values()):
            if not task.state.terminal:
                disconnected = f"Agent {agent.hostname} disconnected"
                status = task_status(
                    task, TaskState.TASK_LOST, Reason.REASON_AGENT_DISCONNECTED, disconnected
                )
                self._tasks.update(task, status)
                statuses.append(status)
            self._tasks.remove(task)
        for executor_id in list(agent.executors.get(framework.id, {})):
            self._tasks.recover_executor(agent, framework.id, executor_id)
        return statuses

    async def mark_unreachable(self, agent: Agent) -> None:
        """Its health check failed: the agent leaves the cluster until it re-registers."""
        now = time.time()
        await self._parts.registry.mark_agent_unreachable(agent.id, now)
        self._parts.counters["master/slave_unreachable_completed"] += 1
        self._parts.counters["master/slave_removals"] += 1
        self._parts.book.mark_unreachable(agent.id, now)
        await self._remove(
            agent,
            TaskState.TASK_UNREACHABLE,
            Reason.REASON_AGENT_REMOVED,
            f"Agent {agent.hostname} is unreachable",
            unreachable_time=now,
        )

    async def _remove(
        self,
        agent: Agent,
        state: TaskState,
        reason: Reason,
        message: str,
        unreachable_time: float | None = None,
    ) -> None:
        """Takes an agent out of the cluster; its tasks go `state` (TASK_LOST for frameworks
        not PARTITION_AWARE)."""
        self._parts.allocator.remove_agent(agent.id)
        self._offerer.remove_all(agent.offers, rescind=True, recover=False)
        for framework_id, tasks in list(agent.tasks.items()):
            framework = self._parts.book.frameworks.get(framework_id)
            if framework is None:
                continue
            for task in list(tasks.values()):
                await self._tasks.lose(framework, task, state, reason, message, unreachable_time)
        self._parts.book.remove_agent(agent)
        self._close_stream(agent)
        await self._parts.outbox.agent_lost(self._parts.book.frameworks.values(), agent.id)
        self._parts.outbox.notify("AGENT_REMOVED", AgentID(value=agent.id))

    async def _expire_recovered_agents(self) -> None:
        """Agents from the registry that did not re-register in ``--agent_reregister_timeout``."""
        for agent_id in list(self._parts.book.recovered_agents):
            now = time.time()
            await self._parts.registry.mark_agent_unreachable(agent_id, now)
            self._parts.book.mark_unreachable(agent_id, now)
            self._parts.counters["master/recovery_slave_removals"] += 1
            log.info("agent %s did not re-register after master failover: unreachable", agent_id)
            await self._parts.outbox.agent_lost(self._parts.book.frameworks.values(), agent_id)

    async def unregister(self, agent: Agent) -> None:
        """UNREGISTER: the agent is leaving for good (its tasks are lost)."""
        await self._parts.registry.remove_agent(agent.id)
        self._parts.counters["master/slave_removals"] += 1
        await self._remove(
            agent, TaskState.TASK_LOST, Reason.REASON_AGENT_REMOVED, f"Agent {agent.hostname} removed"
        )

    async def mark_gone(self, agent_id: str) -> None:
        """The operator's MARK_AGENT_GONE: the agent never comes back; its tasks are gone."""
        if agent_id in self._parts.book.gone_agents:
            return
        now = time.time()
        await self._parts.registry.mark_agent_gone(agent_id, now)
        self._parts.book.mark_gone(agent_id, now)
        agent = self._parts.book.agents.get(agent_id)
        if agent is not None:
            if agent.stream is not None:
                await self._parts.outbox.shutdown(agent.stream, "Agent marked gone by the operator")
            await self._remove(
                agent,
                TaskState.TASK_GONE_BY_OPERATOR,
                Reason.REASON_AGENT_REMOVED_BY_OPERATOR,
                f"Agent {agent.hostname} marked gone by the operator",
            )
        for framework in self._parts.book.frameworks.values():
            for task in [t for t in framework.unreachable_tasks.values() if t.agent_id.value == agent_id]:
                await self._tasks.lose(
                    framework,
                    task,
                    TaskState.TASK_GONE_BY_OPERATOR,
                    Reason.REASON_AGENT_REMOVED_BY_OPERATOR,
                    "Agent marked gone by the operator",
                )
