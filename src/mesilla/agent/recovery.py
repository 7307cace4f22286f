"""Agent restart: rebuilding frameworks, executors, tasks and update streams from checkpoints.

As Mesos's `Slave::recover` with ``--recover=reconnect``: the agent keeps its
id (same boot), the containerizer re-attaches to the containers of
checkpointed executors' latest runs (and destroys the rest as orphans), every
task's state is replayed from its `task.updates`, and unacknowledged updates
are queued again. A live executor gets ``--executor_reregistration_timeout``
to re-subscribe before it is destroyed; one whose container ended while the
agent was down is reported terminated with the exit status the containerizer
recorded. ``--recover=cleanup`` instead destroys every old container.
"""

from __future__ import annotations

import asyncio
import logging
import time

from mesilla.agent import checkpoints, paths, terminations, v0_executor
from mesilla.agent.agent import Agent, AgentStatus
from mesilla.agent.container_calls import recover_standalone
from mesilla.agent.executors import COMMAND_EXECUTOR_MODULE
from mesilla.agent.state import Executor, ExecutorState, Framework
from mesilla.common.blocking import in_thread
from mesilla.common.durations import format_duration
from mesilla.containerizer.types import ContainerTermination
from mesilla.v1.mesos import ContainerID, ExecutorInfo, Reason, TaskState

log = logging.getLogger(__name__)


def _is_command_executor(info: ExecutorInfo) -> bool:
    command = info.command
    return bool(command and command.arguments[-1:] == [COMMAND_EXECUTOR_MODULE])


def _rebuild_executor(
    agent: Agent, framework: Framework, state: checkpoints.ExecutorCheckpoint
) -> Executor | None:
    if state.info is None or state.latest is None:
        return None
    run = state.runs.get(state.latest)
    if run is None or run.completed:
        return None
    assert agent.info.id is not None
    fw = framework.id.value
    executor = Executor(
        info=state.info,
        framework_id=framework.id,
        agent_id=agent.info.id,
        container_id=ContainerID(value=run.container_id),
        directory=paths.executor_run_dir(
            agent.flags.work_dir, agent.info.id.value, fw, state.executor_id, run.container_id
        ),
        checkpoint=True,
        command_task=_is_command_executor(state.info),
        state=ExecutorState.REGISTERING,  # until it re-subscribes
    )
    for task_state in run.tasks.values():
        task = task_state.task
        if task is None:
            continue
        for record in task_state.records:
            if record.type == "UPDATE" and record.update is not None:
                task.state = record.update.status.state
                task.statuses.append(record.update.status)
        agent.status_updates.recover(
            fw, task_state.task_id, task_state.records, task_state.updates_path
        )
        if not task.state.terminal:
            executor.launched_tasks[task_state.task_id] = task
        elif agent.status_updates.has_stream(fw, task_state.task_id):
            executor.terminated_tasks[task_state.task_id] = task
        else:
            executor.completed_tasks.append(task)
    return executor


async def recover(agent: Agent) -> None:
    """Recovers the checkpointed agent, if any; on return the agent may register."""
    started = time.monotonic()
    flags = agent.flags
    # In a thread: at a thousand containers reading takes seconds on a loaded host, and a
    # loop blocked that long accepts no connection meanwhile: the executors' SUBSCRIBEs (held
    # until `executors_recovered`) queue in the listen backlog with everything else.
    state = await in_thread(checkpoints.recover_agent, flags.work_dir, flags.strict)
    if flags.recover == "cleanup":
        log.info("--recover=cleanup: destroying every container of the previous agent")
        await agent.containerizer.recover(set())
        for container_id in list(agent.containerizer.containers()):
            await agent.containerizer.destroy(container_id)
        return
    executors: list[Executor] = []
    libprocess_pids: dict[str, str] = {}  # container id -> a v0 executor's UPID
    if state is not None:
        agent.metrics["recovery_errors"] = state.errors
        agent.info.id = state.agent_info.id
        log.info("Recovering agent %s", agent.info.id.value if agent.info.id else "?")
        for fw_state in state.frameworks.values():
            if fw_state.info is None or not fw_state.info.checkpoint:
                continue
            framework = Framework(fw_state.info)
            for ex_state in fw_state.executors.values():
                for run in ex_state.runs.values():
                    if run.completed or run.container_id != ex_state.latest:
                        agent.schedule_gc(
                            fw_state.framework_id, ex_state.executor_id, run.container_id
                        )
                executor = _rebuild_executor(agent, framework, ex_state)
                latest = ex_state.runs.get(ex_state.latest or "")
                if executor is not None and latest is not None and latest.libprocess_pid:
                    libprocess_pids[executor.container_id.value] = latest.libprocess_pid
                if executor is not None:
                    framework.executors[executor.id] = executor
                    executors.append(executor)
            if framework.executors:
                agent.frameworks[framework.id.value] = framework
    standalone = recover_standalone(flags.work_dir)
    await agent.containerizer.recover({e.container_id for e in executors} | standalone)
    live = set(agent.containerizer.containers())
    for executor in executors:
        agent.attach_sandbox(executor)
        agent.spawn(_watch(agent, executor), f"wait {executor}")
    agent.executors_recovered.set()
    waiting = [e for e in executors if e.container_id in live]
    for executor in waiting:
        pid = libprocess_pids.get(executor.container_id.value)
        if pid is not None:
            v0_executor.reconnect(agent, pid)
    if waiting:
        await _await_reregistration(agent, waiting)
    agent.recovery_time = time.monotonic() - started
    if agent.status is AgentStatus.RECOVERING:
        agent.status = AgentStatus.DISCONNECTED


async def _watch(agent: Agent, executor: Executor) -> None:
    termination = await agent.containerizer.wait(executor.container_id)
    terminations.executor_terminated(agent, executor, termination)


async def _await_reregistration(agent: Agent, executors: list[Executor]) -> None:
    """Gives live executors `--executor_reregistration_timeout` to subscribe again."""
    timeout = agent.flags.executor_reregistration_timeout
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if all(e.state is not ExecutorState.REGISTERING for e in executors):
            return
        # Short: the agent re-registers only after this returns, and the check is cheap.
        await asyncio.sleep(0.01)
    for executor in executors:
        if executor.state is not ExecutorState.REGISTERING:
            continue
        log.warning("Executor %s did not re-subscribe in time: destroying it", executor)
        framework = agent.frameworks[executor.framework_id.value]
        gone = (
            TaskState.TASK_GONE
            if framework.info.has_capability("PARTITION_AWARE")
            else TaskState.TASK_LOST
        )
        executor.state = ExecutorState.TERMINATING
        executor.pending_termination = ContainerTermination(
            state=gone.value,
            reason=Reason.REASON_EXECUTOR_REREGISTRATION_TIMEOUT,
            message=f"Executor did not reregister within {format_duration(timeout)}",
        )
        agent.spawn(agent.containerizer.destroy(executor.container_id), f"destroy {executor}")
