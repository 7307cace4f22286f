"""The hierarchical DRF allocator: which framework is offered which agent's resources.

Behaves as Mesos's `HierarchicalDRFAllocatorProcess` (single-level role tree,
no quota): every cycle walks the active agents with offerable resources,
starting at a random one, and, per agent,
walks the roles by weighted dominant share and, within a role, picks the
framework with the lowest dominant share that may receive the agent (active,
role unsuppressed, no refuse filter for the agent). It then allocates that
role's whole allocatable part of the agent's available resources, so an
agent's resources go to a role at most once per cycle. Shares are updated as
allocations are made, and resources stay allocated until `recover_resources`
(which, as in Mesos, leaves them for the next cycle). Leftovers smaller than
Mesos's default minimum (0.01 cpus or 32 MB) are not offered.

The object is pure bookkeeping, no I/O; `start` only schedules `allocate` on
the event loop. For speed at 10,000 agents the allocator keeps, incrementally,
each agent's available resources and the dominant-resource totals (fixed-point
ints, as `Resources` stores them) of every role and framework, so a cycle does
no whole-cluster arithmetic.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from mesilla.common.resources import UNRESERVED, Resources, to_fixed
from mesilla.common.tasks import Loop, TaskOwner
from mesilla.master.metrics import Timer
from mesilla.master.offer_filters import RefuseFilters

log = logging.getLogger(__name__)

_T = TypeVar("_T")

Allocations = dict[str, dict[str, dict[str, Resources]]]
"""framework_id -> agent_id -> role -> resources."""

# The resources DRF shares are computed over, in the order of the vectors below.
_SHARE_RESOURCES = ("cpus", "mem", "disk", "gpus")
_INDEX = {name: i for i, name in enumerate(_SHARE_RESOURCES)}
# Mesos's default `--min_allocatable_resources` ("cpus:0.01|mem:32"): smaller
# leftovers are not worth an offer.
_MIN_CPUS = to_fixed(0.01)
_MIN_MEM = to_fixed(32)

_METRIC_PREFIX = "allocator/mesos/"

_EMPTY = Resources()
_ZERO = (0, 0, 0, 0)


def _vector(resources: Resources) -> Sequence[int]:
    vec = [0, 0, 0, 0]
    for name, _role, value in resources:
        i = _INDEX.get(name)
        if i is not None and type(value) is int:
            vec[i] += value
    return vec


def _known(table: dict[str, _T], key: str, what: str) -> _T:
    """`table[key]`, or a KeyError that says which `what` the allocator does not know."""
    found = table.get(key)
    if found is None:
        raise KeyError(f"{what} {key} is not known to the allocator")
    return found


def _overlap(left: Resources, right: Resources) -> Resources:
    """The part of `left` also in `right` (subtraction clamps at zero)."""
    return left - (left - right)


@dataclass(eq=False, slots=True)
class _Agent:
    id: str
    hostname: str
    total: Resources
    reserved: bool  # whether `total` holds any reservation (slow path in the cycle)
    active: bool = True
    allocated: dict[str, dict[str, Resources]] = field(default_factory=dict)  # fw -> role -> res
    available: Resources = field(default_factory=Resources)
    available_vec: Sequence[int] = _ZERO

    def set_available(self, available: Resources) -> None:
        self.available = available
        self.available_vec = _vector(available)


@dataclass(eq=False, slots=True)
class _Framework:
    id: str
    roles: list[str]
    suppressed: set[str]
    active: bool
    # False for a framework only known from an agent's `used` resources, i.e. an
    # agent re-registered with its tasks before the framework re-subscribed.
    known: bool = True
    agents: set[str] = field(default_factory=set)  # agents it holds resources on


class HierarchicalDRFAllocator:
    def __init__(
        self,
        *,
        allocation_interval: float = 1.0,
        offer_callback: Callable[[Allocations], None],
        weights: dict[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allocation_interval = allocation_interval
        self._offer_callback = offer_callback
        self._weights: dict[str, float] = dict(weights or {})
        self._clock = clock
        self._random = random.Random()  # its own, so the allocator leaves the global one alone
        self._agents: dict[str, _Agent] = {}
        self._frameworks: dict[str, _Framework] = {}
        # Dominant-resource totals: the cluster, each role, each framework per role.
        self._total_vec = [0, 0, 0, 0]
        self._inverse_total = [0.0, 0.0, 0.0, 0.0]  # shares are products, cheaper than quotients
        self._role_vec: dict[str, list[int]] = {}
        self._fw_vec: dict[str, dict[str, list[int]]] = {}  # role -> fw -> vec
        # Cached shares, kept in step with the vectors (roles' are weighted).
        self._role_share: dict[str, float] = {}
        self._fw_share: dict[str, dict[str, float]] = {}  # role -> fw -> share
        self._filters = RefuseFilters()
        self._runs = 0
        self._run_timer = Timer(_METRIC_PREFIX + "allocation_run_ms")
        self._latency_timer = Timer(_METRIC_PREFIX + "allocation_run_latency_ms")
        self._requested_at: float | None = None
        self._wakeup = asyncio.Event()
        self._loop = Loop("allocator", self._run)

    # --- the allocation loop -------------------------------------------------------

    def start(self, owner: TaskOwner) -> None:
        """Runs the allocation loop, as a task of `owner`, until `stop`."""
        self._loop.start(owner)

    async def stop(self) -> None:
        await self._loop.stop()

    async def _run(self) -> None:
        while True:
            # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that
            # lands as the event fires, and stop() would then wait forever.
            woken = asyncio.ensure_future(self._wakeup.wait())
            try:
                await asyncio.wait([woken], timeout=self.allocation_interval)
            finally:
                woken.cancel()
            # Let the burst of events that woke us land first, then allocate once.
            await asyncio.sleep(0)
            self._wakeup.clear()
            try:
                self.allocate()
            except Exception:
                log.exception("allocation cycle failed")

    def request_allocation(self) -> None:
        if self._requested_at is None:
            self._requested_at = time.perf_counter()
        self._wakeup.set()

    # --- frameworks ---------------------------------------------------------------------

    def add_framework(
        self,
        framework_id: str,
        roles: list[str],
        *,
        suppressed_roles: Iterable[str] = frozenset(),
        active: bool = True,
        used: dict[str, Resources] | None = None,
    ) -> None:
        fw = self._frameworks.get(framework_id)
        if fw is not None and fw.known:
            # A re-subscription the master did not remove first: keep what it holds.
            fw.active = active
            self.update_framework(framework_id, roles, suppressed_roles)
            return
        if fw is None:
            fw = self._frameworks[framework_id] = _Framework(framework_id, [], set(), active)
        fw.known, fw.active = True, active
        self._set_roles(fw, roles, set(suppressed_roles))
        for agent_id, resources in (used or {}).items():
            agent = self._agents.get(agent_id)
            # An agent that re-registered first already reported these resources.
            if agent is not None and framework_id not in agent.allocated and resources:
                self._allocate(fw.id, agent, self._role_of_used(fw, resources), resources)
        self.request_allocation()

    def update_framework(self, framework_id: str, roles: list[str], suppressed_roles: Iterable[str]) -> None:
        self._set_roles(self._framework(framework_id), roles, set(suppressed_roles))
        self.request_allocation()

    def activate_framework(self, framework_id: str) -> None:
        self._framework(framework_id).active = True
        self.request_allocation()

    def deactivate_framework(self, framework_id: str) -> None:
        self._framework(framework_id).active = False
        self._filters.clear_framework(framework_id)

    def remove_framework(self, framework_id: str) -> None:
        fw = self._frameworks.get(framework_id)
        if fw is None:
            return
        for agent_id in list(fw.agents):
            agent = self._agents[agent_id]
            for role, resources in list(agent.allocated.get(framework_id, {}).items()):
                self._deallocate(framework_id, agent, role, resources)
        self._filters.clear_framework(framework_id)
        for role in fw.roles:
            self._forget(role, framework_id)
        del self._frameworks[framework_id]
        self.request_allocation()

    def suppress_offers(self, framework_id: str, roles: Iterable[str] | None = None) -> None:
        fw = self._framework(framework_id)
        fw.suppressed |= set(fw.roles if roles is None else roles)

    def revive_offers(self, framework_id: str, roles: Iterable[str] | None = None) -> None:
        fw = self._framework(framework_id)
        if roles is None:
            fw.suppressed.clear()
        else:
            fw.suppressed -= set(roles)
        # Filters are per agent, not per role, so a revive lifts them all.
        self._filters.clear_framework(framework_id)
        self.request_allocation()

    def _framework(self, framework_id: str) -> _Framework:
        return _known(self._frameworks, framework_id, "framework")

    def _set_roles(self, fw: _Framework, roles: list[str], suppressed: set[str]) -> None:
        for role in fw.roles:
            if role not in roles:
                self._forget(role, fw.id)
        fw.roles = list(dict.fromkeys(roles))
        fw.suppressed = suppressed & set(fw.roles)
        for role in fw.roles:
            self._fw_vec.setdefault(role, {}).setdefault(fw.id, [0, 0, 0, 0])
            self._role_vec.setdefault(role, [0, 0, 0, 0])
            self._update_shares(role, fw.id)

    def _forget(self, role: str, framework_id: str) -> None:
        """Drops a framework's place in a role once it neither subscribes to it nor holds anything."""
        vec = self._fw_vec.get(role, {}).get(framework_id)
        if vec is not None and not any(vec):
            del self._fw_vec[role][framework_id]
            del self._fw_share[role][framework_id]

    def _role_of_used(self, fw: _Framework, resources: Resources) -> str:
        """The role resources of running tasks are accounted to (they carry no allocation role)."""
        reserved = [role for role in resources.roles() if role != UNRESERVED]
        for role in reserved:
            if not fw.roles or role in fw.roles:
                return role
        return fw.roles[0] if fw.roles else UNRESERVED

    # --- agents ---------------------------------------------------------------------------

    def add_agent(
        self,
        agent_id: str,
        hostname: str,
        total: Resources,
        used: dict[str, Resources] | None = None,
    ) -> None:
        if agent_id in self._agents:
            # A re-registration the master did not remove first: its allocations stand.
            self.update_agent(agent_id, total)
            self.activate_agent(agent_id)
            return
        agent = self._agents[agent_id] = _Agent(
            agent_id, hostname, total, reserved=total.roles() != {UNRESERVED} and bool(total)
        )
        agent.set_available(total)
        self._change_total(_vector(total), +1)
        for framework_id, resources in (used or {}).items():
            if not resources:
                continue
            fw = self._frameworks.get(framework_id)
            if fw is None:
                fw = self._frameworks[framework_id] = _Framework(
                    framework_id, [], set(), active=False, known=False
                )
            self._allocate(framework_id, agent, self._role_of_used(fw, resources), resources)
        self.request_allocation()

    def update_agent(self, agent_id: str, total: Resources) -> None:
        agent = self._agent(agent_id)
        self._change_total(_vector(agent.total), -1)
        agent.total = total
        agent.reserved = total.roles() != {UNRESERVED} and bool(total)
        self._change_total(_vector(total), +1)
        allocated = Resources()
        for by_role in agent.allocated.values():
            for resources in by_role.values():
                allocated = allocated + resources
        agent.set_available(total - allocated)
        self.request_allocation()

    def activate_agent(self, agent_id: str) -> None:
        self._agent(agent_id).active = True
        self.request_allocation()

    def deactivate_agent(self, agent_id: str) -> None:
        self._agent(agent_id).active = False

    def remove_agent(self, agent_id: str) -> None:
        agent = self._agents.get(agent_id)
        if agent is None:
            return
        for framework_id, by_role in list(agent.allocated.items()):
            for role, resources in list(by_role.items()):
                self._deallocate(framework_id, agent, role, resources)
        self._change_total(_vector(agent.total), -1)
        self._filters.clear_agent(agent_id)
        del self._agents[agent_id]
        self.request_allocation()

    def _agent(self, agent_id: str) -> _Agent:
        return _known(self._agents, agent_id, "agent")

    def _change_total(self, vec: Sequence[int], sign: int) -> None:
        for i, value in enumerate(vec):
            self._total_vec[i] += sign * value
        self._inverse_total = [1 / t if t > 0 else 0.0 for t in self._total_vec]
        for role in self._role_vec:
            for framework_id in self._fw_vec.get(role, {}):
                self._update_fw_share(role, framework_id)
            self._update_role_share(role)

    # --- resources --------------------------------------------------------------------------

    def recover_resources(
        self,
        framework_id: str,
        agent_id: str,
        resources: Resources,
        refuse_seconds: float | None = None,
    ) -> None:
        agent = self._agents.get(agent_id)
        fw = self._frameworks.get(framework_id)
        # Resources of removed agents or frameworks were freed when they went away.
        if agent is None or fw is None:
            return
        held_by_role = agent.allocated.get(framework_id, {})
        remaining = resources
        for role, held in list(held_by_role.items()):
            if not remaining:
                break
            # Declines and rescinds hand back exactly what was offered: skip the arithmetic.
            taken = held if held == remaining else _overlap(held, remaining)
            if taken:
                self._deallocate(framework_id, agent, role, taken)
                remaining = _EMPTY if taken == remaining else remaining - taken
        if refuse_seconds is not None and refuse_seconds > 0:
            self._filters.add(agent_id, framework_id, self._clock(), refuse_seconds)
        # As in Mesos, recovered resources wait for the next cycle: allocating at
        # once would spin with a framework that declines without a filter.

    def update_weights(self, weights: dict[str, float]) -> None:
        self._weights.update(weights)
        for role in self._role_vec:
            self._update_role_share(role)
        self.request_allocation()

    @property
    def weights(self) -> dict[str, float]:
        """Roles with a configured weight (the others weigh 1.0)."""
        return dict(self._weights)

    def role_allocation(self, role: str) -> Resources:
        """Everything offered or allocated to `role`, over all agents (for GET_ROLES, not the cycle)."""
        total = Resources()
        for agent in self._agents.values():
            for by_role in agent.allocated.values():
                held = by_role.get(role)
                if held is not None:
                    total = total + held
        return total

    def allocation(self, framework_id: str) -> dict[str, Resources]:
        fw = self._frameworks.get(framework_id)
        if fw is None:
            return {}
        out: dict[str, Resources] = {}
        for agent_id in fw.agents:
            total = Resources()
            for resources in self._agents[agent_id].allocated[framework_id].values():
                total = total + resources
            out[agent_id] = total
        return out

    def _allocate(
        self,
        framework_id: str,
        agent: _Agent,
        role: str,
        resources: Resources,
        vec: Sequence[int] | None = None,
    ) -> None:
        by_role = agent.allocated.get(framework_id)
        if by_role is None:
            by_role = agent.allocated[framework_id] = {}
        held = by_role.get(role)
        by_role[role] = resources if held is None else held + resources
        if resources is agent.available:
            agent.available = _EMPTY
            agent.available_vec = _ZERO
        else:
            agent.set_available(agent.available - resources)
        self._frameworks[framework_id].agents.add(agent.id)
        self._account(framework_id, role, _vector(resources) if vec is None else vec, +1)

    def _deallocate(self, framework_id: str, agent: _Agent, role: str, resources: Resources) -> None:
        by_role = agent.allocated[framework_id]
        held = by_role[role]
        left = _EMPTY if held is resources else held - resources
        if left:
            by_role[role] = left
        else:
            del by_role[role]
            if not by_role:
                del agent.allocated[framework_id]
                self._frameworks[framework_id].agents.discard(agent.id)
        agent.set_available(agent.available + resources if agent.available else resources)
        self._account(framework_id, role, _vector(resources), -1)

    def _account(self, framework_id: str, role: str, vec: Sequence[int], sign: int) -> None:
        """Adds (`sign` +1) or removes (-1) `vec` to/from a framework's role and updates the shares."""
        role_vec = self._role_vec.get(role)
        if role_vec is None:
            role_vec = self._role_vec[role] = [0, 0, 0, 0]
        fw_vecs = self._fw_vec.get(role)
        if fw_vecs is None:
            fw_vecs = self._fw_vec[role] = {}
        fw_vec = fw_vecs.get(framework_id)
        if fw_vec is None:
            fw_vec = fw_vecs[framework_id] = [0, 0, 0, 0]
        # Unrolled and inlined: this runs once per allocation, 10,000 times in a large cycle.
        c, m, d, g = vec
        if sign < 0:
            c, m, d, g = -c, -m, -d, -g
        role_vec[0] += c
        role_vec[1] += m
        role_vec[2] += d
        role_vec[3] += g
        fw_vec[0] += c
        fw_vec[1] += m
        fw_vec[2] += d
        fw_vec[3] += g
        i0, i1, i2, i3 = self._inverse_total
        fw_shares = self._fw_share.get(role)
        if fw_shares is None:
            fw_shares = self._fw_share[role] = {}
        fw_shares[framework_id] = max(fw_vec[0] * i0, fw_vec[1] * i1, fw_vec[2] * i2, fw_vec[3] * i3)
        weight = self._weights.get(role, 1.0)
        role_dominant = max(role_vec[0] * i0, role_vec[1] * i1, role_vec[2] * i2, role_vec[3] * i3)
        self._role_share[role] = role_dominant / weight if weight > 0 else math.inf
        if sign < 0:
            fw = self._frameworks.get(framework_id)
            if fw is None or role not in fw.roles:
                self._forget(role, framework_id)

    # --- shares ----------------------------------------------------------------------------------

    def _dominant(self, vec: Sequence[int]) -> float:
        inv = self._inverse_total
        return max(vec[0] * inv[0], vec[1] * inv[1], vec[2] * inv[2], vec[3] * inv[3])

    def _update_shares(self, role: str, framework_id: str) -> None:
        self._update_fw_share(role, framework_id)
        self._update_role_share(role)

    def _update_fw_share(self, role: str, framework_id: str) -> None:
        self._fw_share.setdefault(role, {})[framework_id] = self._dominant(self._fw_vec[role][framework_id])

    def _update_role_share(self, role: str) -> None:
        weight = self._weights.get(role, 1.0)
        self._role_share[role] = self._dominant(self._role_vec[role]) / weight if weight > 0 else math.inf

    # --- the cycle -------------------------------------------------------------------------------------

    def allocate(self) -> Allocations:
        started = time.perf_counter()
        if self._requested_at is not None:
            self._latency_timer.record((started - self._requested_at) * 1000)
            self._requested_at = None
        self._filters.expire(self._clock())
        result = self._allocate_cycle()
        self._runs += 1
        self._run_timer.record((time.perf_counter() - started) * 1000)
        if result:
            self._offer_callback(result)
        return result

    def _candidates(self) -> dict[str, list[str]]:
        """role -> frameworks that may be offered resources for it this cycle, by id."""
        candidates: dict[str, list[str]] = {}
        for fw in self._frameworks.values():
            if fw.active and fw.known:
                for role in fw.roles:
                    if role not in fw.suppressed:
                        candidates.setdefault(role, []).append(fw.id)
        for ids in candidates.values():
            ids.sort()
        return candidates

    def _allocate_cycle(self) -> Allocations:
        candidates = self._candidates()
        result: Allocations = {}
        if not candidates:
            return result
        agents = [a for a in self._agents.values() if a.active and a.available]
        # Mesos shuffles the agents so that none is always first; a random
        # rotation does that too, at a fraction of a shuffle's cost at 10,000 agents.
        if agents:
            start = self._random.randrange(len(agents))
            agents = agents[start:] + agents[:start]
        roles = list(candidates)
        role_share = self._role_share
        fw_share = self._fw_share
        filters = self._filters.by_agent
        allocate = self._allocate
        for agent in agents:
            order = roles if len(roles) == 1 else sorted(roles, key=role_share.__getitem__)
            filtered = filters.get(agent.id)
            for role in order:
                if not agent.available:
                    break
                ids = candidates[role]
                if filtered:
                    ids = [f for f in ids if f not in filtered]
                    if not ids:
                        continue
                if agent.reserved:
                    piece = agent.available.allocatable_to(role)
                    vec = _vector(piece)
                else:
                    piece, vec = agent.available, agent.available_vec
                if vec[0] < _MIN_CPUS and vec[1] < _MIN_MEM:
                    continue
                framework_id = min(ids, key=fw_share[role].__getitem__)
                allocate(framework_id, agent, role, piece, vec)
                by_agent = result.get(framework_id)
                if by_agent is None:
                    by_agent = result[framework_id] = {}
                by_role = by_agent.get(agent.id)
                if by_role is None:
                    by_agent[agent.id] = {role: piece}
                else:
                    by_role[role] = piece
        return result

    # --- metrics -----------------------------------------------------------------------------------------

    @property
    def metrics(self) -> dict[str, float]:
        """Mesos's allocator metrics (`docs/monitoring.md`), flat."""
        out: dict[str, float] = {
            _METRIC_PREFIX + "allocation_runs": float(self._runs),
            _METRIC_PREFIX + "event_queue_dispatches": 0.0,
        }
        out.update(self._run_timer.snapshot())
        out.update(self._latency_timer.snapshot())
        allocated = [0, 0, 0, 0]
        for vec in self._role_vec.values():
            for i in range(4):
                allocated[i] += vec[i]
        for i, name in enumerate(_SHARE_RESOURCES):
            out[f"{_METRIC_PREFIX}resources/{name}/total"] = self._total_vec[i] / 1000
            out[f"{_METRIC_PREFIX}resources/{name}/offered_or_allocated"] = allocated[i] / 1000
        for role, vec in self._role_vec.items():
            out[f"{_METRIC_PREFIX}roles/{role}/shares/dominant"] = self._dominant(vec)
        active: dict[str, int] = {}
        for by_fw in self._filters.by_agent.values():
            for framework_id in by_fw:
                for role in self._frameworks[framework_id].roles:
                    active[role] = active.get(role, 0) + 1
        for role, count in active.items():
            out[f"{_METRIC_PREFIX}offer_filters/roles/{role}/active"] = float(count)
        return out
