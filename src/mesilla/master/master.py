"""The master: frameworks, agents, tasks and offers (Mesos's `src/master/master.cpp`).

`Master` builds its parts and owns them; each part gets, in its constructor,
the `Parts` bundle (`mesilla.master.parts`: the book, allocator, outbox,
metrics, registry and task owner they share) and the other parts it calls:

* `book` (`Book`): every index of the cluster's state, pure; the parts below
  are the only callers of its writers;
* `outbox` (`Outbox`): everything sent to frameworks, agents and observers;
* `offerer` (`Offerer`): the allocator's allocations as offers, and back;
* `tasks` (`Tasks`): adding, updating and removing tasks and executors;
* `launcher` (`Launcher`): ACCEPT, i.e. LAUNCH and LAUNCH_GROUP;
* `framework_streams` (`FrameworkStreams`): frameworks' subscriptions,
  failover, teardown, UPDATE_FRAMEWORK, SUPPRESS and REVIVE;
* `agent_links` (`AgentLinks`): agents' registration, health
  (`agent_health`), disconnection, unreachability and removal;
* `status_updates` (`StatusUpdates`): task updates, acknowledgements, kills,
  reconciliation;
* `relay` (`Relay`): messages between schedulers and executors;
* `owner` (`mesilla.common.tasks.TaskOwner`): every background task, cancelled and
  awaited at `stop`.

The HTTP modules (`scheduler_api`, `agent_api`, `operator_api`, `v0_scheduler`
and `endpoints`) turn requests into calls on these parts.

State readable by the operator surfaces (the book's, see `mesilla.master.book`):
`master_info`, `start_time`, `elected_time`, `flags`, `frameworks`,
`completed_frameworks`, `agents`, `recovered_agents`, `unreachable_agents`,
`gone_agents`, `offers`, `counters`, `allocator`; per framework see
`mesilla.master.framework.Framework`, per agent `mesilla.master.agent.Agent`.
Observers (`add_observer`) receive the operator API's events (`Outbox`).
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections import Counter, deque
from typing import Generic, TypeVar, cast

from mesilla import MESOS_VERSION
from mesilla.common.authorization import Authorizer
from mesilla.common.errors import ServiceUnavailable
from mesilla.common.flags import Flags
from mesilla.common.tasks import TaskOwner
from mesilla.master.agent import Agent
from mesilla.master.agents import AgentLinks
from mesilla.master.allocator import HierarchicalDRFAllocator
from mesilla.master.book import Book
from mesilla.master.framework import Framework
from mesilla.master.frameworks import FrameworkStreams
from mesilla.master.heap import HeapKeeper
from mesilla.master.launch import Launcher
from mesilla.master.messages import Relay
from mesilla.master.offers import Offerer
from mesilla.master.outbox import Observer, Outbox
from mesilla.master.parts import Parts
from mesilla.master.registry import Registry
from mesilla.master.status_updates import StatusUpdates
from mesilla.master.streams import StreamWatch
from mesilla.master.tasks import Tasks
from mesilla.v1.mesos import Address, AgentInfo, MasterInfo, Offer

log = logging.getLogger(__name__)

T = TypeVar("T")


def ip_as_int(ip: str) -> int:
    """MasterInfo.ip: the IPv4 address in network byte order read as a host integer, as Mesos does."""
    try:
        return int.from_bytes(socket.inet_aton(ip), "little")
    except OSError:
        return 0


class _FromBook(Generic[T]):
    """A read-only attribute of the master that is the book's attribute of the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, master: Master, owner: type | None = None) -> T:
        return cast(T, getattr(master.book, self._name))

    def __set__(self, master: Master, value: T) -> None:
        raise AttributeError(f"Master.{self._name} is the book's: the master's parts change it")


class Master:
    def __init__(self, flags: Flags, registry: Registry, authorizer: Authorizer | None = None) -> None:
        self.flags = flags
        self.authorizer = authorizer  # --acls
        self.registry = registry
        self.id = str(uuid.uuid4())
        #: Filled in by `set_address` once the HTTP server is bound.
        self.master_info = MasterInfo(id=self.id, ip=0, port=0, version=MESOS_VERSION)
        self.start_time = time.time()
        #: This master is always the leader once recovered (no ZooKeeper).
        self.elected_time: float | None = None
        self.recovered = False
        #: Set when `stop` begins; the HTTP server may still answer until it is cleaned up.
        self.stopping = False
        #: Mesos metric name -> count, e.g. ``master/valid_status_updates``,
        #: ``master/messages_launch_tasks``, ``master/slave_registrations``,
        #: ``master/tasks_finished``; absent keys read 0.
        self.counters: Counter[str] = Counter()
        self.book = Book(
            self.id,
            max_completed_frameworks=flags.get("max_completed_frameworks") or 50,
            max_completed_tasks=flags.get("max_completed_tasks_per_framework") or 1000,
        )
        self.owner = TaskOwner("master")
        self.outbox = Outbox(self.owner)
        self.allocator = HierarchicalDRFAllocator(
            allocation_interval=flags.allocation_interval,
            # The allocator runs once started, after the offerer below exists.
            offer_callback=lambda allocations: self.offerer.allocated(allocations),
            weights=parse_weights(flags.get("weights")),
        )
        parts = Parts(
            book=self.book,
            allocator=self.allocator,
            outbox=self.outbox,
            counters=self.counters,
            registry=registry,
            owner=self.owner,
            master_info=lambda: self.master_info,
            stopping=lambda: self.stopping,
        )
        self.offerer = Offerer(parts, offer_timeout=flags.get("offer_timeout"))
        self.tasks = Tasks(parts)
        self.launcher = Launcher(parts, self.offerer, self.tasks, authorizer)
        self.framework_streams = FrameworkStreams(
            parts,
            self.offerer,
            self.tasks,
            heartbeat_interval=flags.heartbeat_interval,
            allowed_roles=flags.get("roles"),
        )
        self.agent_links = AgentLinks(
            parts,
            self.offerer,
            self.tasks,
            self.framework_streams,
            ping_timeout=flags.agent_ping_timeout,
            max_ping_timeouts=flags.max_agent_ping_timeouts,
            reregister_timeout=flags.agent_reregister_timeout,
        )
        self.status_updates = StatusUpdates(parts, self.tasks)
        self.relay = Relay(parts, self.tasks)
        #: Holds the SUBSCRIBE / REGISTER streams open and notices departed peers.
        self.streams = StreamWatch()
        self.heap = HeapKeeper()

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
        self.book.recover(state, time.time())
        for framework_id, info in state.frameworks.items():
            self.framework_streams.recover(framework_id, info)
        self.agent_links.start()
        self.streams.start(self.owner)
        self.heap.start(self.owner)
        self.recovered = True
        self.elected_time = time.time()
        self.allocator.start(self.owner)
        log.info(
            "master %s recovered %d agent(s) and %d framework(s)",
            self.id,
            len(self.book.recovered_agents),
            len(self.book.frameworks),
        )

    async def stop(self) -> None:
        """Closes every stream and stops background work; the registry keeps the state.
        Once: a second call (the server's cleanup after an earlier stop) does nothing."""
        if self.stopping:
            return
        self.stopping = True
        # First, at once: from here on a closing stream is the master's doing, not a failure.
        self.offerer.stop()
        self.framework_streams.stop()
        self.agent_links.stop()
        await self.allocator.stop()
        await self.streams.stop()
        await self.heap.stop()
        await self.owner.close()
        await self.registry.close()

    def check_serving(self) -> None:
        """Raises ServiceUnavailable (503) before the registry is recovered and once `stop` has
        begun, as Mesos's master answers when it is not (or no longer) the leader."""
        if self.stopping:
            raise ServiceUnavailable("Master is shutting down")
        if not self.recovered:
            raise ServiceUnavailable("Master has not finished recovery")

    # --- what the operator surfaces read ------------------------------------------------

    frameworks: _FromBook[dict[str, Framework]] = _FromBook()
    completed_frameworks: _FromBook[deque[Framework]] = _FromBook()
    agents: _FromBook[dict[str, Agent]] = _FromBook()
    recovered_agents: _FromBook[dict[str, AgentInfo]] = _FromBook()
    unreachable_agents: _FromBook[dict[str, float]] = _FromBook()
    gone_agents: _FromBook[dict[str, float]] = _FromBook()
    offers: _FromBook[dict[str, Offer]] = _FromBook()

    def add_observer(self, callback: Observer) -> None:
        self.outbox.add_observer(callback)

    def remove_observer(self, callback: Observer) -> None:
        self.outbox.remove_observer(callback)

    # --- operator actions -------------------------------------------------------------------

    async def mark_agent_gone(self, agent_id: str) -> None:
        """MARK_AGENT_GONE: the agent never comes back; its tasks are gone."""
        await self.agent_links.mark_gone(agent_id)


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
            raise ValueError(f"expected role=weight with a positive weight, got '{item}'")
        weights[role.strip()] = value
    return weights
