"""Agent life cycle on the master: registration, re-registration, disconnection, unreachability.

A re-registering agent reports what it runs; the master takes that as the
truth: tasks it did not know (after a master restart) are added, tasks it
believed were there but the agent does not report are lost. The master
pings each agent every ``--agent_ping_timeout``; one that leaves
``--max_agent_ping_timeouts`` pings in a row unanswered (hung, partitioned, or
its stream closed and not back) is marked unreachable: its tasks go
TASK_UNREACHABLE (PARTITION_AWARE frameworks) or TASK_LOST, and come back if it
re-registers.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from mesilla.common.http import EventStream
from mesilla.master.agent import Agent
from mesilla.master.base import MasterBase
from mesilla.master.framework import Framework
from mesilla.master.status_updates import master_status
from mesilla.v1 import internal
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import AgentID, FrameworkID, Reason, Task, TaskState, TaskStatus

log = logging.getLogger(__name__)


class AgentsMixin(MasterBase):
    # --- registration -------------------------------------------------------------------

    async def register_agent(
        self,
        stream: EventStream,
        stream_id: str,
        call: internal.Register,
        remote_ip: str,
    ) -> Agent | None:
        """REGISTER on an open stream; returns the agent, or None if it was told to shut down."""
        info = call.agent_info
        pid = f"slave(1)@{remote_ip}:{info.port}"
        reconcile: list[internal.ReconcileTasks] = []
        if info.id is None:
            agent_id = self.new_agent_id()
            info = msgspec.structs.replace(info, id=AgentID(value=agent_id))
            await self.registry.admit_agent(info)
            agent = self._add_agent(info, pid, call)
            self.counters["master/slave_registrations"] += 1
            self.counters["master/messages_register_slave"] += 1
        else:
            agent_id = info.id.value
            if agent_id in self.gone_agents:
                await stream.send(
                    internal.AgentEvent(
                        type=internal.AgentEventType.SHUTDOWN,
                        shutdown=internal.Shutdown(
                            message=f"Agent {agent_id} has been marked gone"
                        ),
                    )
                )
                stream.close()
                return None
            self.counters["master/messages_reregister_slave"] += 1
            self.counters["master/slave_reregistrations"] += 1
            known = self.agents.get(agent_id)
            if known is not None:
                reconcile = self._unknown_to_agent(known, call)
                agent = await self._reregister_known(known, info, pid, call)
            else:
                await self.registry.readmit_agent(info)
                recovered = self.recovered_agents.pop(agent_id, None) is not None
                unreachable = self.unreachable_agents.pop(agent_id, None) is not None
                agent = self._add_agent(info, pid, call)
                agent.reregistered_time = time.time()
                if not recovered:
                    await self._announce_readded_tasks(agent, unreachable)
                reconcile = self._unreported_unreachable(agent)
        agent.stream, agent.stream_id = stream, stream_id
        agent.connected = agent.active = True
        await agent.send(
            internal.AgentEvent(
                type=internal.AgentEventType.REGISTERED,
                registered=internal.Registered(
                    agent_id=AgentID(value=agent.id),
                    master_info=self.master_info,
                    connection=internal.MasterAgentConnection(
                        total_ping_timeout_seconds=self.flags.agent_ping_timeout
                        * self.flags.max_agent_ping_timeouts
                    ),
                ),
            )
        )
        for each in reconcile:
            await agent.send(
                internal.AgentEvent(type=internal.AgentEventType.RECONCILE_TASKS, reconcile_tasks=each)
            )
        await self._shutdown_completed_frameworks(agent, call)
        if agent.observer is None:  # a known agent that re-registers keeps its observer
            agent.observer = self.spawn(self._observe_agent(agent))
        log.info("agent %s (%s) registered at %s", agent.id, agent.hostname, pid)
        return agent

    def _add_agent(
        self, info: internal.AgentInfo, pid: str, call: internal.Register
    ) -> Agent:
        assert info.id is not None
        agent = Agent(
            id=info.id.value,
            info=info,
            pid=pid,
            version=call.version,
            capabilities=list(call.capabilities),
        )
        self.agents[agent.id] = agent
        self._adopt_reported(agent, call)
        self.allocator.add_agent(
            agent.id, agent.hostname, agent.total_resources, used=agent.used_resources()
        )
        self.notify("AGENT_ADDED", agent)
        return agent

    def _adopt_reported(self, agent: Agent, call: internal.Register) -> None:
        """Takes in the executors and live tasks a re-registering agent reports and the master
        does not know (after a master restart, or tasks that were unreachable)."""
        frameworks = {f.id.value: f for f in call.frameworks if f.id is not None}
        for executor in call.executor_infos:
            framework_id = (
                executor.framework_id.value if executor.framework_id else None
            )
            if framework_id is None or self.is_completed_framework(framework_id):
                continue
            if not agent.has_executor(framework_id, executor.executor_id.value):
                framework = self._framework_for(framework_id, frameworks)
                agent.add_executor(framework.id, executor)
                framework.executors.setdefault(agent.id, {})[
                    executor.executor_id.value
                ] = executor
        for task in call.tasks:
            framework_id = task.framework_id.value
            if task.state.terminal or self.is_completed_framework(framework_id):
                continue
            if task.task_id.value in agent.tasks.get(framework_id, {}):
                continue
            framework = self._framework_for(framework_id, frameworks)
            record = msgspec.structs.replace(task, agent_id=AgentID(value=agent.id))
            framework.unreachable_tasks.pop(task.task_id.value, None)
            framework.tasks[task.task_id.value] = record
            agent.add_task(record)
            self.notify("TASK_ADDED", record)

    async def _announce_readded_tasks(self, agent: Agent, unreachable: bool) -> None:
        """As Mesos: when an agent the master had removed (unreachable) or never knew comes
        back, each connected framework hears the state of its re-added tasks
        (REASON_AGENT_REREGISTERED). Not after a master failover: frameworks reconcile then."""
        message = "Unreachable agent re-reregistered" if unreachable else "Unknown agent reregistered"
        for framework_id, tasks in agent.tasks.items():
            framework = self.frameworks.get(framework_id)
            if framework is None:
                continue
            for task in tasks.values():
                status = master_status(
                    task.task_id.value,
                    task.state,
                    Reason.REASON_AGENT_REREGISTERED,
                    message,
                    agent_id=agent.id,
                    executor_id=task.executor_id,
                )
                if task.statuses:  # what the task's last update said of it, as Mesos keeps
                    last = task.statuses[-1]
                    status = msgspec.structs.replace(
                        status,
                        healthy=last.healthy,
                        check_status=last.check_status,
                        container_status=last.container_status,
                    )
                await self.forward_update(framework, status)

    async def _shutdown_completed_frameworks(
        self, agent: Agent, call: internal.Register
    ) -> None:
        """Frameworks removed while the agent was away must not keep running there."""
        reported = {t.framework_id.value for t in call.tasks} | {
            e.framework_id.value
            for e in call.executor_infos
            if e.framework_id is not None
        }
        for framework_id in sorted(reported):
            if self.is_completed_framework(framework_id):
                await agent.shutdown_framework(framework_id)

    def _unknown_to_agent(
        self, agent: Agent, call: internal.Register
    ) -> list[internal.ReconcileTasks]:
        """Live tasks the master places on a re-registering agent that it does not report (the
        launch was lost, or raced the re-registration). As Mesos, the master asks the agent,
        which answers the ones it does not know with a TASK_LOST (or TASK_DROPPED) of its
        own: reliable, retried until acknowledged, and never for a task it did receive."""
        reported = {(t.framework_id.value, t.task_id.value) for t in call.tasks}
        asks = []
        for framework_id, tasks in agent.tasks.items():
            framework = self.frameworks.get(framework_id)
            if framework is None:
                continue
            missing = [
                task.task_id
                for task in tasks.values()
                if not task.state.terminal and (framework_id, task.task_id.value) not in reported
            ]
            if missing:
                for task_id in missing:
                    log.warning(
                        "task %s of framework %s unknown to agent %s during re-registration: "
                        "reconciling with the agent", task_id.value, framework_id, agent.id,
                    )  # fmt: skip
                asks.append(
                    internal.ReconcileTasks(
                        framework_id=FrameworkID(value=framework_id),
                        task_ids=missing,
                        framework_info=framework.info,
                    )
                )
        return asks

    def _unreported_unreachable(self, agent: Agent) -> list[internal.ReconcileTasks]:
        """As Mesos, once an unreachable agent is back none of its tasks stay unreachable:
        those it reported were adopted, the others leave the master. Those it never
        received (launched while it hung), their framework told TASK_UNREACHABLE and no
        end, are asked of the agent, which ends them with a TASK_DROPPED of its own."""
        asks = []
        for framework in self.frameworks.values():
            left = [t for t in framework.unreachable_tasks.values() if t.agent_id.value == agent.id]
            for task in left:
                del framework.unreachable_tasks[task.task_id.value]
            unheard = [
                t.task_id for t in left
                if t.status_update_state is None or not t.status_update_state.terminal
            ]  # fmt: skip
            if unheard:
                log.warning(
                    "tasks %s of framework %s unknown to agent %s, back from unreachable: "
                    "reconciling with the agent", [t.value for t in unheard], framework.id, agent.id,
                )  # fmt: skip
                asks.append(
                    internal.ReconcileTasks(
                        framework_id=FrameworkID(value=framework.id),
                        task_ids=unheard,
                        framework_info=framework.info,
                    )
                )
        return asks

    def _framework_for(
        self, framework_id: str, reported: dict[str, internal.FrameworkInfo]
    ) -> Framework:
        framework = self.frameworks.get(framework_id)
        if framework is None:
            info = reported.get(framework_id) or internal.FrameworkInfo(
                id=FrameworkID(value=framework_id)
            )
            framework = self._recover_framework(framework_id, info)
        return framework

    async def _reregister_known(
        self, agent: Agent, info: internal.AgentInfo, pid: str, call: internal.Register
    ) -> Agent:
        """The agent reconnected (either side may have restarted): reconcile its tasks."""
        # Pings that found no stream while it was away do not count against it.
        agent.pinged = False
        agent.ping_timeouts = 0
        self._close_agent_stream(agent)
        if info != agent.info:
            await self.registry.readmit_agent(info)
            agent.info = info
            self.allocator.update_agent(agent.id, agent.total_resources)
        agent.pid = pid
        agent.version = call.version
        agent.reregistered_time = time.time()
        self._remove_unreported_executors(agent, call)
        before = agent.used_resources()
        self._adopt_reported(agent, call)
        if agent.used_resources() != before:
            # Resources of adopted tasks are in use: re-add the agent with them
            # (its offers go, as the allocator forgets what it had offered).
            for offer in list(agent.offers.values()):
                self.remove_offer(offer, rescind=True, recover=False)
            self.allocator.remove_agent(agent.id)
            self.allocator.add_agent(
                agent.id,
                agent.hostname,
                agent.total_resources,
                used=agent.used_resources(),
            )
        self.allocator.activate_agent(agent.id)
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
                    self.recover_executor(agent, framework_id, executor_id)

    def _close_agent_stream(self, agent: Agent) -> None:
        stream, agent.stream, agent.stream_id = agent.stream, None, None
        if stream is not None:
            stream.close()

    # --- health checks, disconnection and unreachability -----------------------------------

    async def _observe_agent(self, agent: Agent) -> None:
        """Mesos's `SlaveObserver`: a PING every ``--agent_ping_timeout`` while the agent is
        registered; after ``--max_agent_ping_timeouts`` in a row without a PONG it is
        unreachable. A disconnected agent cannot answer, so its pings count as missed."""
        loop = asyncio.get_running_loop()
        ping = internal.AgentEvent(type=internal.AgentEventType.PING)
        while self.agents.get(agent.id) is agent:
            deadline = loop.time() + self.flags.agent_ping_timeout
            agent.pinged = True  # before sending: the PONG may come back before send returns
            try:
                # A hung agent stops reading: once the socket buffers fill, a send waits
                # forever, which must not stop the count.
                async with asyncio.timeout_at(deadline):
                    await agent.send(ping)
            except TimeoutError:
                pass
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            if self.agents.get(agent.id) is not agent or not agent.pinged:
                continue
            agent.ping_timeouts += 1
            if agent.ping_timeouts >= self.flags.max_agent_ping_timeouts:
                log.info(
                    "agent %s answered none of the last %d pings: unreachable",
                    agent.id,
                    agent.ping_timeouts,
                )
                self.counters["master/slave_unreachable_scheduled"] += 1
                await self.mark_unreachable(agent)
                return

    def agent_pong(self, agent: Agent) -> None:
        agent.pinged = False
        agent.ping_timeouts = 0

    def agent_disconnected(self, agent: Agent, stream_id: str) -> None:
        if (
            agent.stream_id != stream_id
            or self.agents.get(agent.id) is not agent
            or self.stopping
        ):
            return
        self._close_agent_stream(agent)
        agent.connected = agent.active = False
        self.allocator.deactivate_agent(agent.id)
        for offer in list(agent.offers.values()):
            self.remove_offer(offer, rescind=True)
        for framework_id in sorted(set(agent.tasks) | set(agent.executors)):
            framework = self.frameworks.get(framework_id)
            if framework is not None and not framework.info.checkpoint:
                self.spawn(self._forward_all(framework, self._remove_framework_from(agent, framework)))
        log.info(
            "agent %s disconnected; unreachable after %d missed pings unless it comes back",
            agent.id,
            self.flags.max_agent_ping_timeouts,
        )

    def _remove_framework_from(self, agent: Agent, framework: Framework) -> list[TaskStatus]:
        """As Mesos: a framework without checkpointing loses what it ran on an agent that
        disconnected (nothing of it survives an agent restart); returns the updates to send."""
        statuses = []
        for task in list(agent.tasks.get(framework.id, {}).values()):
            if not task.state.terminal:
                status = master_status(
                    task.task_id.value,
                    TaskState.TASK_LOST,
                    Reason.REASON_AGENT_DISCONNECTED,
                    f"Agent {agent.hostname} disconnected",
                    agent_id=agent.id,
                    executor_id=task.executor_id,
                )
                self.update_task(task, status)
                statuses.append(status)
            self.remove_task(task)
        for executor_id in list(agent.executors.get(framework.id, {})):
            self.recover_executor(agent, framework.id, executor_id)
        return statuses

    async def _forward_all(self, framework: Framework, statuses: list[TaskStatus]) -> None:
        for status in statuses:
            await self.forward_update(framework, status)

    async def mark_unreachable(self, agent: Agent) -> None:
        """Its health check failed: the agent leaves the cluster until it re-registers."""
        now = time.time()
        await self.registry.mark_agent_unreachable(agent.id, now)
        self.counters["master/slave_unreachable_completed"] += 1
        self.counters["master/slave_removals"] += 1
        self.unreachable_agents[agent.id] = now
        await self._remove_agent(
            agent,
            TaskState.TASK_UNREACHABLE,
            Reason.REASON_AGENT_REMOVED,
            f"Agent {agent.hostname} is unreachable",
            unreachable_time=now,
        )

    async def _remove_agent(
        self,
        agent: Agent,
        state: TaskState,
        reason: Reason,
        message: str,
        unreachable_time: float | None = None,
    ) -> None:
        """Takes an agent out of the cluster; its tasks go `state` (TASK_LOST for frameworks not PARTITION_AWARE)."""
        self.allocator.remove_agent(agent.id)
        for offer in list(agent.offers.values()):
            self.remove_offer(offer, rescind=True, recover=False)
        for framework_id, tasks in list(agent.tasks.items()):
            framework = self.frameworks.get(framework_id)
            if framework is None:
                continue
            for task in list(tasks.values()):
                await self._lose_task(
                    framework, task, state, reason, message, unreachable_time
                )
        for framework_id in agent.executors:
            framework = self.frameworks.get(framework_id)
            if framework is not None:
                framework.executors.pop(agent.id, None)
        del self.agents[agent.id]
        self._close_agent_stream(agent)
        self.notify("AGENT_REMOVED", agent.id)

    async def _lose_task(
        self,
        framework: Framework,
        task: Task,
        state: TaskState,
        reason: Reason,
        message: str,
        unreachable_time: float | None,
    ) -> None:
        unreachable = state is TaskState.TASK_UNREACHABLE
        was_terminal = task.state.terminal
        if not was_terminal:
            sent = state if framework.partition_aware else TaskState.TASK_LOST
            status = master_status(
                task.task_id.value,
                sent,
                reason,
                message,
                agent_id=task.agent_id.value,
                executor_id=task.executor_id,
                unreachable_time=unreachable_time,
            )
            self.update_task(
                task, status, state if unreachable else None, recover=False
            )
            await self.forward_update(framework, status)
        self.remove_task(task, unreachable=unreachable and not was_terminal)

    async def _expire_recovered_agents(self) -> None:
        """Agents from the registry that did not re-register in ``--agent_reregister_timeout``."""
        for agent_id in list(self.recovered_agents):
            now = time.time()
            await self.registry.mark_agent_unreachable(agent_id, now)
            del self.recovered_agents[agent_id]
            self.unreachable_agents[agent_id] = now
            self.counters["master/recovery_slave_removals"] += 1
            log.info(
                "agent %s did not re-register after master failover: unreachable",
                agent_id,
            )

    async def unregister_agent(self, agent: Agent) -> None:
        """UNREGISTER: the agent is leaving for good (its tasks are lost)."""
        await self.registry.remove_agent(agent.id)
        self.counters["master/slave_removals"] += 1
        await self._remove_agent(
            agent,
            TaskState.TASK_LOST,
            Reason.REASON_AGENT_REMOVED,
            f"Agent {agent.hostname} removed",
        )

    async def mark_agent_gone(self, agent_id: str) -> None:
        """The operator's MARK_AGENT_GONE: the agent never comes back; its tasks are gone."""
        if agent_id in self.gone_agents:
            return
        now = time.time()
        await self.registry.mark_agent_gone(agent_id, now)
        self.gone_agents[agent_id] = now
        self.unreachable_agents.pop(agent_id, None)
        self.recovered_agents.pop(agent_id, None)
        agent = self.agents.get(agent_id)
        if agent is not None:
            await agent.send(
                internal.AgentEvent(
                    type=internal.AgentEventType.SHUTDOWN,
                    shutdown=internal.Shutdown(
                        message="Agent marked gone by the operator"
                    ),
                )
            )
            await self._remove_agent(
                agent,
                TaskState.TASK_GONE_BY_OPERATOR,
                Reason.REASON_AGENT_REMOVED_BY_OPERATOR,
                f"Agent {agent.hostname} marked gone by the operator",
            )
        for framework in self.frameworks.values():
            for task in [
                t
                for t in framework.unreachable_tasks.values()
                if t.agent_id.value == agent_id
            ]:
                await self._lose_task(
                    framework,
                    task,
                    TaskState.TASK_GONE_BY_OPERATOR,
                    Reason.REASON_AGENT_REMOVED_BY_OPERATOR,
                    "Agent marked gone by the operator",
                    None,
                )

    # --- messages -------------------------------------------------------------------------

    async def executor_message(
        self, agent: Agent, msg: internal.ExecutorToFramework
    ) -> None:
        self.counters["master/messages_executor_to_framework"] += 1
        framework = self.frameworks.get(msg.framework_id.value)
        if framework is None or not framework.connected:
            self.counters["master/invalid_executor_to_framework_messages"] += 1
            return
        self.counters["master/valid_executor_to_framework_messages"] += 1
        await framework.send(
            sched.Event(
                type=sched.EventType.MESSAGE,
                message=sched.FrameworkMessage(
                    agent_id=AgentID(value=agent.id),
                    executor_id=msg.executor_id,
                    data=msg.data,
                ),
            )
        )

    async def exited_executor(self, agent: Agent, msg: internal.ExitedExecutor) -> None:
        self.counters["master/messages_exited_executor"] += 1
        self.recover_executor(agent, msg.framework_id.value, msg.executor_id.value)
        framework = self.frameworks.get(msg.framework_id.value)
        if framework is not None:
            await framework.send(
                sched.Event(
                    type=sched.EventType.FAILURE,
                    failure=sched.Failure(
                        agent_id=AgentID(value=agent.id),
                        executor_id=msg.executor_id,
                        # Always there, as in Mesos (-1 when unknown): clients such as
                        # pymesos read it unconditionally.
                        status=msg.status if msg.status is not None else -1,
                    ),
                )
            )

    async def framework_message(
        self, framework: Framework, msg: sched.FrameworkMessage
    ) -> None:
        """MESSAGE from a scheduler: to the executor through its agent."""
        self.counters["master/messages_framework_to_executor"] += 1
        agent = self.agents.get(msg.agent_id.value)
        if agent is None or not agent.connected:
            self.counters["master/invalid_framework_to_executor_messages"] += 1
            return
        self.counters["master/valid_framework_to_executor_messages"] += 1
        await agent.send(
            internal.AgentEvent(
                type=internal.AgentEventType.FRAMEWORK_MESSAGE,
                framework_message=internal.FrameworkToExecutor(
                    framework_id=FrameworkID(value=framework.id),
                    executor_id=msg.executor_id,
                    data=msg.data,
                ),
            )
        )

    async def shutdown_executor(
        self, framework: Framework, call: sched.Shutdown
    ) -> None:
        agent = self.agents.get(call.agent_id.value)
        if agent is None or not agent.connected:
            log.warning(
                "cannot shut down executor %s: agent not connected",
                call.executor_id.value,
            )
            return
        await agent.send(
            internal.AgentEvent(
                type=internal.AgentEventType.SHUTDOWN_EXECUTOR,
                shutdown_executor=internal.ShutdownExecutor(
                    framework_id=FrameworkID(value=framework.id),
                    executor_id=call.executor_id,
                ),
            )
        )
