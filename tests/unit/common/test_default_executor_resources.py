"""The seed's defaults for DEFAULT executors that leave out cpus or mem."""

from __future__ import annotations

from mesilla.common.resources import Resources, with_default_executor_resources
from mesilla.v1.mesos import AllocationInfo, ReservationInfo, Resource, Scalar, ValueType


def test_only_what_is_missing_is_added_reserved_like_the_rest() -> None:
    disk = Resource(
        name="disk",
        type=ValueType.SCALAR,
        scalar=Scalar(value=10),
        allocation_info=AllocationInfo(role="web"),
        reservations=[ReservationInfo(type="STATIC", role="web")],
    )
    mem = Resource(name="mem", type=ValueType.SCALAR, scalar=Scalar(value=64))
    filled = with_default_executor_resources([disk, mem])
    total = Resources.from_list(filled)
    assert total.scalar("cpus") == 0.1 and total.scalar("mem") == 64
    assert filled[-1].allocation_info == AllocationInfo(role="web")
    assert total.reserved("web").scalar("cpus") == 0.1
    assert with_default_executor_resources(filled) == filled


def test_no_resources_at_all() -> None:
    alone = with_default_executor_resources([], "web")
    total = Resources.from_list(alone)
    assert (total.scalar("cpus"), total.scalar("mem")) == (0.1, 32)
    assert all(r.allocation_info == AllocationInfo(role="web") for r in alone)
