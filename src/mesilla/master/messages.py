"""Messages the master relays between schedulers and their executors.

A scheduler's MESSAGE goes to the executor through its agent, an executor's
message to its framework as MESSAGE; SHUTDOWN (a scheduler stopping one
executor) goes to the agent; an agent's EXITED_EXECUTOR gives the executor's
resources back and tells the framework (FAILURE). A peer that is not
connected loses the message, counted as invalid, as in Mesos.
"""

from __future__ import annotations

import logging
from collections import Counter

from mesilla.master.agent import Agent
from mesilla.master.book import Book
from mesilla.master.framework import Framework
from mesilla.master.outbox import Outbox
from mesilla.master.tasks import Tasks
from mesilla.v1 import internal
from mesilla.v1 import scheduler as sched

log = logging.getLogger(__name__)


class Relay:
    def __init__(self, book: Book, tasks: Tasks, outbox: Outbox, counters: Counter[str]) -> None:
        self._book = book
        self._tasks = tasks
        self._outbox = outbox
        self._counters = counters

    async def executor_message(self, agent: Agent, msg: internal.ExecutorToFramework) -> None:
        self._counters["master/messages_executor_to_framework"] += 1
        framework = self._book.frameworks.get(msg.framework_id.value)
        if framework is None or not framework.connected:
            self._counters["master/invalid_executor_to_framework_messages"] += 1
            return
        self._counters["master/valid_executor_to_framework_messages"] += 1
        await self._outbox.executor_message(framework, agent.id, msg.executor_id, msg.data)

    async def exited_executor(self, agent: Agent, msg: internal.ExitedExecutor) -> None:
        self._counters["master/messages_exited_executor"] += 1
        self._tasks.recover_executor(agent, msg.framework_id.value, msg.executor_id.value)
        framework = self._book.frameworks.get(msg.framework_id.value)
        if framework is not None:
            await self._outbox.failure(framework, agent.id, msg.executor_id, msg.status)

    async def framework_message(self, framework: Framework, msg: sched.FrameworkMessage) -> None:
        """MESSAGE from a scheduler: to the executor through its agent."""
        self._counters["master/messages_framework_to_executor"] += 1
        agent = self._book.agents.get(msg.agent_id.value)
        if agent is None or not agent.connected:
            self._counters["master/invalid_framework_to_executor_messages"] += 1
            return
        self._counters["master/valid_framework_to_executor_messages"] += 1
        await self._outbox.framework_message(agent, framework.id, msg.executor_id, msg.data)

    async def shutdown_executor(self, framework: Framework, call: sched.Shutdown) -> None:
        agent = self._book.agents.get(call.agent_id.value)
        if agent is None or not agent.connected:
            log.warning("cannot shut down executor %s: agent not connected", call.executor_id.value)
            return
        await self._outbox.shutdown_executor(agent, framework.id, call.executor_id)
