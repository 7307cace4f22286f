"""RUN_TASK and RUN_TASK_GROUP: from the master's event to the executor's container.

As Mesos's `Slave::run` and `launchExecutor`: the tasks are checkpointed
before anything is launched (the framework, a new executor, a task group all
at once), then either queued for an executor that is still starting (a new
one is launched in its container) or sent to a running one, after its
container has grown by their resources. A launch that fails ends the
executor's tasks FAILED, REASON_CONTAINER_LAUNCH_FAILED.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from mesilla.agent import paths, resources, status_updates, terminations
from mesilla.agent.agent import Agent, partition_aware
from mesilla.agent.executor_auth import ENV as TOKEN_ENV
from mesilla.agent.executor_auth import executor_credentials
from mesilla.agent.executors import (
    command_executor_info,
    container_config,
    executor_environment,
    executor_user,
    new_container_id,
)
from mesilla.agent.state import (
    Executor,
    ExecutorState,
    Framework,
    FrameworkState,
)
from mesilla.common.durations import format_duration
from mesilla.common.errors import ContainerError
from mesilla.common.protobuf_utils import create_task
from mesilla.containerizer.types import ContainerConfig, ContainerTermination
from mesilla.v1 import executor as ev
from mesilla.v1.mesos import (
    ExecutorInfo,
    FrameworkInfo,
    Reason,
    Task,
    TaskGroupInfo,
    TaskInfo,
    TaskState,
)

log = logging.getLogger(__name__)


def run_task(agent: Agent, framework_info: FrameworkInfo, task: TaskInfo) -> None:
    framework = _framework_for_launch(agent, framework_info)
    if framework is None:
        return
    command_task = task.executor is None
    info = task.executor or command_executor_info(framework_info, task)
    if info.framework_id is None:
        info.framework_id = framework.id
    _deliver(agent, framework, info, [task], None, command_task)


def run_task_group(
    agent: Agent, framework_info: FrameworkInfo, info: ExecutorInfo, group: TaskGroupInfo
) -> None:
    framework = _framework_for_launch(agent, framework_info)
    if framework is None:
        return
    if info.framework_id is None:
        info.framework_id = framework.id
    _deliver(agent, framework, info, group.tasks, group, False)


def _framework_for_launch(agent: Agent, info: FrameworkInfo) -> Framework | None:
    assert info.id is not None
    framework = agent.frameworks.get(info.id.value)
    if framework is None:
        framework = agent.frameworks[info.id.value] = Framework(info)
    elif framework.state is FrameworkState.TERMINATING:
        log.warning("Ignoring a launch for terminating framework %s", info.id.value)
        return None
    else:
        framework.info = info
    return framework


def _deliver(
    agent: Agent,
    framework: Framework,
    info: ExecutorInfo,
    tasks: list[TaskInfo],
    group: TaskGroupInfo | None,
    command_task: bool,
) -> None:
    executor = framework.executors.get(info.executor_id.value)
    if executor is not None and any(executor.has_task(t.task_id.value) for t in tasks):
        log.warning("Ignoring a duplicate launch of tasks already on executor %s", executor)
        return
    if executor is None:
        try:
            executor = _create_executor(agent, framework, info, command_task)
        except OSError as exc:  # a full or broken disk: the tasks end, the agent goes on
            log.warning("Failed to create the sandbox of executor %s: %s", info.executor_id.value, exc)
            _drop(agent, framework, info, tasks, f"Failed to create executor directory: {exc}")
            if not command_task:  # as Mesos: the master added the executor for this launch
                terminations.send_exited_executor(agent, framework.id, info.executor_id, None)
            return
        written = _queue(agent, framework, executor, tasks, group, new_executor=True)
        agent.spawn(
            _launch_executor(agent, framework, executor, tasks[0], written), f"launch {executor}"
        )
    elif executor.state is ExecutorState.REGISTERING:
        _queue(agent, framework, executor, tasks, group)
    elif executor.state is ExecutorState.RUNNING:
        if group is not None:
            event = ev.Event(
                type=ev.EventType.LAUNCH_GROUP, launch_group=ev.LaunchGroup(task_group=group)
            )
        else:
            event = ev.Event(type=ev.EventType.LAUNCH, launch=ev.Launch(task=tasks[0]))
        launched = [executor.add_launched(task) for task in tasks]
        checkpoint_launch(
            agent, framework, executor, launched, then=lambda: _grow_and_deliver(agent, executor, event)
        )
    else:
        _drop(agent, framework, info, tasks, "Executor terminating")


def _drop(
    agent: Agent, framework: Framework, info: ExecutorInfo, tasks: list[TaskInfo], message: str
) -> None:
    """Tasks that never reach an executor: TASK_DROPPED (TASK_LOST to a framework that is
    not PARTITION_AWARE), REASON_EXECUTOR_TERMINATED, as Mesos."""
    state = TaskState.TASK_DROPPED if partition_aware(framework.info) else TaskState.TASK_LOST
    for task in tasks:
        status_updates.agent_update(
            agent,
            framework.id,
            None,
            task.task_id.value,
            state,
            Reason.REASON_EXECUTOR_TERMINATED,
            message,
            executor_id=info.executor_id.value,
        )


async def _grow_and_deliver(agent: Agent, executor: Executor, event: ev.Event) -> None:
    """As Mesos: the container gets the new tasks' resources before the tasks."""
    await resources.update_resources(agent, executor)
    if executor.stream is not None:
        await executor.stream.send(event)


def _queue(
    agent: Agent,
    framework: Framework,
    executor: Executor,
    tasks: list[TaskInfo],
    group: TaskGroupInfo | None,
    *,
    new_executor: bool = False,
) -> asyncio.Task[None]:
    if group is not None:
        executor.queue_group(group)
    else:
        for task in tasks:
            executor.queue_task(task)
    staging = TaskState.TASK_STAGING
    return checkpoint_launch(
        agent,
        framework,
        executor,
        [create_task(t, staging, executor.framework_id, agent.id()) for t in tasks],
        new_executor=new_executor,
    )


def checkpoint_launch(
    agent: Agent,
    framework: Framework,
    executor: Executor,
    tasks: list[Task],
    *,
    new_executor: bool = False,
    then: Callable[[], Awaitable[None]] | None = None,
) -> asyncio.Task[None]:
    """Checkpoints a launch before anything is launched, as Mesos: the framework, a new
    executor, a task group all at once; `then` runs once that is durable, after the
    executor's earlier jobs (`in_order`), as is whatever sends tasks to the executor."""
    if not executor.checkpoint:
        return agent.in_order(executor, then, f"deliver to {executor}")
    launch = agent.checkpointer.meta(agent.id().value).launch(
        executor.id,
        executor.container_id.value,
        tasks,
        framework=framework.info,
        executor=executor.info if new_executor else None,
    )
    write = agent.checkpointer.launch(launch)

    async def checkpoint_then() -> None:
        try:
            await write
        except OSError as exc:
            # Mesos aborts here: an agent that cannot checkpoint cannot promise
            # recovery. It stops (its executors live on) and recovers when restarted.
            log.critical("Failed to checkpoint a launch on executor %s: %s", executor, exc)
            agent.shutdown_requested.set()
            raise
        if then is not None:
            await then()

    return agent.in_order(executor, checkpoint_then, f"checkpoint launch on {executor}")


def _create_executor(
    agent: Agent, framework: Framework, info: ExecutorInfo, command_task: bool
) -> Executor:
    agent_id = agent.id().value
    container_id = new_container_id()
    fw, ex = framework.id.value, info.executor_id.value
    work_dir = agent.flags.work_dir
    directory = paths.executor_run_dir(work_dir, agent_id, fw, ex, container_id.value)
    os.makedirs(directory, exist_ok=True)
    paths.update_latest_symlink(
        paths.executor_latest_run_path(work_dir, agent_id, fw, ex), directory
    )
    executor = Executor(
        info=info,
        framework_id=framework.id,
        agent_id=agent.id(),
        container_id=container_id,
        directory=directory,
        checkpoint=framework.checkpoint,
        command_task=command_task,
    )
    framework.executors[ex] = executor
    agent.attach_sandbox(executor)
    log.info("Launching executor %s in container %s", executor, container_id.value)
    return executor


def _executor_config(
    agent: Agent, framework: Framework, executor: Executor, first_task: TaskInfo
) -> ContainerConfig:
    """What the executor's container runs: its command, environment and secrets."""
    env = executor_environment(
        agent.flags,
        executor.info,
        directory=executor.directory,
        agent_id=agent.id().value,
        endpoint=agent.endpoint,
        checkpoint=executor.checkpoint,
    )
    if agent.tls is not None:
        env.update(agent.tls.environment())
    config = container_config(
        executor.info,
        directory=executor.directory,
        environment=env,
        task=first_task if executor.command_task else None,
        resources=executor.allocated_resources(),
        user=executor_user(agent.flags, framework.info, executor.info),
        limits=resources.startup_limits(agent, executor),
    )
    config.executor_secrets.update(
        executor_credentials(executor.info.principal, agent.http_credentials)
    )
    if agent.executor_tokens is not None:
        config.executor_secrets[TOKEN_ENV] = agent.executor_tokens.sign(
            executor.framework_id.value, executor.id, executor.container_id.value
        )
    return config


async def _launch_executor(
    agent: Agent,
    framework: Framework,
    executor: Executor,
    first_task: TaskInfo,
    checkpointed: asyncio.Task[None],
) -> None:
    # Not launched unless checkpointed (a failure is logged and stops the agent).
    await asyncio.shield(checkpointed)
    try:
        config = _executor_config(agent, framework, executor, first_task)
        await agent.containerizer.launch(executor.container_id, config)
    except Exception as exc:  # every launch failure fails the executor's tasks
        _launch_failed(agent, executor, exc)
        return
    if executor.checkpoint:
        await _checkpoint_pid(agent, executor)
    timeout = agent.flags.executor_registration_timeout
    loop = asyncio.get_running_loop()
    executor.timers.append(loop.call_later(timeout, _registration_timeout, agent, executor))
    agent.spawn(_watch_executor(agent, executor), f"wait {executor}")


def _launch_failed(agent: Agent, executor: Executor, exc: Exception) -> None:
    """The tasks' status carries the failure, with the containerizer's reason."""
    agent.metrics["container_launch_errors"] += 1
    log.error("Failed to launch container of executor %s: %s", executor, exc)
    reason = exc.reason if isinstance(exc, ContainerError) else None
    executor.pending_termination = ContainerTermination(
        state=TaskState.TASK_FAILED.value,
        reason=reason or Reason.REASON_CONTAINER_LAUNCH_FAILED,
        message=f"Failed to launch container: {exc}",
    )
    terminations.executor_terminated(agent, executor, None)


async def _checkpoint_pid(agent: Agent, executor: Executor) -> None:
    try:
        status = await agent.containerizer.status(executor.container_id)
    except ContainerError as exc:
        log.warning("No pid for the container of executor %s: %s", executor, exc)
        return
    if status.executor_pid is not None:
        await agent.checkpointer.forked_pid(agent.run_of(executor), status.executor_pid)


async def _watch_executor(agent: Agent, executor: Executor) -> None:
    termination = await agent.containerizer.wait(executor.container_id)
    terminations.executor_terminated(agent, executor, termination)


def _registration_timeout(agent: Agent, executor: Executor) -> None:
    if executor.state is not ExecutorState.REGISTERING:
        return
    timeout = agent.flags.executor_registration_timeout
    log.warning("Executor %s did not register within %ss: destroying it", executor, timeout)
    executor.state = ExecutorState.TERMINATING
    executor.pending_termination = ContainerTermination(
        state=TaskState.TASK_FAILED.value,
        reason=Reason.REASON_EXECUTOR_REGISTRATION_TIMEOUT,
        message=f"Executor did not register within {format_duration(timeout)}",
    )
    agent.spawn(agent.containerizer.destroy(executor.container_id), f"destroy {executor}")
