"""Messages the master relays between schedulers and their executors.

A scheduler's MESSAGE goes to the executor through its agent, an executor's
message to its framework as MESSAGE; SHUTDOWN (a scheduler stopping one
executor) goes to the agent; an agent's EXITED_EXECUTOR gives the executor's
resources back and tells the framework (FAILURE). A peer that is not
connected loses the message, counted as invalid, as in Mesos.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from mesilla.master.agent import Agent
from mesilla.master.framework import Framework
from mesilla.master.parts import Parts
from mesilla.master.tasks import Tasks
from mesilla.v1 import internal
from mesilla.v1 import scheduler as sched

log = logging.getLogger(__name__)

# The one a relayed message goes to: an executor's agent, or a framework.
Peer = TypeVar("Peer", Agent, Framework)


class Relay:
    def __init__(self, parts: Parts, tasks: Tasks) -> None:
        self._parts = parts
        self._tasks = tasks

    async def executor_message(self, agent: Agent, msg: internal.ExecutorToFramework) -> None:
        framework = self._deliverable(
            "executor_to_framework", self._parts.book.frameworks.get(msg.framework_id.value)
        )
        if framework is not None:
            await self._parts.outbox.executor_message(framework, agent.id, msg.executor_id, msg.data)

    async def exited_executor(self, agent: Agent, msg: internal.ExitedExecutor) -> None:
        self._parts.counters["master/messages_exited_executor"] += 1
        self._tasks.recover_executor(agent, msg.framework_id.value, msg.executor_id.value)
        framework = self._parts.book.frameworks.get(msg.framework_id.value)
        if framework is not None:
            await self._parts.outbox.failure(framework, agent.id, msg.executor_id, msg.status)

    async def framework_message(self, framework: Framework, msg: sched.FrameworkMessage) -> None:
        """MESSAGE from a scheduler: to the executor through its agent."""
        agent = self._deliverable("framework_to_executor", self._parts.book.agents.get(msg.agent_id.value))
        if agent is not None:
            await self._parts.outbox.framework_message(agent, framework.id, msg.executor_id, msg.data)

    def _deliverable(self, direction: str, peer: Peer | None) -> Peer | None:
        """Counts a relayed message (``master/messages_<direction>``), as valid when its peer
        is connected, else as invalid (it is dropped); returns the peer to send to, if any."""
        counters = self._parts.counters
        counters[f"master/messages_{direction}"] += 1
        connected = peer is not None and peer.connected
        counters[f"master/{'valid' if connected else 'invalid'}_{direction}_messages"] += 1
        return peer if connected else None

    async def shutdown_executor(self, framework: Framework, call: sched.Shutdown) -> None:
        agent = self._parts.book.agents.get(call.agent_id.value)
        if agent is None or not agent.connected:
            log.warning("cannot shut down executor %s: agent not connected", call.executor_id.value)
            return
        await self._parts.outbox.shutdown_executor(agent, framework.id, call.executor_id)
