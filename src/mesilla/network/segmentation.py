"""Segmentation IDs of one trunk: which VLAN ID carries which subport.

IDs are per trunk, as in Neutron: the same VLAN ID is free on every other
trunk (each host's trunk NIC is its own 802.1Q domain). Only ``vlan`` is
supported; an ID is 1-4094 (0 and 4095 are reserved by 802.1Q). Like IPAM,
this is rebuilt from the trunks' ``sub_ports`` on recovery and used only
between two awaits.
"""

from __future__ import annotations

from collections.abc import Iterable

from mesilla.network import errors

VLAN = "vlan"
MIN_VLAN = 1
MAX_VLAN = 4094


def validate(segmentation_type: object, segmentation_id: object) -> tuple[str, int | None]:
    """(type, id or None for "the lowest free"), or a 400 naming what is wrong."""
    if segmentation_type != VLAN:
        raise errors.HTTPBadRequest(
            f"Invalid input for segmentation_type. Reason: '{segmentation_type}' is not "
            f"in ['{VLAN}']."
        )
    if segmentation_id is None:
        return VLAN, None
    if isinstance(segmentation_id, str) and segmentation_id.isdigit():
        segmentation_id = int(segmentation_id)
    if isinstance(segmentation_id, bool) or not isinstance(segmentation_id, int):
        raise errors.HTTPBadRequest(
            f"Invalid input for segmentation_id. Reason: '{segmentation_id}' is not an integer."
        )
    if not MIN_VLAN <= segmentation_id <= MAX_VLAN:
        raise errors.HTTPBadRequest(
            f"Invalid input for segmentation_id. Reason: '{segmentation_id}' is not in "
            f"range {MIN_VLAN} through {MAX_VLAN}."
        )
    return VLAN, segmentation_id


class TrunkSegments:
    """The VLAN IDs in use on one trunk, each with the subport it carries."""

    def __init__(self, trunk_id: str) -> None:
        self.trunk_id = trunk_id
        self.used: dict[int, str] = {}

    def check_requested(self, segmentation_id: int, reserved: Iterable[int] = ()) -> None:
        if segmentation_id in self.used or segmentation_id in set(reserved):
            raise errors.DuplicateSubPort(VLAN, segmentation_id, self.trunk_id)

    def lowest_free(self, reserved: Iterable[int] = ()) -> int:
        taken = self.used.keys() | set(reserved)
        for vid in range(MIN_VLAN, MAX_VLAN + 1):
            if vid not in taken:
                return vid
        raise errors.Conflict(
            f"No free segmentation_id left on trunk {self.trunk_id}: all of "
            f"{MIN_VLAN}-{MAX_VLAN} are in use."
        )

    def add(self, segmentation_id: int, port_id: str) -> None:
        self.used[segmentation_id] = port_id

    def discard(self, segmentation_id: int) -> None:
        self.used.pop(segmentation_id, None)
