"""Neutron's faults: each error names its Neutron type and the status Neutron answers it with.

Handlers raise these; the service renders every one as Neutron does,
``{"NeutronError": {"type": <class name>, "message": ..., "detail": ""}}``,
so that clients (openstacksdk maps 400/403/404/409 to its own exceptions and
reads ``message``) see what they would see from Neutron.
"""

from __future__ import annotations

from typing import Any, ClassVar


class NeutronError(Exception):
    status: ClassVar[int] = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def type(self) -> str:
        return type(self).__name__

    def body(self) -> dict[str, Any]:
        return {"NeutronError": {"type": self.type, "message": self.message, "detail": ""}}


# --- 400 -----------------------------------------------------------------------------


class BadRequest(NeutronError):
    status = 400


class HTTPBadRequest(BadRequest):
    """Malformed bodies and unknown attributes, as Neutron's API layer answers them."""


class InvalidInput(BadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(f"Invalid input for operation: {message}")


class InvalidIpForNetwork(BadRequest):
    def __init__(self, ip: str) -> None:
        super().__init__(
            f"IP address {ip} is not a valid IP for any of the subnets on the specified network."
        )


class InvalidIpForSubnet(BadRequest):
    def __init__(self, ip: str) -> None:
        super().__init__(f"IP address {ip} is not a valid IP for the specified subnet.")


class InvalidAllocationPool(BadRequest):
    def __init__(self, pool: str) -> None:
        super().__init__(f"The allocation pool {pool} is not valid.")


class OutOfBoundsAllocationPool(BadRequest):
    def __init__(self, pool: str, cidr: str) -> None:
        super().__init__(
            f"The allocation pool {pool} spans beyond the subnet cidr {cidr}."
        )


class OverlappingAllocationPools(BadRequest):
    def __init__(self, pool_1: str, pool_2: str, subnet_cidr: str) -> None:
        super().__init__(
            f"Found overlapping allocation pools: {pool_1} and {pool_2} for subnet {subnet_cidr}."
        )


# --- 403 -----------------------------------------------------------------------------


class HTTPForbidden(NeutronError):
    status = 403


# --- 404 -----------------------------------------------------------------------------


class NotFound(NeutronError):
    status = 404


class HTTPNotFound(NotFound):
    """No such URL (Neutron's routing answers an unknown resource so)."""


class NetworkNotFound(NotFound):
    def __init__(self, net_id: str) -> None:
        super().__init__(f"Network {net_id} could not be found.")


class SubnetNotFound(NotFound):
    def __init__(self, subnet_id: str) -> None:
        super().__init__(f"Subnet {subnet_id} could not be found.")


class PortNotFound(NotFound):
    def __init__(self, port_id: str) -> None:
        super().__init__(f"Port {port_id} could not be found.")


class TrunkNotFound(NotFound):
    def __init__(self, trunk_id: str) -> None:
        super().__init__(f"Trunk {trunk_id} could not be found.")


class SubPortNotFound(NotFound):
    def __init__(self, trunk_id: str, port_id: str) -> None:
        super().__init__(f"SubPort on trunk {trunk_id} with parent port {port_id} could not be found.")


# --- 405 -----------------------------------------------------------------------------


class HTTPMethodNotAllowed(NeutronError):
    status = 405


# --- 409 -----------------------------------------------------------------------------


class Conflict(NeutronError):
    status = 409


class NetworkInUse(Conflict):
    def __init__(self, net_id: str) -> None:
        super().__init__(
            f"Unable to complete operation on network {net_id}. "
            "There are one or more ports still in use on the network."
        )


class SubnetInUse(Conflict):
    def __init__(self, subnet_id: str) -> None:
        super().__init__(
            f"Unable to complete operation on subnet {subnet_id}: "
            "One or more ports have an IP allocation from this subnet."
        )


class PortInUse(Conflict):
    def __init__(self, port_id: str, net_id: str, device_id: str) -> None:
        super().__init__(
            f"Unable to complete operation on port {port_id} for network {net_id}. "
            f"Port already has an attached device {device_id}."
        )


class IpAddressAlreadyAllocated(Conflict):
    def __init__(self, ip: str, subnet_id: str) -> None:
        super().__init__(f"IP address {ip} already allocated in subnet {subnet_id}")


class IpAddressGenerationFailure(Conflict):
    def __init__(self, net_id: str) -> None:
        super().__init__(f"No more IP addresses available on network {net_id}.")


class MacAddressInUse(Conflict):
    def __init__(self, net_id: str, mac: str) -> None:
        super().__init__(
            f"Unable to complete operation for network {net_id}. The mac address {mac} is in use."
        )


class GatewayConflictWithAllocationPools(Conflict):
    def __init__(self, ip: str, pool: str) -> None:
        super().__init__(f"Gateway ip {ip} conflicts with allocation pool {pool}.")


class DuplicateSubPort(Conflict):
    def __init__(self, segmentation_type: str, segmentation_id: int, trunk_id: str) -> None:
        super().__init__(
            f"segmentation_type {segmentation_type} and segmentation_id {segmentation_id} "
            f"already in use on trunk {trunk_id}."
        )


class TrunkPortInUse(Conflict):
    def __init__(self, port_id: str) -> None:
        super().__init__(f"Port {port_id} is in use by another trunk.")


class ParentPortInUse(Conflict):
    def __init__(self, port_id: str) -> None:
        super().__init__(
            f"Port {port_id} is currently in use and is not eligible for use as a parent port."
        )


class PortInUseAsTrunkParent(Conflict):
    def __init__(self, port_id: str, trunk_id: str) -> None:
        super().__init__(f"Port {port_id} is currently a parent port for trunk {trunk_id}.")


class PortInUseAsSubPort(Conflict):
    def __init__(self, port_id: str, trunk_id: str) -> None:
        super().__init__(f"Port {port_id} is currently a subport for trunk {trunk_id}.")


# --- 500 / 503 -----------------------------------------------------------------------


class BookUnavailable(NeutronError):
    """The book could not be written: nothing was changed, the request may be retried."""

    status = 503
