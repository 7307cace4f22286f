"""The master: frameworks, agents, tasks and offers (Mesos's `src/master/master.cpp`).

`Master` owns the cluster state and the allocator; the HTTP modules
(`scheduler_api`, `agent_api`, `operator_api` and `endpoints`) turn requests
into calls on it. Frameworks are handled in `frameworks.py`, agents in
`agents.py`, offers and launches in `offers.py` and `launch.py`, task state in
`status_updates.py`; each is a mixin of `Master` so all state is in one object.

Operator actions: `teardown(framework)`, `mark_agent_gone(agent_id)`.

State readable by the operator surfaces (all documented on the attributes):
`master_info`, `start_time`, `elected_time`, `flags`, `frameworks`,
`completed_frameworks`, `agents`, `recovered_agents`, `unreachable_agents`,
`gone_agents`, `offers`, `tasks()`, `counters`, `allocator`; per framework
see `mesilla.master.framework.Framework`, per agent `mesilla.master.agent.Agent`.

Observers (`add_observer`) receive the operator API's events, synchronously:
("TASK_ADDED", Task), ("TASK_UPDATED", (framework_id, TaskStatus, TaskState)),
("AGENT_ADDED", Agent), ("AGENT_REMOVED", agent_id), ("FRAMEWORK_ADDED",
Framework), ("FRAMEWORK_UPDATED", Framework), ("FRAMEWORK_REMOVED", Framework).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from mesilla import MESOS_VERSION
from mesilla.common.authorization import Authorizer
from mesilla.common.flags import Flags
from mesilla.common.resources import Resources
from mesilla.master.agent import Agent
from mesilla.master.agents import AgentsMixin
from mesilla.master.allocator import HierarchicalDRFAllocator
from mesilla.master.framework import Framework
from mesilla.master.frameworks import FrameworksMixin
from mesilla.master.heap import HeapKeeper
from mesilla.master.launch import LaunchMixin
from mesilla.master.offers import OffersMixin
from mesilla.master.registry import Registry
from mesilla.master.status_updates import StatusUpdatesMixin
from mesilla.master.streams import StreamWatch
from mesilla.v1.mesos import Address, AgentInfo, MasterInfo, Offer, Task

log = logging.getLogger(__name__)

Observer = Callable[[str, Any], None]


def ip_as_int(ip: str) -> int:
    """MasterInfo.ip: the IPv4 address in network byte order read as a host integer, as Mesos does."""
    try:
        return int.from_bytes(socket.inet_aton(ip), "little")
    except OSError:
        return 0


class Master(
    AgentsMixin, FrameworksMixin, OffersMixin, LaunchMixin, StatusUpdatesMixin
):
    def __init__(self, flags: Flags, registry: Registry) -> None:
        self.flags = flags
        self.authorizer: Authorizer | None = None  # --acls
        self.registry = registry
        self.id = str(uuid.uuid4())
        #: Filled in by `set_address` once the HTTP server is bound.
        self.master_info = MasterInfo(id=self.id, ip=0, port=0, version=MESOS_VERSION)
        self.start_time = time.time()
        #: This master is always the leader once recovered (no ZooKeeper).
        self.elected_time: float | None = None
        self.recovered = False
        #: Set by `stop`: streams closing from now on are the master's doing, not failures.
        self.stopping = False
        #: framework_id -> Framework, every framework not torn down (connected or not).
        self.frameworks: dict[str, Framework] = {}
        self.completed_frameworks: deque[Framework] = deque(
            maxlen=flags.get("max_completed_frameworks") or 50
        )
        #: agent_id -> Agent, registered agents (connected or disconnected).
        self.agents: dict[str, Agent] = {}
        #: agent_id -> AgentInfo of agents known from the registry, not yet re-registered.
        self.recovered_agents: dict[str, AgentInfo] = {}
        #: agent_id -> time (seconds since the epoch) it was marked unreachable / gone.
        self.unreachable_agents: dict[str, float] = {}
        self.gone_agents: dict[str, float] = {}
        #: offer_id -> Offer, every outstanding offer.
        self.offers: dict[str, Offer] = {}
        #: Mesos metric name -> count, e.g. ``master/valid_status_updates``,
        #: ``master/messages_launch_tasks``, ``master/slave_registrations``,
        #: ``master/tasks_finished``; absent keys read 0.
        self.counters: Counter[str] = Counter()
        self.allocator = HierarchicalDRFAllocator(
            allocation_interval=flags.allocation_interval,
            offer_callback=self._on_allocations,
            weights=parse_weights(flags.get("weights")),
        )
        #: Holds the SUBSCRIBE / REGISTER streams open and notices departed peers.
        self.streams = StreamWatch()
        self.heap = HeapKeeper()
        self._observers: list[Observer] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._offer_timers: dict[str, asyncio.TimerHandle] = {}
        self._next_framework = 0
        self._next_agent = 0
        self._next_offer = 0
        self._reregister_timer: asyncio.TimerHandle | None = None

    # --- life cycle -----------------------------------------------------------------

    def set_address(self, ip: str, port: int, hostname: str | None = None) -> None:
        hostname = hostname or ip
        self.master_info = MasterInfo(
            id=self.id,
            ip=ip_as_int(ip),
            port=port,
            pid=f"master@{ip}:{port}",
            hostname=hostname,
            version=MESOS_VERSION,
            address=Address(hostname=hostname, ip=ip, port=port),
        )

    async def start(self) -> None:
        """Recovers the registry, then starts allocating; until then calls get 503."""
        state = await self.registry.recover()
        for agent_id, entry in state.agents.items():
            if entry.mark.value == "ADMITTED":
                self.recovered_agents[agent_id] = entry.info
            elif entry.mark.value == "UNREACHABLE":
                self.unreachable_agents[agent_id] = entry.time or time.time()
            else:
                self.gone_agents[agent_id] = entry.time or time.time()
        for framework_id, info in state.frameworks.items():
            self._recover_framework(framework_id, info)
        if self.recovered_agents:
            self._reregister_timer = asyncio.get_running_loop().call_later(
                self.flags.agent_reregister_timeout,
                lambda: self.spawn(self._expire_recovered_agents()),
            )
        self.streams.start()
        self.heap.start()
        self.recovered = True
        self.elected_time = time.time()
        await self.allocator.start()
        log.info(
            "master %s recovered %d agent(s) and %d framework(s)",
            self.id,
            len(self.recovered_agents),
            len(self.frameworks),
        )

    async def stop(self) -> None:
        """Closes every stream and stops background work; the registry keeps the state."""
        self.stopping = True
        await self.allocator.stop()
        for timer in self._offer_timers.values():
            timer.cancel()
        if self._reregister_timer is not None:
            self._reregister_timer.cancel()
        for framework in self.frameworks.values():
            if framework.failover_timer is not None:
                framework.failover_timer.cancel()
            stream = framework.disconnect()
            if stream is not None:
                stream.close()
        for agent in self.agents.values():
            self._close_agent_stream(agent)
        await self.streams.stop()
        await self.heap.stop()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.registry.close()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Runs `coro` in the background, owned by the master (cancelled by `stop`)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("master background task failed", exc_info=task.exception())

    # --- observers --------------------------------------------------------------------

    def add_observer(self, callback: Observer) -> None:
        self._observers.append(callback)

    def remove_observer(self, callback: Observer) -> None:
        if callback in self._observers:
            self._observers.remove(callback)

    def notify(self, kind: str, payload: Any) -> None:
        for callback in list(self._observers):
            try:
                callback(kind, payload)
            except Exception:
                log.exception("observer failed on %s", kind)

    # --- queries ------------------------------------------------------------------------

    def tasks(self) -> Iterator[Task]:
        """Every task of every framework that is not completed (unreachable ones included)."""
        for framework in self.frameworks.values():
            yield from framework.tasks.values()
            yield from framework.unreachable_tasks.values()

    def framework_used(self, framework_id: str) -> dict[str, Resources]:
        framework = self.frameworks.get(framework_id)
        return {} if framework is None else framework.used_resources()

    # --- ids ------------------------------------------------------------------------------

    def new_framework_id(self) -> str:
        self._next_framework += 1
        return f"{self.id}-{self._next_framework - 1:04d}"

    def new_agent_id(self) -> str:
        self._next_agent += 1
        return f"{self.id}-S{self._next_agent - 1}"

    def new_offer_id(self) -> str:
        self._next_offer += 1
        return f"{self.id}-O{self._next_offer - 1}"


def parse_weights(text: str | None) -> dict[str, float] | None:
    """``--weights=role1=2.0,role2=3.5``; raises ValueError naming the bad item."""
    if not text:
        return None
    weights = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        role, eq, weight = item.partition("=")
        try:
            value = float(weight) if eq else -1.0
        except ValueError:
            value = -1.0
        if not role.strip() or value <= 0:
            raise ValueError(
                f"expected role=weight with a positive weight, got '{item}'"
            )
        weights[role.strip()] = value
    return weights
