"""Ending things: KILL_TASK, executor and framework shutdowns, the agent's own
shutdown, and an executor whose container ended (Mesos's `Slave::killTask`,
`shutdownExecutor`, `shutdownFramework`, `executorTerminated`,
`removeExecutor` and `removeFramework`).

An executor asked to shut down gets SHUTDOWN and its grace period, then its
container is destroyed. When the container ends, every task it had not ended
gets a terminal update (the reason the containerizer or the agent recorded),
the master hears EXITED_EXECUTOR, and the executor and then its framework
are removed once nothing of theirs awaits an acknowledgement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from mesilla.agent import paths, status_updates
from mesilla.agent.agent import Agent, AgentStatus, partition_aware
from mesilla.agent.executors import shutdown_grace_period
from mesilla.agent.state import Executor, ExecutorState, Framework, FrameworkState
from mesilla.common.files import remove_file
from mesilla.containerizer.types import ContainerTermination
from mesilla.v1 import executor as ev
from mesilla.v1 import internal
from mesilla.v1.mesos import (
    ExecutorID,
    FrameworkID,
    KillPolicy,
    Reason,
    TaskResourceLimitation,
    TaskState,
)

log = logging.getLogger(__name__)

# How long stopping waits for one container's destroy (a hung runtime must not hang it).
DESTROY_TIMEOUT = 60.0


def kill_task(
    agent: Agent, framework_id: FrameworkID, task_id: str, kill_policy: KillPolicy | None
) -> None:
    if agent.status in (AgentStatus.RECOVERING, AgentStatus.TERMINATING):
        log.warning("Ignoring kill of task %s: the agent is %s", task_id, agent.status.value)
        return
    framework = agent.frameworks.get(framework_id.value)
    if framework is None or framework.state is FrameworkState.TERMINATING:
        log.warning("Ignoring kill of task %s of unknown or terminating framework", task_id)
        return
    executor = framework.executor_of_task(task_id)
    if executor is None:
        state = TaskState.TASK_DROPPED if partition_aware(framework.info) else TaskState.TASK_LOST
        status_updates.agent_update(
            agent, framework.id, None, task_id, state,
            Reason.REASON_EXECUTOR_TERMINATED, "Cannot find executor",
        )  # fmt: skip
        return
    if executor.state in (ExecutorState.TERMINATING, ExecutorState.TERMINATED):
        log.warning("Ignoring kill of task %s: executor %s is ending", task_id, executor)
        return
    if task_id in executor.queued_tasks:
        _kill_queued(agent, framework, executor, task_id)
        return
    if task_id in executor.launched_tasks:
        executor.killing.add(task_id)
        kill = ev.Kill(task_id=executor.launched_tasks[task_id].task_id, kill_policy=kill_policy)
        agent.send_to_executor(executor, ev.Event(type=ev.EventType.KILL, kill=kill))


def _kill_queued(agent: Agent, framework: Framework, executor: Executor, task_id: str) -> None:
    """A task not delivered yet ends KILLED here, with the rest of its group."""
    group = executor.queued_group_of(task_id)
    message = (
        "A task within the task group was killed before delivery to the executor"
        if group is not None and executor.state is ExecutorState.REGISTERING
        else "Killed before delivery to the executor"
    )
    victims = [t.task_id.value for t in group.tasks] if group else [task_id]
    for victim in victims:
        status_updates.agent_update(
            agent, framework.id, executor, victim, TaskState.TASK_KILLED,
            Reason.REASON_TASK_KILLED_DURING_LAUNCH, message,
        )  # fmt: skip
    if (
        executor.state is ExecutorState.RUNNING
        and not executor.ever_sent_task
        and not executor.queued_tasks
    ):
        end_executor(agent, framework, executor)


def shutdown_executor(agent: Agent, framework_id: str, executor_id: str) -> None:
    framework = agent.frameworks.get(framework_id)
    if framework is None or framework.state is FrameworkState.TERMINATING:
        log.warning("Ignoring shutdown of executor %s of unknown framework", executor_id)
        return
    executor = framework.executors.get(executor_id)
    if executor is None or executor.state in (ExecutorState.TERMINATING, ExecutorState.TERMINATED):
        log.warning("Ignoring shutdown of unknown or ending executor %s", executor_id)
        return
    end_executor(agent, framework, executor)


def end_executor(agent: Agent, framework: Framework, executor: Executor) -> None:
    log.info("Shutting down executor %s", executor)
    executor.state = ExecutorState.TERMINATING
    agent.send_to_executor(executor, ev.Event(type=ev.EventType.SHUTDOWN))
    grace = shutdown_grace_period(agent.flags, executor.info)
    loop = asyncio.get_running_loop()
    executor.timers.append(loop.call_later(grace, _shutdown_timeout, agent, executor))


def _shutdown_timeout(agent: Agent, executor: Executor) -> None:
    if executor.state is ExecutorState.TERMINATING:
        log.info("Executor %s did not exit in its grace period: destroying it", executor)
        agent.spawn(agent.containerizer.destroy(executor.container_id), f"destroy {executor}")


def shutdown_framework(agent: Agent, framework_id: str) -> None:
    framework = agent.frameworks.get(framework_id)
    if framework is None:
        return
    log.info("Shutting down framework %s", framework_id)
    framework.state = FrameworkState.TERMINATING
    agent.status_updates.cleanup(framework_id)
    for executor in list(framework.executors.values()):
        if executor.state in (ExecutorState.REGISTERING, ExecutorState.RUNNING):
            end_executor(agent, framework, executor)
        elif executor.state is ExecutorState.TERMINATED:
            remove_executor(agent, framework, executor)
    if framework.idle():
        remove_framework(agent, framework)


def shutdown(agent: Agent, *, unregister: bool = False) -> None:
    """End every framework, then stop: the master told the agent to go, or
    (`unregister`) the operator did with SIGUSR1, and the master is told.

    As Mesos, the agent forgets its id (the master has removed it), so
    that it registers as a new agent when started again.
    """
    if agent.status is AgentStatus.TERMINATING:
        return
    if unregister and agent.info.id is not None:
        agent.master.send(
            internal.AgentCall(type=internal.AgentCallType.UNREGISTER, agent_id=agent.info.id)
        )
    agent.status = AgentStatus.TERMINATING
    for framework_id in list(agent.frameworks):
        shutdown_framework(agent, framework_id)
    agent.spawn(_finish_shutdown(agent), "agent shutdown")


async def _finish_shutdown(agent: Agent) -> None:
    grace = agent.flags.executor_shutdown_grace_period
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(grace + 5.0):
            while agent.frameworks:
                agent.framework_removed.clear()
                await agent.framework_removed.wait()
    for container_id in list(agent.containerizer.containers()):
        try:
            # The destroy itself goes on under the containerizer's owner if cut short.
            async with asyncio.timeout(DESTROY_TIMEOUT):
                await agent.containerizer.destroy(container_id)
        except TimeoutError:
            log.warning("Container %s was not destroyed within %ss", container_id, DESTROY_TIMEOUT)
    latest = paths.latest_agent_path(agent.flags.work_dir)
    if os.path.islink(latest):
        remove_file(agent.flags.work_dir, latest)
    agent.shutdown_requested.set()


def executor_terminated(
    agent: Agent, executor: Executor, termination: ContainerTermination | None
) -> None:
    framework = agent.frameworks.get(executor.framework_id.value)
    if framework is None or framework.executors.get(executor.id) is not executor:
        return
    if executor.state is ExecutorState.TERMINATED:
        return
    status = termination.status if termination is not None else None
    log.info("Executor %s terminated (wait status %s)", executor, status)
    agent.metrics["executors_terminated"] += 1
    executor.state = ExecutorState.TERMINATED
    executor.cancel_timers()
    if executor.stream is not None:
        executor.stream.close()
        executor.stream = None
    if framework.state is FrameworkState.RUNNING:
        ending = [t for t, task in executor.launched_tasks.items() if not task.state.terminal]
        for task_id in [*ending, *executor.queued_tasks]:
            _executor_terminated_update(agent, framework, executor, task_id, termination)
    else:
        for task_id in list(executor.launched_tasks):
            executor.terminated_tasks[task_id] = executor.launched_tasks.pop(task_id)
    if not executor.command_task:
        send_exited_executor(agent, framework.id, executor.info.executor_id, status)
    if (
        agent.status is AgentStatus.TERMINATING
        or framework.state is FrameworkState.TERMINATING
        or not executor.incomplete_tasks()
    ):
        remove_executor(agent, framework, executor)
    if framework.idle():
        remove_framework(agent, framework)


def send_exited_executor(
    agent: Agent, framework_id: FrameworkID, executor_id: ExecutorID, status: int | None
) -> None:
    """EXITED_EXECUTOR, so that the master lets the executor's resources go (never for a
    command executor: the master does not know those)."""
    if agent.info.id is None:
        return
    exited = internal.ExitedExecutor(
        framework_id=framework_id,
        executor_id=executor_id,
        # As Mesos: -1 when the executor never ran (its launch failed).
        status=status if status is not None else -1,
    )
    agent.master.send(
        internal.AgentCall(
            type=internal.AgentCallType.EXITED_EXECUTOR,
            agent_id=agent.info.id,
            exited_executor=exited,
        )
    )


def _executor_terminated_update(
    agent: Agent,
    framework: Framework,
    executor: Executor,
    task_id: str,
    termination: ContainerTermination | None,
) -> None:
    pending = executor.pending_termination
    state_name = (termination and termination.state) or (pending and pending.state)
    if state_name:
        state = TaskState(state_name)
    elif task_id in executor.killing:
        state = TaskState.TASK_KILLED
    else:
        state = TaskState.TASK_FAILED
    reason = (termination and termination.reason) or (pending and pending.reason)
    messages = [m for m in (pending and pending.message, termination and termination.message) if m]
    if termination is None and pending is None:
        messages.append("Abnormal executor termination: unknown container")
    limited = termination.limited_resources if termination else []
    status_updates.agent_update(
        agent,
        framework.id,
        executor,
        task_id,
        state,
        reason or Reason.REASON_EXECUTOR_TERMINATED,
        "; ".join(messages) or "Executor terminated",
        limitation=TaskResourceLimitation(resources=limited) if limited else None,
    )


def remove_executor(agent: Agent, framework: Framework, executor: Executor) -> None:
    log.info("Cleaning up executor %s", executor)
    executor.cancel_timers()
    if executor.checkpoint:
        agent.spawn(_end_run(agent, executor), f"sentinel of {executor}")
    else:
        agent.schedule_gc(framework.id.value, executor.id, executor.container_id.value)
    if framework.executors.get(executor.id) is executor:
        del framework.executors[executor.id]
        framework.completed_executors.append(executor)


async def _end_run(agent: Agent, executor: Executor) -> None:
    """The run's sentinel, then its garbage collection (which must not race the write)."""
    await agent.checkpointer.sentinel(agent.run_of(executor))
    agent.schedule_gc(executor.framework_id.value, executor.id, executor.container_id.value)


def remove_framework(agent: Agent, framework: Framework) -> None:
    log.info("Cleaning up framework %s", framework.id.value)
    agent.frameworks.pop(framework.id.value, None)
    agent.completed_frameworks.append(framework)
    agent.framework_removed.set()
