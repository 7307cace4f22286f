"""Framework messages, both ways: FRAMEWORK_MESSAGE from the master to a running
executor, and an executor's MESSAGE to its framework through the master."""

from __future__ import annotations

import logging

from mesilla.agent.agent import Agent
from mesilla.agent.state import Executor, ExecutorState, Framework
from mesilla.v1 import executor as ev
from mesilla.v1 import internal

log = logging.getLogger(__name__)


def framework_message(agent: Agent, framework_id: str, executor_id: str, data: bytes) -> None:
    framework = agent.frameworks.get(framework_id)
    executor = framework.executors.get(executor_id) if framework else None
    if executor is None or executor.state is not ExecutorState.RUNNING:
        log.warning("Dropping a framework message for executor %s: not running", executor_id)
        agent.metrics["invalid_framework_messages"] += 1
        return
    agent.metrics["valid_framework_messages"] += 1
    agent.send_to_executor(
        executor, ev.Event(type=ev.EventType.MESSAGE, message=ev.MessageEvent(data=data))
    )


def executor_message(agent: Agent, framework: Framework, executor: Executor, data: bytes) -> None:
    if agent.info.id is None:
        return
    agent.master.send(
        internal.AgentCall(
            type=internal.AgentCallType.EXECUTOR_MESSAGE,
            agent_id=agent.info.id,
            executor_message=internal.ExecutorToFramework(
                framework_id=framework.id, executor_id=executor.info.executor_id, data=data
            ),
        )
    )
