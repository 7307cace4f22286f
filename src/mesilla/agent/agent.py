"""The agent's state, as Mesos's `Slave` (`src/slave/slave.cpp`) holds it.

`Agent` holds what the agent knows (frameworks, executors, tasks, its
status, id and metrics) and the services every part uses: the containerizer,
the channel to the master, the checkpointer, the status update manager, the
owner of its background tasks, and each executor's ordered channel
(`in_order`, `send_to_executor`). What it does lives in one module per
concept, each a set of functions of the agent:

* `master_events`: the master's events, by a table from event type to handler;
* `launches`: RUN_TASK and RUN_TASK_GROUP, up to the executor's container;
* `terminations`: kills, executor and framework shutdowns, ended executors;
* `status_updates`: updates the agent makes or receives, forwarded to the master;
* `messages`: framework messages, both ways;
* `resources`: sizing an executor's container to its tasks.

Status updates, from executors or made by the agent itself, go through the
`StatusUpdateManager`, which checkpoints them and delivers them reliably.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from mesilla.agent import authorize, paths
from mesilla.agent.checkpointer import Checkpointer, Run
from mesilla.agent.executor_auth import ExecutorTokens
from mesilla.agent.flags import AgentFlags
from mesilla.agent.gc import GarbageCollector
from mesilla.agent.state import MAX_COMPLETED_FRAMEWORKS, Executor, ExecutorState, Framework
from mesilla.agent.status_update_manager import RETRY_INTERVAL_MIN, StatusUpdateManager
from mesilla.common.attached_files import Files
from mesilla.common.authorization import Authorizer
from mesilla.common.tasks import TaskOwner
from mesilla.common.tls import TlsConfig
from mesilla.containerizer.interface import Containerizer
from mesilla.v1 import executor as ev
from mesilla.v1 import internal
from mesilla.v1.mesos import AgentID, AgentInfo, FrameworkInfo, MasterInfo

log = logging.getLogger(__name__)

T = TypeVar("T")

# What this agent supports, by Mesos's AgentInfo.Capability names.
CAPABILITIES = ("MULTI_ROLE", "HIERARCHICAL_ROLE", "RESERVATION_REFINEMENT", "TASK_RESOURCE_LIMITS")


class AgentStatus(enum.Enum):
    RECOVERING = "RECOVERING"
    DISCONNECTED = "DISCONNECTED"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"


def partition_aware(info: FrameworkInfo) -> bool:
    return info.has_capability("PARTITION_AWARE")


class MasterChannel(Protocol):
    """Where the agent's calls to the master go (`MasterLink`): sent in order, dropped
    while disconnected (status updates are retried by the status update manager)."""

    def send(self, call: internal.AgentCall) -> None: ...


class NoMaster:
    """The channel of an agent that talks to no master (recovery only, tests)."""

    def send(self, call: internal.AgentCall) -> None:
        log.debug("No master: dropping %s", call.type.value)


@dataclass
class Security:
    """What the agent checks and proves, from its authentication flags."""

    executor_tokens: ExecutorTokens | None = None  # --authenticate_http_executors
    # --http_credentials, for executors that name their principal (ExecutorInfo.principal).
    http_credentials: dict[str, str] | None = None
    authorizer: Authorizer | None = None  # --acls
    tls: TlsConfig | None = None  # TLS on the agent's listener


class Agent:
    def __init__(
        self,
        flags: AgentFlags,
        containerizer: Containerizer,
        info: AgentInfo,
        *,
        master: MasterChannel | None = None,
        security: Security | None = None,
        status_update_interval: float = RETRY_INTERVAL_MIN,
    ) -> None:
        self.flags = flags
        # A sandbox's files are for whom may access its executor's (access_sandboxes).
        self.files = Files(lambda request, path: authorize.check_sandbox(self, request, path))
        self.containerizer = containerizer
        self.master: MasterChannel = master if master is not None else NoMaster()
        self.checkpointer = Checkpointer(flags.work_dir)
        self.info = info
        self.status = AgentStatus.RECOVERING
        self.frameworks: dict[str, Framework] = {}
        self.completed_frameworks: deque[Framework] = deque(maxlen=MAX_COMPLETED_FRAMEWORKS)
        self.master_info: MasterInfo | None = None
        self.start_time = time.time()
        self.recovery_time: float | None = None
        self.endpoint = f"{flags.ip}:{flags.port}"
        security = security or Security()
        self.executor_tokens = security.executor_tokens
        self.http_credentials = security.http_credentials or {}
        self.authorizer = security.authorizer
        self.tls = security.tls
        self.tasks = TaskOwner("agent")
        self.gc = GarbageCollector(flags.work_dir, self.tasks)
        self.status_updates = StatusUpdateManager(
            self._forward, self.checkpointer, self.tasks, initial_interval=status_update_interval
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
        self.framework_removed = asyncio.Event()  # stopping waits for the last one
        # Set once recovery knows the executors and their containers: executors
        # that re-subscribe sooner are held until then (executor_api).
        self.executors_recovered = asyncio.Event()

    # -- identity ---------------------------------------------------------------------

    @property
    def agent_id(self) -> AgentID | None:
        return self.info.id

    def id(self) -> AgentID:
        """The agent's id, which it has once registered (or recovered)."""
        assert self.info.id is not None, "the agent has no id before registering"
        return self.info.id

    @property
    def pid(self) -> str:
        return f"slave(1)@{self.endpoint}"

    def run_of(self, executor: Executor) -> Run:
        """The executor's run, as its checkpoints and sandbox are named."""
        return self.checkpointer.run(
            self.id().value, executor.framework_id.value, executor.id, executor.container_id.value
        )

    # -- lifetime ---------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, T], what: str) -> asyncio.Task[T]:
        """Runs a background job owned by the agent (cancelled and awaited by `close`); its
        failure is logged, and kept in the task for whoever awaits it. Closed once closing."""
        return self.tasks.spawn(coro, what)

    async def close(self) -> None:
        """Stops the agent's own activity; executors and containers keep running."""
        self.status_updates.close()
        self.gc.close()
        for framework in self.frameworks.values():
            for executor in framework.executors.values():
                executor.cancel_timers()
                if executor.stream is not None:
                    executor.stream.close()
        await self.tasks.close()

    # -- executors --------------------------------------------------------------------

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

    def send_to_executor(self, executor: Executor, event: ev.Event) -> None:
        """Sends after the executor's pending launches (`in_order`)."""

        async def send() -> None:
            if executor.stream is None:
                log.debug("Executor %s has no connection; dropping %s", executor, event.type.value)
                return
            await executor.stream.send(event)

        self.in_order(executor, send, f"send {event.type.value} to {executor}")

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

    def schedule_gc(self, framework_id: str, executor_id: str, container_id: str) -> None:
        """Deletes a run's sandbox and checkpoints after --gc_delay."""
        delay = self.flags.gc_delay
        agent_id = self.id().value
        sandbox = paths.executor_run_dir(
            self.flags.work_dir, agent_id, framework_id, executor_id, container_id
        )
        self.gc.schedule(delay, sandbox, lambda: self.files.detach(sandbox))
        self.gc.schedule(
            delay,
            paths.run_meta_dir(self.flags.work_dir, agent_id, framework_id, executor_id, container_id),
        )

    # -- the master -------------------------------------------------------------------

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
        self.master.send(
            internal.AgentCall(
                type=internal.AgentCallType.STATUS_UPDATE,
                agent_id=self.info.id,
                status_update=update,
            )
        )
