"""The master's record of one agent (Mesos's `Slave` in `src/master/master.hpp`).

An agent is *connected* while its REGISTER stream is open. When the stream
closes it is disconnected (its offers are rescinded). The master pings every
agent (Mesos's `SlaveObserver`); one that leaves ``--max_agent_ping_timeouts``
pings in a row unanswered, hung or disconnected, is marked unreachable and
leaves `Master.agents` for `Master.unreachable_agents`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from mesilla.common.http import EventStream
from mesilla.common.resources import Resources
from mesilla.master import accounting
from mesilla.v1.mesos import (
    AgentCapability,
    AgentInfo,
    ExecutorInfo,
    Offer,
    Task,
)


@dataclass
class Agent:
    """State of one registered agent; attributes are read by the operator API and `/state`."""

    id: str
    info: AgentInfo  # always has `id` set
    #: libprocess-style address, ``slave(1)@ip:port``, as `/state` shows it.
    pid: str
    version: str | None = None
    capabilities: list[AgentCapability] = field(default_factory=list)
    stream: EventStream | None = None
    stream_id: str | None = None
    connected: bool = True
    #: False while disconnected: no offers are made for it.
    active: bool = True
    registered_time: float = field(default_factory=time.time)
    reregistered_time: float | None = None
    #: framework_id -> task_id -> Task (the same objects as in `Framework.tasks`); the
    #: indexes below are written by `mesilla.master.book.Book` only.
    tasks: dict[str, dict[str, Task]] = field(default_factory=dict)
    #: framework_id -> executor_id -> ExecutorInfo.
    executors: dict[str, dict[str, ExecutorInfo]] = field(default_factory=dict)
    #: offer_id -> Offer, outstanding offers of this agent's resources.
    offers: dict[str, Offer] = field(default_factory=dict)
    #: The health check (`AgentHealth.observe`), from the first registration on.
    observer: asyncio.Task[None] | None = None
    #: A PING is out and no PONG came back yet.
    pinged: bool = False
    #: Pings in a row that went unanswered.
    ping_timeouts: int = 0
    #: `total_resources` parsed from this `info` (replaced, never changed in place, on re-registration).
    _total: tuple[AgentInfo, Resources] | None = field(default=None, repr=False, compare=False)
    _offered: accounting.OfferedCache = field(
        default_factory=accounting.OfferedCache, repr=False, compare=False
    )

    @property
    def hostname(self) -> str:
        return self.info.hostname

    @property
    def total_resources(self) -> Resources:
        if self._total is None or self._total[0] is not self.info:
            self._total = (self.info, Resources.from_list(self.info.resources))
        return self._total[1]

    def used_resources(self) -> dict[str, Resources]:
        """framework_id -> resources of its live tasks and executors on this agent."""
        return accounting.used_resources(self._placed_tasks(), self.executors)

    def total_used_resources(self) -> Resources:
        return accounting.total_used(self._placed_tasks(), self.executors)

    def _placed_tasks(self) -> Iterator[tuple[str, Task]]:
        return ((framework_id, task) for framework_id, by_id in self.tasks.items() for task in by_id.values())

    def offered_resources(self) -> Resources:
        return self._offered(self.offers)

    def has_executor(self, framework_id: str, executor_id: str) -> bool:
        return executor_id in self.executors.get(framework_id, {})
