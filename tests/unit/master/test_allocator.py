"""The hierarchical DRF allocator: order, roles, reservations, filters, suppression, recovery."""

from __future__ import annotations

import asyncio

import pytest

from mesilla.common.resources import Resources
from mesilla.common.tasks import TaskOwner
from mesilla.master.allocator import Allocations, HierarchicalDRFAllocator

AGENT = Resources.parse("cpus:4;mem:4096;disk:1000;ports:[31000-31099]")
SMALL = Resources.parse("cpus:1;mem:1024")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def offers() -> list[Allocations]:
    return []


@pytest.fixture
def allocator(clock: Clock, offers: list[Allocations]) -> HierarchicalDRFAllocator:
    return HierarchicalDRFAllocator(offer_callback=offers.append, clock=clock)


def agents_of(result: Allocations, framework_id: str) -> set[str]:
    return set(result.get(framework_id, {}))


def test_an_agent_is_offered_whole_to_one_framework(
    allocator: HierarchicalDRFAllocator, offers: list[Allocations]
) -> None:
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", AGENT)

    result = allocator.allocate()

    assert result == {"fw-a": {"agent-1": {"*": AGENT}}}
    assert offers == [result]
    assert allocator.allocation("fw-a") == {"agent-1": AGENT}


def test_allocated_resources_are_not_offered_again_until_recovered(
    allocator: HierarchicalDRFAllocator,
) -> None:
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.allocate()

    assert allocator.allocate() == {}

    allocator.recover_resources("fw-a", "agent-1", AGENT)
    assert allocator.allocation("fw-a") == {}
    assert allocator.allocate() == {"fw-a": {"agent-1": {"*": AGENT}}}


def test_partial_recovery_offers_only_the_unused_part(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.allocate()
    used = Resources.parse("cpus:1;mem:512;ports:[31000-31000]")

    allocator.recover_resources("fw-a", "agent-1", AGENT - used)

    assert allocator.allocation("fw-a") == {"agent-1": used}
    assert allocator.allocate() == {"fw-a": {"agent-1": {"*": AGENT - used}}}


def test_no_offer_no_empty_callback(allocator: HierarchicalDRFAllocator, offers: list[Allocations]) -> None:
    allocator.add_agent("agent-1", "host1", AGENT)
    assert allocator.allocate() == {}
    assert offers == []


def test_drf_offers_to_the_framework_with_the_lowest_dominant_share(
    allocator: HierarchicalDRFAllocator,
) -> None:
    # fw-a would win a tie (ids break ties) but already holds agent-1 wholly.
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.add_agent("agent-2", "host2", AGENT)
    allocator.add_framework("fw-a", ["*"], used={"agent-1": AGENT})
    allocator.add_framework("fw-b", ["*"])

    assert allocator.allocate() == {"fw-b": {"agent-2": {"*": AGENT}}}


def test_dominant_share_is_the_largest_resource_fraction(allocator: HierarchicalDRFAllocator) -> None:
    # Totals: 8 cpus, 7608 mem. fw-a holds 1/8 cpus but 3000/7608 mem (dominant 0.39);
    # fw-z holds 3/8 cpus (dominant 0.375): fw-z goes first, though cpus alone
    # or the id tie-break would pick fw-a.
    allocator.add_agent("agent-0", "host0", Resources.parse("cpus:4;mem:3512"))
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.add_framework("fw-a", ["*"], used={"agent-0": Resources.parse("cpus:1;mem:3000")})
    allocator.add_framework("fw-z", ["*"], used={"agent-0": Resources.parse("cpus:3;mem:512")})

    assert allocator.allocate() == {"fw-z": {"agent-1": {"*": AGENT}}}


def test_drf_alternates_between_equal_frameworks(allocator: HierarchicalDRFAllocator) -> None:
    for i in range(4):
        allocator.add_agent(f"agent-{i}", f"host{i}", AGENT)
    allocator.add_framework("fw-a", ["*"])
    allocator.add_framework("fw-b", ["*"])

    result = allocator.allocate()

    assert len(agents_of(result, "fw-a")) == 2
    assert len(agents_of(result, "fw-b")) == 2


def test_roles_are_ordered_by_weighted_share(clock: Clock) -> None:
    offers: list[Allocations] = []
    allocator = HierarchicalDRFAllocator(offer_callback=offers.append, clock=clock, weights={"heavy": 3.0})
    for i in range(8):
        allocator.add_agent(f"agent-{i}", f"host{i}", AGENT)
    allocator.add_framework("fw-heavy", ["heavy"])
    allocator.add_framework("fw-light", ["light"])

    result = allocator.allocate()

    # Weight 3 vs 1: "heavy" ends with three times as many agents.
    assert len(agents_of(result, "fw-heavy")) == 6
    assert len(agents_of(result, "fw-light")) == 2
    assert {role for by_role in result["fw-heavy"].values() for role in by_role} == {"heavy"}


def test_update_weights_changes_the_order(allocator: HierarchicalDRFAllocator) -> None:
    for i in range(4):
        allocator.add_agent(f"agent-{i}", f"host{i}", AGENT)
    allocator.add_framework("fw-x", ["x"])
    allocator.add_framework("fw-y", ["y"])
    allocator.update_weights({"y": 3.0})

    result = allocator.allocate()

    assert len(agents_of(result, "fw-y")) == 3


def test_reserved_resources_go_only_to_their_role(allocator: HierarchicalDRFAllocator) -> None:
    total = Resources.parse("cpus:2;mem:1024;cpus(db):2;mem(db):2048")
    allocator.add_agent("agent-1", "host1", total)
    allocator.add_framework("fw-web", ["web"])

    result = allocator.allocate()

    assert result == {"fw-web": {"agent-1": {"web": total.unreserved()}}}

    allocator.add_framework("fw-db", ["db"])
    result = allocator.allocate()
    assert result == {"fw-db": {"agent-1": {"db": total.reserved("db")}}}


def test_a_role_gets_its_reservation_and_the_unreserved_part(allocator: HierarchicalDRFAllocator) -> None:
    total = Resources.parse("cpus:2;mem:1024;cpus(db):2;mem(db):2048")
    allocator.add_agent("agent-1", "host1", total)
    allocator.add_framework("fw-db", ["db"])

    assert allocator.allocate() == {"fw-db": {"agent-1": {"db": total}}}


def test_multi_role_framework_is_offered_per_role(allocator: HierarchicalDRFAllocator) -> None:
    total = Resources.parse("cpus:2;mem:1024;cpus(a):1;mem(a):512;cpus(b):1;mem(b):512")
    allocator.add_agent("agent-1", "host1", total)
    allocator.add_framework("fw", ["a", "b"])

    result = allocator.allocate()

    by_role = result["fw"]["agent-1"]
    assert set(by_role) == {"a", "b"}
    assert by_role["a"] + by_role["b"] == total
    assert by_role["a"].reserved("b") == Resources()
    assert by_role["b"].reserved("a") == Resources()


def test_leftovers_below_the_minimum_are_not_offered(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", Resources.parse("cpus:0.001;mem:16;ports:[1-10]"))
    assert allocator.allocate() == {}


def test_refuse_filter_holds_until_it_expires(allocator: HierarchicalDRFAllocator, clock: Clock) -> None:
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.allocate()

    allocator.recover_resources("fw-a", "agent-1", AGENT, refuse_seconds=5)
    assert allocator.allocate() == {}
    assert allocator.metrics["allocator/mesos/offer_filters/roles/*/active"] == 1

    clock.now += 4.9
    assert allocator.allocate() == {}
    clock.now += 0.1
    assert allocator.allocate() == {"fw-a": {"agent-1": {"*": AGENT}}}


def test_a_filtered_agent_goes_to_the_next_framework(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.allocate()
    allocator.recover_resources("fw-a", "agent-1", AGENT, refuse_seconds=5)

    allocator.add_framework("fw-b", ["*"])
    assert allocator.allocate() == {"fw-b": {"agent-1": {"*": AGENT}}}


def test_zero_refuse_seconds_installs_no_filter(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.allocate()
    allocator.recover_resources("fw-a", "agent-1", AGENT, refuse_seconds=0)
    assert allocator.allocate() == {"fw-a": {"agent-1": {"*": AGENT}}}


def test_revive_clears_filters(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.allocate()
    allocator.recover_resources("fw-a", "agent-1", AGENT, refuse_seconds=float("inf"))
    assert allocator.allocate() == {}

    allocator.revive_offers("fw-a")
    assert allocator.allocate() == {"fw-a": {"agent-1": {"*": AGENT}}}


def test_suppress_and_revive_per_role(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw", ["a", "b"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.suppress_offers("fw", {"a"})

    assert allocator.allocate() == {"fw": {"agent-1": {"b": AGENT}}}
    allocator.recover_resources("fw", "agent-1", AGENT)

    allocator.suppress_offers("fw")
    assert allocator.allocate() == {}

    allocator.revive_offers("fw", {"a"})
    assert allocator.allocate() == {"fw": {"agent-1": {"a": AGENT}}}


def test_update_framework_changes_roles_and_suppression(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw", ["a"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.update_framework("fw", ["a", "b"], {"a"})
    assert allocator.allocate() == {"fw": {"agent-1": {"b": AGENT}}}


def test_inactive_frameworks_and_agents_get_nothing(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw-a", ["*"], active=False)
    allocator.add_agent("agent-1", "host1", AGENT)
    assert allocator.allocate() == {}

    allocator.activate_framework("fw-a")
    allocator.deactivate_agent("agent-1")
    assert allocator.allocate() == {}

    allocator.activate_agent("agent-1")
    assert allocator.allocate() == {"fw-a": {"agent-1": {"*": AGENT}}}

    allocator.recover_resources("fw-a", "agent-1", AGENT)
    allocator.deactivate_framework("fw-a")
    assert allocator.allocate() == {}


def test_remove_framework_frees_what_it_held(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.add_framework("fw-a", ["*"], used={"agent-1": SMALL})
    allocator.add_framework("fw-b", ["*"])
    allocator.remove_framework("fw-a")

    assert allocator.allocate() == {"fw-b": {"agent-1": {"*": AGENT}}}
    assert allocator.metrics["allocator/mesos/resources/cpus/offered_or_allocated"] == 4.0


def test_remove_agent_drops_its_resources_and_allocations(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.add_agent("agent-2", "host2", AGENT)
    allocator.allocate()

    allocator.remove_agent("agent-1")

    assert set(allocator.allocation("fw-a")) == {"agent-2"}
    metrics = allocator.metrics
    assert metrics["allocator/mesos/resources/cpus/total"] == 4.0
    assert metrics["allocator/mesos/resources/cpus/offered_or_allocated"] == 4.0
    # Late recoveries for the removed agent are ignored.
    allocator.recover_resources("fw-a", "agent-1", AGENT)


def test_agent_used_resources_count_before_the_framework_resubscribes(
    allocator: HierarchicalDRFAllocator,
) -> None:
    # After a master failover agents re-register with their tasks first.
    allocator.add_agent("agent-1", "host1", AGENT, used={"fw-a": SMALL})
    allocator.add_framework("fw-b", ["*"])
    assert allocator.allocate() == {"fw-b": {"agent-1": {"*": AGENT - SMALL}}}

    allocator.add_framework("fw-a", ["*"], used={"agent-1": SMALL})
    assert allocator.allocation("fw-a") == {"agent-1": SMALL}
    allocator.recover_resources("fw-a", "agent-1", SMALL)
    assert allocator.allocate() == {"fw-a": {"agent-1": {"*": SMALL}}}


def test_update_agent_changes_what_is_available(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_agent("agent-1", "host1", SMALL)
    allocator.add_framework("fw-a", ["*"])
    allocator.allocate()

    allocator.update_agent("agent-1", SMALL + SMALL)

    assert allocator.allocate() == {"fw-a": {"agent-1": {"*": SMALL}}}
    assert allocator.allocation("fw-a") == {"agent-1": SMALL + SMALL}


def test_unknown_ids_raise_with_the_id(allocator: HierarchicalDRFAllocator) -> None:
    with pytest.raises(KeyError, match="fw-x"):
        allocator.activate_framework("fw-x")
    with pytest.raises(KeyError, match="agent-x"):
        allocator.activate_agent("agent-x")


def test_metrics_have_mesos_names(allocator: HierarchicalDRFAllocator) -> None:
    allocator.add_framework("fw-a", ["web"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.allocate()
    allocator.allocate()

    metrics = allocator.metrics

    assert metrics["allocator/mesos/allocation_runs"] == 2
    for suffix in ("", "/count", "/min", "/max", "/p50", "/p90", "/p99", "/p999", "/p9999"):
        assert f"allocator/mesos/allocation_run_ms{suffix}" in metrics
    assert metrics["allocator/mesos/allocation_run_ms/count"] == 2
    assert metrics["allocator/mesos/roles/web/shares/dominant"] == 1.0
    assert metrics["allocator/mesos/resources/mem/total"] == 4096.0


async def test_the_loop_allocates_on_request(clock: Clock) -> None:
    got: asyncio.Queue[Allocations] = asyncio.Queue()
    # An interval long enough that only request_allocation() can explain an offer.
    allocator = HierarchicalDRFAllocator(allocation_interval=3600, offer_callback=got.put_nowait, clock=clock)
    allocator.start(TaskOwner("test"))
    try:
        allocator.add_framework("fw-a", ["*"])
        allocator.add_agent("agent-1", "host1", AGENT)
        result = await asyncio.wait_for(got.get(), 10)
        assert result == {"fw-a": {"agent-1": {"*": AGENT}}}
    finally:
        await allocator.stop()


async def test_the_loop_allocates_every_interval(clock: Clock) -> None:
    got: asyncio.Queue[Allocations] = asyncio.Queue()
    allocator = HierarchicalDRFAllocator(allocation_interval=0.01, offer_callback=got.put_nowait, clock=clock)
    allocator.add_framework("fw-a", ["*"])
    allocator.add_agent("agent-1", "host1", AGENT)
    allocator.allocate()
    allocator.recover_resources("fw-a", "agent-1", AGENT, refuse_seconds=1)
    got.get_nowait()
    allocator.start(TaskOwner("test"))
    try:
        clock.now += 2  # the filter expires; no event announces it, the interval finds it
        result = await asyncio.wait_for(got.get(), 10)
        assert result == {"fw-a": {"agent-1": {"*": AGENT}}}
    finally:
        await allocator.stop()
