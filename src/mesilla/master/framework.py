"""The master's record of one framework (Mesos's `Framework` in `src/master/framework.cpp`).

A framework is *connected* while its SUBSCRIBE stream is open and *active*
while it may receive offers (connected and not torn down). A framework the
master knows from its registry or from a re-registering agent, but that has
not subscribed since the master started, is *recovered*. Tasks live in
`tasks` until their terminal update is acknowledged, then move to
`completed_tasks`; tasks of an unreachable agent wait in `unreachable_tasks`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from mesilla.common.http import EventStream
from mesilla.common.resources import Resources
from mesilla.master import accounting
from mesilla.v1.mesos import ExecutorInfo, FrameworkInfo, Offer, Task


@dataclass
class Framework:
    """State of one framework; attributes are read by the operator API and `/state`."""

    id: str
    info: FrameworkInfo  # always has `id` set
    max_completed_tasks: int = 1000
    #: The open SUBSCRIBE stream and its `Mesos-Stream-Id`, while connected.
    stream: EventStream | None = None
    stream_id: str | None = None
    connected: bool = False
    active: bool = False
    recovered: bool = False
    registered_time: float | None = None
    reregistered_time: float | None = None
    unregistered_time: float | None = None
    #: Roles the framework asked not to receive offers for (SUPPRESS).
    suppressed_roles: set[str] = field(default_factory=set)
    #: task_id -> Task, every task not yet removed (terminal ones until acknowledged); the
    #: indexes below are written by `mesilla.master.book.Book` only.
    tasks: dict[str, Task] = field(default_factory=dict)
    unreachable_tasks: dict[str, Task] = field(default_factory=dict)
    completed_tasks: deque[Task] = field(init=False)
    #: offer_id -> Offer, the outstanding offers made to this framework.
    offers: dict[str, Offer] = field(default_factory=dict)
    #: agent_id -> executor_id -> ExecutorInfo of the executors it runs.
    executors: dict[str, dict[str, ExecutorInfo]] = field(default_factory=dict)
    #: Pending removal after a disconnection (`failover_timeout`).
    failover_timer: asyncio.TimerHandle | None = None
    heartbeat_task: asyncio.Task[None] | None = None
    _offered: accounting.OfferedCache = field(
        default_factory=accounting.OfferedCache, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.completed_tasks = deque(maxlen=self.max_completed_tasks)

    @property
    def roles(self) -> list[str]:
        return self.info.effective_roles()

    @property
    def partition_aware(self) -> bool:
        return self.info.has_capability("PARTITION_AWARE")

    def has_capability(self, name: str) -> bool:
        return self.info.has_capability(name)

    def task(self, task_id: str) -> Task | None:
        return self.tasks.get(task_id) or self.unreachable_tasks.get(task_id)

    def used_resources(self) -> dict[str, Resources]:
        """agent_id -> resources of its live tasks and executors (what the allocator calls `used`)."""
        return accounting.used_resources(self._placed_tasks(), self.executors)

    def total_used_resources(self) -> Resources:
        return accounting.total_used(self._placed_tasks(), self.executors)

    def _placed_tasks(self) -> Iterator[tuple[str, Task]]:
        return ((task.agent_id.value, task) for task in self.tasks.values())

    def offered_resources(self) -> Resources:
        return self._offered(self.offers)

    def connect(self, stream: EventStream, stream_id: str) -> None:
        self.stream, self.stream_id = stream, stream_id
        self.connected = self.active = True
        self.recovered = False
        now = time.time()
        if self.registered_time is None:
            self.registered_time = now
        else:
            self.reregistered_time = now
        self.unregistered_time = None

    def disconnect(self) -> EventStream | None:
        """Forgets the stream (returned so the caller may close it) and stops offers."""
        stream, self.stream, self.stream_id = self.stream, None, None
        self.connected = self.active = False
        if self.heartbeat_task is not None:
            self.heartbeat_task.cancel()
            self.heartbeat_task = None
        return stream
