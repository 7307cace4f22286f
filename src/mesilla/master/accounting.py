"""Resource accounting shared by the master's books of agents and frameworks.

As Mesos's `usedResources` and `offeredResources` of its `Slave` and
`Framework`: what live tasks and executors use, keyed by the other side (an
agent's use by framework, a framework's by agent), and what offers hold.
"""

from __future__ import annotations

from collections.abc import Iterable

from mesilla.common.resources import Resources
from mesilla.v1.mesos import ExecutorInfo, Offer, Resource, Task


def used_resources(
    tasks: Iterable[tuple[str, Task]], executors: dict[str, dict[str, ExecutorInfo]]
) -> dict[str, Resources]:
    """key -> resources of its non-terminal tasks and its executors."""
    # Each key's resource lists parsed and summed into one value: `/state` asks this of
    # every framework, thousands of tasks each; a `Resources` per task and per `+` was
    # most of its cost.
    lists = _resource_lists(tasks, executors)
    return {key: Resources.from_list(resources) for key, resources in lists.items()}


def total_used(
    tasks: Iterable[tuple[str, Task]], executors: dict[str, dict[str, ExecutorInfo]]
) -> Resources:
    """The values of `used_resources` summed, parsed in one go (not one `Resources` per key)."""
    lists = _resource_lists(tasks, executors)
    return Resources.from_list([resource for resources in lists.values() for resource in resources])


def _resource_lists(
    tasks: Iterable[tuple[str, Task]], executors: dict[str, dict[str, ExecutorInfo]]
) -> dict[str, list[Resource]]:
    lists: dict[str, list[Resource]] = {}
    for key, task in tasks:
        if not task.state.terminal:
            lists.setdefault(key, []).extend(task.resources)
    for key, by_id in executors.items():
        for executor in by_id.values():
            lists.setdefault(key, []).extend(executor.resources)
    return lists


class OfferedCache:
    """`offered_resources` of an offer book, summed again only when its set of offers changed.

    An offer's resources never change and its id is never reused, so each
    offer is parsed once and the ids identify the sum; `/state` asks every
    agent and framework for it.
    """

    __slots__ = ("_ids", "_parsed", "_total")

    def __init__(self) -> None:
        self._ids: tuple[str, ...] = ()
        self._parsed: dict[str, Resources] = {}
        self._total = Resources()

    def __call__(self, offers: dict[str, Offer]) -> Resources:
        ids = tuple(offers)
        if ids != self._ids:
            old = self._parsed
            self._parsed = {
                offer_id: old.get(offer_id) or Resources.from_list(offer.resources)
                for offer_id, offer in offers.items()
            }
            self._ids, self._total = ids, Resources.sum(self._parsed.values())
        return self._total
