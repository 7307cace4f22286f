"""Messages built from other messages, for both daemons (Mesos's `common/protobuf_utils.cpp`)."""

from __future__ import annotations

from mesilla.v1.mesos import AgentID, FrameworkID, Task, TaskInfo, TaskState


def create_task(
    info: TaskInfo, state: TaskState, framework_id: FrameworkID, agent_id: AgentID, user: str | None = None
) -> Task:
    """The `Task` record of a TaskInfo (Mesos's `protobuf::createTask`), with no statuses yet."""
    return Task(
        name=info.name,
        task_id=info.task_id,
        framework_id=framework_id,
        agent_id=agent_id,
        state=state,
        resources=list(info.resources),
        executor_id=info.executor.executor_id if info.executor is not None else None,
        labels=info.labels,
        discovery=info.discovery,
        container=info.container,
        health_check=info.health_check,
        check=info.check,
        kill_policy=info.kill_policy,
        user=user,
        limits=dict(info.limits),
    )
