"""Status updates the agent makes or receives, on their way to the master.

An update (from an executor, or made by the agent: SOURCE_AGENT, a fresh
uuid) first changes the task's state on its executor (an invalid transition
is dropped), then goes to the `StatusUpdateManager`, which checkpoints it in
the task's `task.updates` (for checkpointing frameworks) and delivers it
reliably, through the agent's `_forward`. A terminal update shrinks the
executor's container to what is still running.
"""

from __future__ import annotations

import logging
import time
import uuid

from mesilla.agent import paths, resources
from mesilla.agent.agent import Agent
from mesilla.agent.state import Executor, ExecutorState, TaskStateError
from mesilla.agent.status_update_manager import StatusUpdateError
from mesilla.v1 import internal
from mesilla.v1.mesos import (
    ContainerStatus,
    ExecutorID,
    FrameworkID,
    Reason,
    StatusSource,
    TaskID,
    TaskResourceLimitation,
    TaskState,
    TaskStatus,
)

log = logging.getLogger(__name__)


def agent_update(
    agent: Agent,
    framework_id: FrameworkID,
    executor: Executor | None,
    task_id: str,
    state: TaskState,
    reason: Reason,
    message: str,
    *,
    executor_id: str | None = None,
    limitation: TaskResourceLimitation | None = None,
) -> None:
    """A status update the agent itself generates (SOURCE_AGENT, a fresh uuid)."""
    ex_id = (
        executor.info.executor_id
        if executor
        else (ExecutorID(value=executor_id) if executor_id else None)
    )
    status = TaskStatus(
        task_id=TaskID(value=task_id),
        state=state,
        message=message,
        source=StatusSource.SOURCE_AGENT,
        reason=reason,
        agent_id=agent.info.id,
        executor_id=ex_id,
        timestamp=time.time(),
        uuid=uuid.uuid4().bytes,
        container_status=ContainerStatus(container_id=executor.container_id) if executor else None,
        limitation=limitation,
    )
    record_update(agent, framework_id, executor, status)


def record_update(
    agent: Agent, framework_id: FrameworkID, executor: Executor | None, status: TaskStatus
) -> bool:
    if executor is not None:
        try:
            executor.update_task_state(status)
        except TaskStateError as exc:
            log.error("Dropping status update: %s", exc)
            agent.metrics["invalid_status_updates"] += 1
            return False
    path = None
    if executor is not None and executor.checkpoint:
        path = paths.task_updates_path(*agent.run_of(executor), status.task_id.value)
    try:
        agent.status_updates.update(
            internal.StatusUpdate(framework_id=framework_id, status=status), path
        )
    except StatusUpdateError as exc:
        log.error("Dropping status update: %s", exc)
        agent.metrics["invalid_status_updates"] += 1
        return False
    agent.metrics["valid_status_updates"] += 1
    if executor is not None and status.state.terminal and executor.state is ExecutorState.RUNNING:
        agent.spawn(resources.update_resources(agent, executor), f"resize {executor}")
    return True
