"""Resource accounting shared by the master's books of agents and frameworks.

As Mesos's `usedResources` and `offeredResources` of its `Slave` and
`Framework`: what live tasks and executors use, keyed by the other side (an
agent's use by framework, a framework's by agent), and what offers hold.
"""

from __future__ import annotations

from collections.abc import Iterable

from mesilla.common.resources import Resources
from mesilla.v1.mesos import ExecutorInfo, Offer, Task


def used_resources(
    tasks: Iterable[tuple[str, Task]], executors: dict[str, dict[str, ExecutorInfo]]
) -> dict[str, Resources]:
    """key -> resources of its non-terminal tasks and its executors."""
    used: dict[str, Resources] = {}

    def add(key: str, resources: Resources) -> None:
        used[key] = used.get(key, Resources()) + resources

    for key, task in tasks:
        if not task.state.terminal:
            add(key, Resources.from_list(task.resources))
    for key, by_id in executors.items():
        for executor in by_id.values():
            add(key, Resources.from_list(executor.resources))
    return used


def offered_resources(offers: Iterable[Offer]) -> Resources:
    total = Resources()
    for offer in offers:
        total = total + Resources.from_list(offer.resources)
    return total
