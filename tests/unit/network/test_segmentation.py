"""VLAN IDs per trunk: 1-4094, the lowest free, duplicates refused on the same trunk only."""

from __future__ import annotations

import pytest

from mesilla.network import errors, segmentation
from mesilla.network.segmentation import TrunkSegments


def test_validate() -> None:
    assert segmentation.validate("vlan", 1) == ("vlan", 1)
    assert segmentation.validate("vlan", "4094") == ("vlan", 4094)
    assert segmentation.validate("vlan", None) == ("vlan", None)
    for bad in (0, 4095, -1, True, "x", 1.5):
        with pytest.raises(errors.HTTPBadRequest, match="segmentation_id"):
            segmentation.validate("vlan", bad)
    with pytest.raises(errors.HTTPBadRequest, match="segmentation_type"):
        segmentation.validate("vxlan", 5)


def test_lowest_free_and_duplicates_per_trunk() -> None:
    one, two = TrunkSegments("t1"), TrunkSegments("t2")
    assert one.lowest_free() == 1
    one.add(1, "p1")
    one.add(2, "p2")
    assert one.lowest_free() == 3
    assert one.lowest_free(reserved=[3]) == 4
    with pytest.raises(errors.DuplicateSubPort, match="already in use on trunk t1"):
        one.check_requested(2)
    with pytest.raises(errors.DuplicateSubPort):
        one.check_requested(7, reserved=[7])
    # Another trunk is another 802.1Q domain.
    two.check_requested(2)
    assert two.lowest_free() == 1
    one.discard(1)
    assert one.lowest_free() == 1


def test_a_full_trunk_is_a_conflict() -> None:
    full = TrunkSegments("t")
    for vid in range(1, 4095):
        full.add(vid, f"p{vid}")
    with pytest.raises(errors.Conflict, match="No free segmentation_id"):
        full.lowest_free()
