"""The agent: runs the master's tasks in executors, as Mesos's `Slave` (`src/slave/slave.cpp`).

It reacts to three sources and keeps `mesilla.agent.state` up to date:

* the master (`MasterLink` events): RUN_TASK, RUN_TASK_GROUP, KILL_TASK,
  SHUTDOWN_EXECUTOR, SHUTDOWN_FRAMEWORK, UPDATE_FRAMEWORK, ACKNOWLEDGE,
  FRAMEWORK_MESSAGE, SHUTDOWN;
* executors (the executor API): SUBSCRIBE, UPDATE, MESSAGE;
* the containerizer: an executor's container ended.

Status updates, from executors or made by the agent itself, go through the
`StatusUpdateManager`, which checkpoints them and delivers them reliably.
The executor is acknowledged as soon as its update is checkpointed, as Mesos
does: from then on the agent is responsible for it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import os
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from mesilla import MESOS_VERSION
from mesilla.agent import checkpoints, paths
from mesilla.agent.executor_auth import ENV as TOKEN_ENV
from mesilla.agent.executor_auth import ExecutorTokens, executor_credentials
from mesilla.agent.executors import (
    command_executor_info,
    container_config,
    executor_environment,
    executor_user,
    new_container_id,
    shutdown_grace_period,
)
from mesilla.agent.files import Files
from mesilla.agent.gc import GarbageCollector
from mesilla.agent.state import (
    MAX_COMPLETED_FRAMEWORKS,
    Executor,
    ExecutorState,
    Framework,
    FrameworkState,
    TaskStateError,
    make_task,
)
from mesilla.agent.status_update_manager import (
    RETRY_INTERVAL_MIN,
    StatusUpdateError,
    StatusUpdateManager,
)
from mesilla.common.authorization import Authorizer
from mesilla.common.blocking import in_thread
from mesilla.common.durations import format_duration
from mesilla.common.files import remove_file
from mesilla.common.flags import Flags
from mesilla.common.http import Router
from mesilla.common.tls import TlsConfig
from mesilla.containerizer.types import ContainerTermination
from mesilla.v1 import executor as ev
from mesilla.v1 import internal
from mesilla.v1.mesos import (
    AgentCapability,
    AgentID,
    AgentInfo,
    ContainerStatus,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    KillPolicy,
    MasterInfo,
    Reason,
    StatusSource,
    Task,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
    TaskResourceLimitation,
    TaskState,
    TaskStatus,
)

log = logging.getLogger(__name__)


# What this agent supports, by Mesos's AgentInfo.Capability names.
CAPABILITIES = ("MULTI_ROLE", "HIERARCHICAL_ROLE", "RESERVATION_REFINEMENT", "TASK_RESOURCE_LIMITS")


class AgentStatus(enum.Enum):
    RECOVERING = "RECOVERING"
    DISCONNECTED = "DISCONNECTED"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"


def partition_aware(info: FrameworkInfo) -> bool:
    return info.has_capability("PARTITION_AWARE")


class Agent:
    def __init__(
        self,
        flags: Flags,
        containerizer: Any,
        info: AgentInfo,
        *,
        status_update_interval: float = RETRY_INTERVAL_MIN,
    ) -> None:
        self.flags = flags
        self.files = Files()
        self.gc = GarbageCollector(self.flags.work_dir)
        self.containerizer = containerizer
        self.info = info
        self.status = AgentStatus.RECOVERING
        self.frameworks: dict[str, Framework] = {}
        self.completed_frameworks: deque[Framework] = deque(maxlen=MAX_COMPLETED_FRAMEWORKS)
        self.master_info: MasterInfo | None = None
        self.start_time = time.time()
        self.recovery_time: float | None = None
        self.endpoint = f"{flags.ip}:{flags.port}"
        self.router: Router | None = None  # the HTTP endpoints, once served
        self.executor_tokens: ExecutorTokens | None = None  # --authenticate_http_executors
        # --http_credentials, for executors that name their principal (ExecutorInfo.principal).
        self.http_credentials: dict[str, str] = {}
        self.authorizer: Authorizer | None = None  # --acls
        self.tls: TlsConfig | None = None  # TLS on the agent's listener
        # Set by whoever owns the connection to the master (`MasterLink`).
        self.send_to_master: Callable[[internal.AgentCall], None] = lambda call: None
        self.status_updates = StatusUpdateManager(
            self._forward, initial_interval=status_update_interval
        )
        self.metrics: dict[str, int] = {
            "valid_status_updates": 0,
            "invalid_status_updates": 0,
            "valid_framework_messages": 0,
            "invalid_framework_messages": 0,
            "executors_terminated": 0,
            "container_launch_errors": 0,
            "recovery_errors": 0,
            "registrations": 0,
        }
        self.shutdown_requested = asyncio.Event()
        # Set once recovery knows the executors and their containers: executors
        # that re-subscribe sooner are held until then (executor_api).
        self.executors_recovered = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()

    # -- identity ---------------------------------------------------------------------

    @property
    def agent_id(self) -> AgentID | None:
        return self.info.id

    @property
    def meta(self) -> checkpoints.MetaDir:
        """The agent's checkpoint writer (once it has an id)."""
        return checkpoints.MetaDir(self.flags.work_dir, self._id().value)

    @property
    def pid(self) -> str:
        return f"slave(1)@{self.endpoint}"

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]:
        """Runs a background job owned by the agent (cancelled by `close`); failures are logged."""
        task = asyncio.get_running_loop().create_task(coro, name=what)
        self._background.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._background.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("%s failed", what, exc_info=t.exception())

        task.add_done_callback(done)
        return task

    async def close(self) -> None:
        """Stops the agent's own activity; executors and containers keep running."""
        self.status_updates.close()
        self.gc.close()
        for framework in self.frameworks.values():
            for executor in framework.executors.values():
                executor.cancel_timers()
                if executor.stream is not None:
                    executor.stream.close()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- the master ---------------------------------------------------------------------

    def register_call(self) -> internal.Register:
        """REGISTER, with what the agent runs when it already has an id (re-registration)."""
        tasks: list[Task] = []
        executors: list[ExecutorInfo] = []
        frameworks: list[FrameworkInfo] = []
        for framework in self.frameworks.values():
            frameworks.append(framework.info)
            for executor in framework.executors.values():
                # As Mesos: no command executors (the master never knew them) and no
                # terminated ones (they hold nothing; reported, the master would keep them).
                if not executor.command_task and executor.state is not ExecutorState.TERMINATED:
                    executors.append(executor.info)
                for info in executor.queued_tasks.values():
                    tasks.append(make_task(info, TaskState.TASK_STAGING, framework.id, self._id()))
                tasks.extend(executor.launched_tasks.values())
                tasks.extend(executor.terminated_tasks.values())
        return internal.Register(
            agent_info=self.info,
            version=MESOS_VERSION,
            capabilities=[AgentCapability(type=name) for name in CAPABILITIES],
            tasks=tasks,
            executor_infos=executors,
            frameworks=frameworks,
        )

    def registered(self, registered: internal.Registered) -> None:
        if self.info.id is not None and self.info.id != registered.agent_id:
            log.error(
                "The master gave agent id %s but this agent is %s: shutting down",
                registered.agent_id.value,
                self.info.id.value,
            )
            self.shutdown_requested.set()
            return
        first = self.info.id is None
        self.info.id = registered.agent_id
        self.master_info = registered.master_info
        if first:
            checkpoints.checkpoint_agent(self.flags.work_dir, self.info)
        self.metrics["registrations"] += 1
        self.status = AgentStatus.RUNNING
        log.info("Registered with the master as agent %s", registered.agent_id.value)
        self.status_updates.resume()

    def disconnected(self) -> None:
        if self.status is AgentStatus.RUNNING:
            self.status = AgentStatus.DISCONNECTED
            log.info("Disconnected from the master; status updates are paused")
        self.status_updates.pause()

    def handle_event(self, event: internal.AgentEvent) -> None:
        kind = internal.AgentEventType
        if event.type is kind.RUN_TASK and event.run_task:
            self.run_task(event.run_task.framework_info, event.run_task.task)
        elif event.type is kind.RUN_TASK_GROUP and event.run_task_group:
            msg = event.run_task_group
            self.run_task_group(msg.framework_info, msg.executor_info, msg.task_group)
        elif event.type is kind.KILL_TASK and event.kill_task:
            msg_k = event.kill_task
            self.kill_task(msg_k.framework_id, msg_k.task_id.value, msg_k.kill_policy)
        elif event.type is kind.SHUTDOWN_EXECUTOR and event.shutdown_executor:
            msg_s = event.shutdown_executor
            self.shutdown_executor(msg_s.framework_id.value, msg_s.executor_id.value)
        elif event.type is kind.SHUTDOWN_FRAMEWORK and event.shutdown_framework:
            self.shutdown_framework(event.shutdown_framework.framework_id.value)
        elif event.type is kind.UPDATE_FRAMEWORK and event.update_framework:
            self.update_framework(event.update_framework.framework_info)
        elif event.type is kind.ACKNOWLEDGE and event.acknowledge:
            ack = event.acknowledge
            self.acknowledge(ack.framework_id.value, ack.task_id.value, ack.uuid)
        elif event.type is kind.FRAMEWORK_MESSAGE and event.framework_message:
            msg_f = event.framework_message
            self.framework_message(msg_f.framework_id.value, msg_f.executor_id.value, msg_f.data)
        elif event.type is kind.SHUTDOWN:
            reason = event.shutdown.message if event.shutdown else None
            log.warning("The master asked this agent to shut down: %s", reason or "no reason")
            self.shutdown()
        elif event.type is kind.RECONCILE_TASKS and event.reconcile_tasks:
            self.reconcile_tasks(event.reconcile_tasks)

    # -- running tasks ----------------------------------------------------------------

    def _id(self) -> AgentID:
        assert self.info.id is not None, "the agent has no id before registering"
        return self.info.id

    def _framework_for_launch(self, info: FrameworkInfo) -> Framework | None:
        assert info.id is not None
        framework = self.frameworks.get(info.id.value)
        if framework is None:
            framework = self.frameworks[info.id.value] = Framework(info)
        elif framework.state is FrameworkState.TERMINATING:
            log.warning("Ignoring a launch for terminating framework %s", info.id.value)
            return None
        else:
            framework.info = info
        return framework

    def run_task(self, framework_info: FrameworkInfo, task: TaskInfo) -> None:
        framework = self._framework_for_launch(framework_info)
        if framework is None:
            return
        command_task = task.executor is None
        info = task.executor or command_executor_info(framework_info, task)
        if info.framework_id is None:
            info.framework_id = framework.id
        self._deliver(framework, info, [task], None, command_task)

    def run_task_group(
        self, framework_info: FrameworkInfo, info: ExecutorInfo, group: TaskGroupInfo
    ) -> None:
        framework = self._framework_for_launch(framework_info)
        if framework is None:
            return
        if info.framework_id is None:
            info.framework_id = framework.id
        self._deliver(framework, info, group.tasks, group, False)

    def _deliver(
        self,
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
                executor = self._create_executor(framework, info, command_task)
            except OSError as exc:  # a full or broken disk: the tasks end, the agent goes on
                log.warning("Failed to create the sandbox of executor %s: %s", info.executor_id.value, exc)
                self._drop(framework, info, tasks, f"Failed to create executor directory: {exc}")
                if not command_task:  # as Mesos: the master added the executor for this launch
                    self._send_exited_executor(framework.id, info.executor_id, None)
                return
            written = self._queue(framework, executor, tasks, group, new_executor=True)
            self.spawn(
                self._launch_executor(framework, executor, tasks[0], written),
                f"launch {executor}",
            )
        elif executor.state is ExecutorState.REGISTERING:
            self._queue(framework, executor, tasks, group)
        elif executor.state is ExecutorState.RUNNING:
            if group is not None:
                event = ev.Event(
                    type=ev.EventType.LAUNCH_GROUP, launch_group=ev.LaunchGroup(task_group=group)
                )
            else:
                event = ev.Event(type=ev.EventType.LAUNCH, launch=ev.Launch(task=tasks[0]))
            launched = [executor.add_launched(task) for task in tasks]
            self._checkpoint_launch(
                framework, executor, launched, then=lambda: self._grow_and_deliver(executor, event)
            )
        else:
            self._drop(framework, info, tasks, "Executor terminating")

    def _drop(self, framework: Framework, info: ExecutorInfo, tasks: list[TaskInfo], message: str) -> None:
        """Tasks that never reach an executor: TASK_DROPPED (TASK_LOST to a framework that is
        not PARTITION_AWARE), REASON_EXECUTOR_TERMINATED, as Mesos."""
        state = TaskState.TASK_DROPPED if partition_aware(framework.info) else TaskState.TASK_LOST
        for task in tasks:
            self.agent_update(
                framework.id,
                None,
                task.task_id.value,
                state,
                Reason.REASON_EXECUTOR_TERMINATED,
                message,
                executor_id=info.executor_id.value,
            )

    async def _grow_and_deliver(self, executor: Executor, event: ev.Event) -> None:
        """As Mesos: the container gets the new tasks' resources before the tasks."""
        await self._update_resources(executor)
        if executor.stream is not None:
            await executor.stream.send(event)

    def _startup_limits(self, executor: Executor) -> dict[str, float]:
        """No CFS cap until Mesilla's own executor subscribes: at a pod's 0.1-0.2 cpus its
        Python start-up (~120 ms of CPU) would take a second or more. A custom executor is
        capped from the start, as in Mesos, since its start-up is not ours to bound."""
        own = executor.info.type == "DEFAULT" or executor.command_task
        return {"cpus": math.inf} if own and self.flags.cgroups_enable_cfs else {}

    async def cap_after_subscribe(self, executor: Executor) -> None:
        """Applies the CFS quota `_startup_limits` held back (the tasks then run capped)."""
        if self.flags.cgroups_enable_cfs:
            await self._update_resources(executor)

    async def _update_resources(self, executor: Executor) -> None:
        """Sizes the executor's container to the executor plus its live tasks."""
        try:
            await self.containerizer.update(
                executor.container_id, executor.allocated_resources(), {}
            )
        except Exception as exc:  # the container may be gone already
            log.warning("Failed to update the resources of executor %s: %s", executor, exc)

    def _queue(
        self,
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
        return self._checkpoint_launch(
            framework,
            executor,
            [make_task(t, staging, executor.framework_id, self._id()) for t in tasks],
            new_executor=new_executor,
        )

    def _checkpoint_launch(
        self,
        framework: Framework,
        executor: Executor,
        tasks: list[Task],
        *,
        new_executor: bool = False,
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> asyncio.Task[None]:
        """Checkpoints a launch before anything is launched, as Mesos: the framework, a new
        executor, a task group all at once; `then` runs once that is durable.

        The files are written in a worker thread (their fsyncs would stall
        every other pod and executor on the event loop), after the
        executor's earlier jobs (`in_order`), as is whatever sends tasks to
        the executor.
        """
        if not executor.checkpoint:
            return self.in_order(executor, then, f"deliver to {executor}")
        launch = self.meta.launch(
            executor.id,
            executor.container_id.value,
            tasks,
            framework=framework.info,
            executor=executor.info if new_executor else None,
        )

        async def checkpoint_then() -> None:
            try:
                await in_thread(launch.write)
            except OSError as exc:
                # Mesos aborts here: an agent that cannot checkpoint cannot promise
                # recovery. It stops (its executors live on) and recovers when restarted.
                log.critical("Failed to checkpoint a launch on executor %s: %s", executor, exc)
                self.shutdown_requested.set()
                raise
            if then is not None:
                await then()

        return self.in_order(executor, checkpoint_then, f"checkpoint launch on {executor}")

    def in_order(
        self, executor: Executor, job: Callable[[], Awaitable[None]] | None, what: str
    ) -> asyncio.Task[None]:
        """Runs `job` once the executor's earlier jobs ended (whichever way), so that two
        launches on one executor keep their order and a KILL never overtakes its task's
        LAUNCH."""
        previous = executor.in_flight

        async def run() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            if job is not None:
                await job()

        executor.in_flight = self.spawn(run(), what)
        return executor.in_flight

    def _create_executor(
        self, framework: Framework, info: ExecutorInfo, command_task: bool
    ) -> Executor:
        agent_id = self._id().value
        container_id = new_container_id()
        fw, ex = framework.id.value, info.executor_id.value
        directory = paths.executor_run_dir(
            self.flags.work_dir, agent_id, fw, ex, container_id.value
        )
        os.makedirs(directory, exist_ok=True)
        paths.update_latest_symlink(
            paths.executor_latest_run_path(self.flags.work_dir, agent_id, fw, ex), directory
        )
        executor = Executor(
            info=info,
            framework_id=framework.id,
            agent_id=self._id(),
            container_id=container_id,
            directory=directory,
            checkpoint=framework.checkpoint,
            command_task=command_task,
        )
        framework.executors[ex] = executor
        self.attach_sandbox(executor)
        log.info("Launching executor %s in container %s", executor, container_id.value)
        return executor

    def executor_alive(self, framework_id: str, executor_id: str, container_id: str) -> bool:
        """Whether that executor runs in that container (an executor token's test)."""
        framework = self.frameworks.get(framework_id)
        executor = framework.executors.get(executor_id) if framework is not None else None
        return (
            executor is not None
            and executor.container_id.value == container_id
            and executor.state is not ExecutorState.TERMINATED
        )

    def executor_sandbox(self, framework_id: str, executor_id: str) -> str | None:
        framework = self.frameworks.get(framework_id)
        executor = framework.executors.get(executor_id) if framework is not None else None
        return executor.directory if executor is not None else None

    def attach_sandbox(self, executor: Executor) -> None:
        """Serves the sandbox under its real path and under the executor's `runs/latest`."""
        fw, ex = executor.framework_id.value, executor.id
        self.files.attach(executor.directory, executor.directory)
        self.files.attach(
            paths.executor_latest_run_path(self.flags.work_dir, executor.agent_id.value, fw, ex),
            paths.executor_virtual_path(fw, ex),
        )

    async def _launch_executor(
        self,
        framework: Framework,
        executor: Executor,
        first_task: TaskInfo,
        checkpointed: asyncio.Task[None],
    ) -> None:
        # Not launched unless checkpointed (a failure is logged and stops the agent).
        await asyncio.shield(checkpointed)
        env = executor_environment(
            self.flags,
            executor.info,
            directory=executor.directory,
            agent_id=self._id().value,
            endpoint=self.endpoint,
            checkpoint=executor.checkpoint,
        )
        if self.tls is not None:
            env.update(self.tls.environment())
        try:
            config = container_config(
                executor.info,
                directory=executor.directory,
                environment=env,
                task=first_task if executor.command_task else None,
                resources=executor.allocated_resources(),
                user=executor_user(self.flags, framework.info, executor.info),
                limits=self._startup_limits(executor),
            )
            config.executor_secrets.update(
                executor_credentials(executor.info.principal, self.http_credentials)
            )
            if self.executor_tokens is not None:
                config.executor_secrets[TOKEN_ENV] = self.executor_tokens.sign(
                    executor.framework_id.value, executor.id, executor.container_id.value
                )
            await self.containerizer.launch(executor.container_id, config)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every launch failure fails the executor's tasks
            self.metrics["container_launch_errors"] += 1
            log.error("Failed to launch container of executor %s: %s", executor, exc)
            executor.pending_termination = ContainerTermination(
                state=TaskState.TASK_FAILED.value,
                reason=Reason.REASON_CONTAINER_LAUNCH_FAILED,
                message=f"Failed to launch container: {exc}",
            )
            self.executor_terminated(executor, None)
            return
        if executor.checkpoint:
            await self._checkpoint_pid(executor)
        timeout = float(self.flags.executor_registration_timeout)
        loop = asyncio.get_running_loop()
        executor.timers.append(loop.call_later(timeout, self._registration_timeout, executor))
        self.spawn(self._watch_executor(executor), f"wait {executor}")

    async def _checkpoint_pid(self, executor: Executor) -> None:
        try:
            status = await self.containerizer.status(executor.container_id)
        except Exception as exc:
            log.warning("No pid for the container of executor %s: %s", executor, exc)
            return
        pid = status.get("executor_pid")
        if pid is not None:
            await in_thread(
                self.meta.forked_pid,
                executor.framework_id.value,
                executor.id,
                executor.container_id.value,
                pid,
            )

    async def _watch_executor(self, executor: Executor) -> None:
        termination = await self.containerizer.wait(executor.container_id)
        self.executor_terminated(executor, termination)

    def _registration_timeout(self, executor: Executor) -> None:
        if executor.state is not ExecutorState.REGISTERING:
            return
        timeout = float(self.flags.executor_registration_timeout)
        log.warning("Executor %s did not register within %ss: destroying it", executor, timeout)
        executor.state = ExecutorState.TERMINATING
        executor.pending_termination = ContainerTermination(
            state=TaskState.TASK_FAILED.value,
            reason=Reason.REASON_EXECUTOR_REGISTRATION_TIMEOUT,
            message=f"Executor did not register within {format_duration(timeout)}",
        )
        self.spawn(self.containerizer.destroy(executor.container_id), f"destroy {executor}")

    # -- killing and shutting down ------------------------------------------------------

    def kill_task(
        self, framework_id: FrameworkID, task_id: str, kill_policy: KillPolicy | None
    ) -> None:
        if self.status in (AgentStatus.RECOVERING, AgentStatus.TERMINATING):
            log.warning("Ignoring kill of task %s: the agent is %s", task_id, self.status.value)
            return
        framework = self.frameworks.get(framework_id.value)
        if framework is None or framework.state is FrameworkState.TERMINATING:
            log.warning("Ignoring kill of task %s of unknown or terminating framework", task_id)
            return
        executor = framework.executor_of_task(task_id)
        if executor is None:
            state = (
                TaskState.TASK_DROPPED if partition_aware(framework.info) else TaskState.TASK_LOST
            )
            self.agent_update(
                framework.id,
                None,
                task_id,
                state,
                Reason.REASON_EXECUTOR_TERMINATED,
                "Cannot find executor",
            )
            return
        if executor.state in (ExecutorState.TERMINATING, ExecutorState.TERMINATED):
            log.warning("Ignoring kill of task %s: executor %s is ending", task_id, executor)
            return
        if task_id in executor.queued_tasks:
            group = executor.queued_group_of(task_id)
            message = (
                "A task within the task group was killed before delivery to the executor"
                if group is not None and executor.state is ExecutorState.REGISTERING
                else "Killed before delivery to the executor"
            )
            victims = [t.task_id.value for t in group.tasks] if group else [task_id]
            for victim in victims:
                self.agent_update(
                    framework.id,
                    executor,
                    victim,
                    TaskState.TASK_KILLED,
                    Reason.REASON_TASK_KILLED_DURING_LAUNCH,
                    message,
                )
            if (
                executor.state is ExecutorState.RUNNING
                and not executor.ever_sent_task
                and not executor.queued_tasks
            ):
                self.end_executor(framework, executor)
            return
        if task_id in executor.launched_tasks:
            executor.killing.add(task_id)
            self.send_to_executor(
                executor,
                ev.Event(
                    type=ev.EventType.KILL,
                    kill=ev.Kill(
                        task_id=executor.launched_tasks[task_id].task_id, kill_policy=kill_policy
                    ),
                ),
            )

    def shutdown_executor(self, framework_id: str, executor_id: str) -> None:
        framework = self.frameworks.get(framework_id)
        if framework is None or framework.state is FrameworkState.TERMINATING:
            log.warning("Ignoring shutdown of executor %s of unknown framework", executor_id)
            return
        executor = framework.executors.get(executor_id)
        if executor is None or executor.state in (
            ExecutorState.TERMINATING,
            ExecutorState.TERMINATED,
        ):
            log.warning("Ignoring shutdown of unknown or ending executor %s", executor_id)
            return
        self.end_executor(framework, executor)

    def end_executor(self, framework: Framework, executor: Executor) -> None:
        log.info("Shutting down executor %s", executor)
        executor.state = ExecutorState.TERMINATING
        self.send_to_executor(executor, ev.Event(type=ev.EventType.SHUTDOWN))
        grace = shutdown_grace_period(self.flags, executor.info)
        loop = asyncio.get_running_loop()
        executor.timers.append(loop.call_later(grace, self._shutdown_timeout, executor))

    def _shutdown_timeout(self, executor: Executor) -> None:
        if executor.state is ExecutorState.TERMINATING:
            log.info("Executor %s did not exit in its grace period: destroying it", executor)
            self.spawn(self.containerizer.destroy(executor.container_id), f"destroy {executor}")

    def shutdown_framework(self, framework_id: str) -> None:
        framework = self.frameworks.get(framework_id)
        if framework is None:
            return
        log.info("Shutting down framework %s", framework_id)
        framework.state = FrameworkState.TERMINATING
        self.status_updates.cleanup(framework_id)
        for executor in list(framework.executors.values()):
            if executor.state in (ExecutorState.REGISTERING, ExecutorState.RUNNING):
                self.end_executor(framework, executor)
            elif executor.state is ExecutorState.TERMINATED:
                self._remove_executor(framework, executor)
        if framework.idle():
            self._remove_framework(framework)

    def shutdown(self, *, unregister: bool = False) -> None:
        """End every framework, then stop: the master told the agent to go, or
        (`unregister`) the operator did with SIGUSR1, and the master is told.

        As Mesos, the agent forgets its id (the master has removed it), so
        that it registers as a new agent when started again.
        """
        if self.status is AgentStatus.TERMINATING:
            return
        if unregister and self.info.id is not None:
            self.send_to_master(
                internal.AgentCall(type=internal.AgentCallType.UNREGISTER, agent_id=self.info.id)
            )
        self.status = AgentStatus.TERMINATING
        for framework_id in list(self.frameworks):
            self.shutdown_framework(framework_id)
        self.spawn(self._finish_shutdown(), "agent shutdown")

    async def _finish_shutdown(self) -> None:
        grace = float(self.flags.executor_shutdown_grace_period)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace + 5.0
        while self.frameworks and loop.time() < deadline:
            await asyncio.sleep(0.1)
        for container_id in list(self.containerizer.containers()):
            await self.containerizer.destroy(container_id)
        latest = paths.latest_agent_path(self.flags.work_dir)
        if os.path.islink(latest):
            remove_file(self.flags.work_dir, latest)
        self.shutdown_requested.set()

    def update_framework(self, info: FrameworkInfo) -> None:
        if info.id is None or info.id.value not in self.frameworks:
            return
        framework = self.frameworks[info.id.value]
        framework.info = info
        if framework.checkpoint:
            self.meta.framework(info)

    def reconcile_tasks(self, msg: internal.ReconcileTasks) -> None:
        """Tasks the master expects here that the agent does not know end LOST (DROPPED)."""
        framework = self.frameworks.get(msg.framework_id.value)
        for task_id in msg.task_ids:
            if framework is not None and framework.executor_of_task(task_id.value) is not None:
                continue
            info = framework.info if framework is not None else msg.framework_info
            aware = info is not None and partition_aware(info)
            self.agent_update(
                msg.framework_id,
                None,
                task_id.value,
                TaskState.TASK_DROPPED if aware else TaskState.TASK_LOST,
                Reason.REASON_RECONCILIATION,
                "Reconciliation: task unknown to the agent",
            )

    # -- executor terminated ----------------------------------------------------------

    def executor_terminated(
        self, executor: Executor, termination: ContainerTermination | None
    ) -> None:
        framework = self.frameworks.get(executor.framework_id.value)
        if framework is None or framework.executors.get(executor.id) is not executor:
            return
        if executor.state is ExecutorState.TERMINATED:
            return
        status = termination.status if termination is not None else None
        log.info("Executor %s terminated (wait status %s)", executor, status)
        self.metrics["executors_terminated"] += 1
        executor.state = ExecutorState.TERMINATED
        executor.cancel_timers()
        if executor.stream is not None:
            executor.stream.close()
            executor.stream = None
        if framework.state is FrameworkState.RUNNING:
            ending = [t for t, task in executor.launched_tasks.items() if not task.state.terminal]
            for task_id in [*ending, *executor.queued_tasks]:
                self._executor_terminated_update(framework, executor, task_id, termination)
        else:
            for task_id in list(executor.launched_tasks):
                executor.terminated_tasks[task_id] = executor.launched_tasks.pop(task_id)
        if not executor.command_task:
            self._send_exited_executor(framework.id, executor.info.executor_id, status)
        if (
            self.status is AgentStatus.TERMINATING
            or framework.state is FrameworkState.TERMINATING
            or not executor.incomplete_tasks()
        ):
            self._remove_executor(framework, executor)
        if framework.idle():
            self._remove_framework(framework)

    def _send_exited_executor(
        self, framework_id: FrameworkID, executor_id: ExecutorID, status: int | None
    ) -> None:
        """EXITED_EXECUTOR, so that the master lets the executor's resources go (never for a
        command executor: the master does not know those)."""
        if self.info.id is None:
            return
        self.send_to_master(
            internal.AgentCall(
                type=internal.AgentCallType.EXITED_EXECUTOR,
                agent_id=self.info.id,
                exited_executor=internal.ExitedExecutor(
                    framework_id=framework_id,
                    executor_id=executor_id,
                    # As Mesos: -1 when the executor never ran (its launch failed).
                    status=status if status is not None else -1,
                ),
            )
        )

    def _executor_terminated_update(
        self,
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
        messages = [
            m for m in (pending and pending.message, termination and termination.message) if m
        ]
        if termination is None and pending is None:
            messages.append("Abnormal executor termination: unknown container")
        limited = termination.limited_resources if termination else []
        self.agent_update(
            framework.id,
            executor,
            task_id,
            state,
            reason or Reason.REASON_EXECUTOR_TERMINATED,
            "; ".join(messages) or "Executor terminated",
            limitation=TaskResourceLimitation(resources=limited) if limited else None,
        )

    def _remove_executor(self, framework: Framework, executor: Executor) -> None:
        log.info("Cleaning up executor %s", executor)
        executor.cancel_timers()
        if executor.checkpoint:
            self.meta.sentinel(framework.id.value, executor.id, executor.container_id.value)
        self.schedule_gc(framework.id.value, executor.id, executor.container_id.value)
        if framework.executors.get(executor.id) is executor:
            del framework.executors[executor.id]
            framework.completed_executors.append(executor)

    def schedule_gc(self, framework_id: str, executor_id: str, container_id: str) -> None:
        """Deletes a run's sandbox and checkpoints after --gc_delay."""
        delay = float(self.flags.gc_delay)
        sandbox = paths.executor_run_dir(
            self.flags.work_dir, self._id().value, framework_id, executor_id, container_id
        )
        self.gc.schedule(delay, sandbox, lambda: self.files.detach(sandbox))
        self.gc.schedule(
            delay,
            paths.run_meta_dir(
                self.flags.work_dir, self._id().value, framework_id, executor_id, container_id
            ),
        )

    def _remove_framework(self, framework: Framework) -> None:
        log.info("Cleaning up framework %s", framework.id.value)
        self.frameworks.pop(framework.id.value, None)
        self.completed_frameworks.append(framework)

    # -- status updates -----------------------------------------------------------------

    def agent_update(
        self,
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
            agent_id=self.info.id,
            executor_id=ex_id,
            timestamp=time.time(),
            uuid=uuid.uuid4().bytes,
            container_status=ContainerStatus(container_id=executor.container_id)
            if executor
            else None,
            limitation=limitation,
        )
        self.record_update(framework_id, executor, status)

    def record_update(
        self, framework_id: FrameworkID, executor: Executor | None, status: TaskStatus
    ) -> bool:
        if executor is not None:
            try:
                executor.update_task_state(status)
            except TaskStateError as exc:
                log.error("Dropping status update: %s", exc)
                self.metrics["invalid_status_updates"] += 1
                return False
        path = None
        if executor is not None and executor.checkpoint:
            path = self.meta.task_updates_path(
                framework_id.value, executor.id, executor.container_id.value, status.task_id.value
            )
        try:
            self.status_updates.update(
                internal.StatusUpdate(framework_id=framework_id, status=status), path
            )
        except StatusUpdateError as exc:
            log.error("Dropping status update: %s", exc)
            self.metrics["invalid_status_updates"] += 1
            return False
        self.metrics["valid_status_updates"] += 1
        if (
            executor is not None
            and status.state.terminal
            and executor.state is ExecutorState.RUNNING
        ):
            self.spawn(self._update_resources(executor), f"resize {executor}")
        return True

    def _forward(self, update: internal.StatusUpdate) -> None:
        """Sends a stream's head to the master, with the task's latest state (Mesos's `forward`)."""
        if self.status is not AgentStatus.RUNNING or self.info.id is None:
            return
        framework = self.frameworks.get(update.framework_id.value)
        executor = framework.executor_of_task(update.status.task_id.value) if framework else None
        task = executor.find_task(update.status.task_id.value) if executor else None
        if task is not None:
            task.status_update_state = update.status.state
            task.status_update_uuid = update.status.uuid
            update = internal.StatusUpdate(
                framework_id=update.framework_id, status=update.status, latest_state=task.state
            )
        self.send_to_master(
            internal.AgentCall(
                type=internal.AgentCallType.STATUS_UPDATE,
                agent_id=self.info.id,
                status_update=update,
            )
        )

    def acknowledge(self, framework_id: str, task_id: str, uuid_: bytes) -> None:
        ended = self.status_updates.acknowledgement(framework_id, task_id, uuid_)
        if ended is None:
            return
        framework = self.frameworks.get(framework_id)
        executor = framework.executor_of_task(task_id) if framework else None
        if framework is None or executor is None:
            return
        if ended and task_id in executor.terminated_tasks:
            executor.complete_task(task_id)
        if executor.state is ExecutorState.TERMINATED and not executor.incomplete_tasks():
            self._remove_executor(framework, executor)
        if framework.idle():
            self._remove_framework(framework)

    # -- messages -------------------------------------------------------------------------

    def framework_message(self, framework_id: str, executor_id: str, data: bytes) -> None:
        framework = self.frameworks.get(framework_id)
        executor = framework.executors.get(executor_id) if framework else None
        if executor is None or executor.state is not ExecutorState.RUNNING:
            log.warning("Dropping a framework message for executor %s: not running", executor_id)
            self.metrics["invalid_framework_messages"] += 1
            return
        self.metrics["valid_framework_messages"] += 1
        self.send_to_executor(
            executor, ev.Event(type=ev.EventType.MESSAGE, message=ev.MessageEvent(data=data))
        )

    def executor_message(self, framework: Framework, executor: Executor, data: bytes) -> None:
        if self.info.id is None:
            return
        self.send_to_master(
            internal.AgentCall(
                type=internal.AgentCallType.EXECUTOR_MESSAGE,
                agent_id=self.info.id,
                executor_message=internal.ExecutorToFramework(
                    framework_id=framework.id, executor_id=executor.info.executor_id, data=data
                ),
            )
        )

    def send_to_executor(self, executor: Executor, event: ev.Event) -> None:
        """Sends after the executor's pending launches (`in_order`)."""

        async def send() -> None:
            if executor.stream is None:
                log.debug("Executor %s has no connection; dropping %s", executor, event.type.value)
                return
            await executor.stream.send(event)

        self.in_order(executor, send, f"send {event.type.value} to {executor}")

    # -- executor subscription ---------------------------------------------------------
