"""The agent's side of its executors' connections (as `master_link` is of the master's).

* `subscribe`: an executor's SUBSCRIBE, first or again (after the agent or the
  connection restarted): it brings its unacknowledged updates, which are
  handled as UPDATE calls, and its unacknowledged tasks; a task the agent
  launched but the executor never saw was lost in a restart and ends
  DROPPED (LOST). Then SUBSCRIBED, and every queued task in LAUNCH or
  LAUNCH_GROUP events.
* `update`: an UPDATE: the agent fills in `agent_id`, `executor_id`,
  `source` and the container's status (pid, network, cgroups), hands it to the
  status update manager and acknowledges it to the executor. A resent update
  (a uuid the stream already has) is only acknowledged again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time

from mesilla.agent import resources, status_updates, terminations
from mesilla.agent.agent import Agent, AgentStatus, partition_aware
from mesilla.agent.state import Executor, ExecutorState, Framework, FrameworkState
from mesilla.common.errors import ContainerError
from mesilla.common.http import EventStream
from mesilla.v1 import executor as ev
from mesilla.v1.mesos import (
    ContainerID,
    ContainerStatus,
    NetworkInfo,
    Reason,
    StatusSource,
    TaskState,
    TaskStatus,
)

log = logging.getLogger(__name__)


async def subscribe(
    agent: Agent, framework: Framework, executor: Executor, subscribe: ev.Subscribe, stream: EventStream
) -> None:
    if (
        agent.status is AgentStatus.TERMINATING
        or framework.state is FrameworkState.TERMINATING
        or executor.state in (ExecutorState.TERMINATING, ExecutorState.TERMINATED)
    ):
        log.warning("Shutting down executor %s: it subscribed while ending", executor)
        await stream.send(ev.Event(type=ev.EventType.SHUTDOWN))
        stream.close()
        return
    if executor.stream is not None and executor.stream is not stream:
        executor.stream.close()
    executor.state = ExecutorState.RUNNING
    executor.stream = stream
    executor.cancel_timers()
    if executor.checkpoint:
        run = agent.run_of(executor)
        agent.in_order(executor, lambda: agent.checkpointer.http_marker(run), f"mark {executor}")
    for unacked in subscribe.unacknowledged_updates:
        await update(agent, framework, executor, unacked.status)
    known = {t.task_id.value for t in subscribe.unacknowledged_tasks}
    for task in list(executor.launched_tasks.values()):
        if task.state is TaskState.TASK_STAGING and task.task_id.value not in known:
            state = (
                TaskState.TASK_DROPPED if partition_aware(framework.info) else TaskState.TASK_LOST
            )
            status_updates.agent_update(
                agent,
                framework.id,
                executor,
                task.task_id.value,
                state,
                Reason.REASON_AGENT_RESTARTED,
                "Task launched during agent restart",
            )
    if not executor.ever_sent_task and not executor.queued_tasks:
        log.warning(
            "Shutting down executor %s: all its tasks were killed before delivery", executor
        )
        terminations.end_executor(agent, framework, executor)
        return
    events = [
        ev.Event(
            type=ev.EventType.SUBSCRIBED,
            subscribed=ev.Subscribed(
                executor_info=executor.info,
                framework_info=framework.info,
                agent_info=agent.info,
                container_id=executor.container_id,
            ),
        )
    ]
    lone, groups = executor.launch_queued()
    events += [ev.Event(type=ev.EventType.LAUNCH, launch=ev.Launch(task=info)) for info in lone]
    events += [
        ev.Event(type=ev.EventType.LAUNCH_GROUP, launch_group=ev.LaunchGroup(task_group=group))
        for group in groups
    ]

    async def deliver() -> None:
        await resources.cap_after_subscribe(agent, executor)
        for event in events:
            await stream.send(event)

    # After the queued tasks' checkpoints are durable, before any later launch.
    await asyncio.shield(agent.in_order(executor, deliver, f"subscribe {executor}"))


async def update(
    agent: Agent, framework: Framework, executor: Executor, status: TaskStatus
) -> None:
    """An UPDATE call from an executor (already validated by the executor API)."""
    async with executor.lock:
        assert status.uuid is not None
        status.agent_id = agent.info.id
        status.executor_id = executor.info.executor_id
        status.source = StatusSource.SOURCE_EXECUTOR
        if status.timestamp is None:
            status.timestamp = time.time()
        fw_id, task_id = framework.id.value, status.task_id.value
        if not agent.status_updates.seen(fw_id, task_id, status.uuid):
            if framework.state is FrameworkState.TERMINATING:
                log.warning("Ignoring update of task %s of a terminating framework", task_id)
            else:
                status.container_status = await _container_status(agent, executor, status)
                status_updates.record_update(agent, framework.id, executor, status)
    # Acknowledged once the agent has taken charge (checkpointed it), so the executor
    # stops resending; a resend waits too, as its first copy may still be being written.
    await agent.status_updates.durable(fw_id, task_id)
    agent.send_to_executor(
        executor,
        ev.Event(
            type=ev.EventType.ACKNOWLEDGED,
            acknowledged=ev.Acknowledged(task_id=status.task_id, uuid=status.uuid),
        ),
    )


async def _container_status(
    agent: Agent, executor: Executor, status: TaskStatus
) -> ContainerStatus:
    given = status.container_status or ContainerStatus()
    container_id: ContainerID = given.container_id or executor.container_id
    try:
        reported = await agent.containerizer.status(container_id)
    except ContainerError as exc:
        log.debug("No status for container %s: %s", container_id, exc)
        reported = ContainerStatus()
        task = executor.find_task(status.task_id.value)
        own_network = task is not None and task.container is not None and any(
            n.name for n in task.container.network_infos
        )
        if container_id != executor.container_id and not own_network:
            # A pod task whose container ended before its update came: it was in
            # its executor's network.
            with contextlib.suppress(ContainerError):
                of_executor = await agent.containerizer.status(executor.container_id)
                reported = ContainerStatus(network_infos=of_executor.network_infos)
    network_infos = given.network_infos or reported.network_infos
    if not network_infos:
        # As Mesos, the agent's address stands in for a container without its own network.
        network_infos = [NetworkInfo(ip_addresses=[{"ip_address": _agent_ip(agent.flags.ip)}])]
    return ContainerStatus(
        container_id=container_id,
        network_infos=network_infos,
        cgroup_info=given.cgroup_info or reported.cgroup_info,
        executor_pid=given.executor_pid or reported.executor_pid,
    )


def _agent_ip(ip: str) -> str:
    if ip in ("0.0.0.0", ""):
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"
    return ip
