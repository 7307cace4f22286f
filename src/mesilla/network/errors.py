"""Neutron's faults: each error names its Neutron type and the status Neutron answers it with.

Handlers raise these; the service renders every one as Neutron does,
``{"NeutronError": {"type": <class name>, "message": ..., "detail": ""}}``,
so that clients (openstacksdk maps 400/403/404/409 to its own exceptions and
reads ``message``) see what they would see from Neutron.

A fault with a fixed text is a dataclass of the values the text names, and its
text is in `_MESSAGES` (neutron-lib's exception messages, one table); the
plain faults (`BadRequest`, `NotFound`, ...) take their message as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar, dataclass_transform

from mesilla.common.errors import assign_statuses

_T = TypeVar("_T")


@dataclass_transform(eq_default=False)
def _fault(cls: type[_T]) -> type[_T]:
    """A fault with a fixed text: a dataclass of the values its text names. Compared by
    identity, as exceptions are (a dataclass's `==` would make it unhashable)."""
    return dataclass(eq=False)(cls)


class NeutronError(Exception):
    status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __post_init__(self) -> None:
        """A dataclass fault's message: its text in `_MESSAGES`, with its fields filled in."""
        NeutronError.__init__(self, _MESSAGES[type(self)].format_map(vars(self)))

    @property
    def type(self) -> str:
        return type(self).__name__

    def body(self) -> dict[str, Any]:
        return {"NeutronError": {"type": self.type, "message": self.message, "detail": ""}}


# --- 400 -----------------------------------------------------------------------------


class BadRequest(NeutronError):
    """Invalid input; the message says which and why."""


class HTTPBadRequest(BadRequest):
    """Malformed bodies and unknown attributes, as Neutron's API layer answers them."""


@_fault
class InvalidInput(BadRequest):
    detail: str


@_fault
class InvalidIpForNetwork(BadRequest):
    ip: str


@_fault
class InvalidIpForSubnet(BadRequest):
    ip: str


@_fault
class InvalidAllocationPool(BadRequest):
    pool: str


@_fault
class OutOfBoundsAllocationPool(BadRequest):
    pool: str
    cidr: str


@_fault
class OverlappingAllocationPools(BadRequest):
    pool_1: str
    pool_2: str
    subnet_cidr: str


# --- 403 -----------------------------------------------------------------------------


class HTTPForbidden(NeutronError):
    """Credentials that do not allow the request."""


# --- 404 -----------------------------------------------------------------------------


class NotFound(NeutronError):
    """No such resource."""


class HTTPNotFound(NotFound):
    """No such URL (Neutron's routing answers an unknown resource so)."""


@_fault
class NetworkNotFound(NotFound):
    net_id: str


@_fault
class SubnetNotFound(NotFound):
    subnet_id: str


@_fault
class PortNotFound(NotFound):
    port_id: str


@_fault
class TrunkNotFound(NotFound):
    trunk_id: str


@_fault
class SubPortNotFound(NotFound):
    trunk_id: str
    port_id: str


# --- 405 -----------------------------------------------------------------------------


class HTTPMethodNotAllowed(NeutronError):
    """A method the resource does not serve."""


# --- 409 -----------------------------------------------------------------------------


class Conflict(NeutronError):
    """The request contradicts the book: a resource in use, an address taken."""


@_fault
class NetworkInUse(Conflict):
    net_id: str


@_fault
class SubnetInUse(Conflict):
    subnet_id: str


@_fault
class PortInUse(Conflict):
    port_id: str
    net_id: str
    device_id: str


@_fault
class IpAddressAlreadyAllocated(Conflict):
    ip: str
    subnet_id: str


@_fault
class IpAddressGenerationFailure(Conflict):
    net_id: str


@_fault
class MacAddressInUse(Conflict):
    net_id: str
    mac: str


@_fault
class GatewayConflictWithAllocationPools(Conflict):
    ip: str
    pool: str


@_fault
class DuplicateSubPort(Conflict):
    segmentation_type: str
    segmentation_id: int
    trunk_id: str


@_fault
class TrunkPortInUse(Conflict):
    port_id: str


@_fault
class ParentPortInUse(Conflict):
    port_id: str


@_fault
class PortInUseAsTrunkParent(Conflict):
    port_id: str
    trunk_id: str


@_fault
class PortInUseAsSubPort(Conflict):
    port_id: str
    trunk_id: str


# --- 500 / 503 -----------------------------------------------------------------------


class BookUnavailable(NeutronError):
    """The book could not be written: nothing was changed, the request may be retried."""


# The status Neutron answers each kind of fault with (a subclass answers its base's).
assign_statuses({
    BadRequest: 400,
    HTTPForbidden: 403,
    NotFound: 404,
    HTTPMethodNotAllowed: 405,
    Conflict: 409,
    BookUnavailable: 503,
})


_MESSAGES: dict[type[NeutronError], str] = {
    InvalidInput: "Invalid input for operation: {detail}",
    InvalidIpForNetwork: (
        "IP address {ip} is not a valid IP for any of the subnets on the specified network."
    ),
    InvalidIpForSubnet: "IP address {ip} is not a valid IP for the specified subnet.",
    InvalidAllocationPool: "The allocation pool {pool} is not valid.",
    OutOfBoundsAllocationPool: "The allocation pool {pool} spans beyond the subnet cidr {cidr}.",
    OverlappingAllocationPools: (
        "Found overlapping allocation pools: {pool_1} and {pool_2} for subnet {subnet_cidr}."
    ),
    NetworkNotFound: "Network {net_id} could not be found.",
    SubnetNotFound: "Subnet {subnet_id} could not be found.",
    PortNotFound: "Port {port_id} could not be found.",
    TrunkNotFound: "Trunk {trunk_id} could not be found.",
    SubPortNotFound: "SubPort on trunk {trunk_id} with parent port {port_id} could not be found.",
    NetworkInUse: (
        "Unable to complete operation on network {net_id}. "
        "There are one or more ports still in use on the network."
    ),
    SubnetInUse: (
        "Unable to complete operation on subnet {subnet_id}: "
        "One or more ports have an IP allocation from this subnet."
    ),
    PortInUse: (
        "Unable to complete operation on port {port_id} for network {net_id}. "
        "Port already has an attached device {device_id}."
    ),
    IpAddressAlreadyAllocated: "IP address {ip} already allocated in subnet {subnet_id}",
    IpAddressGenerationFailure: "No more IP addresses available on network {net_id}.",
    MacAddressInUse: (
        "Unable to complete operation for network {net_id}. The mac address {mac} is in use."
    ),
    GatewayConflictWithAllocationPools: "Gateway ip {ip} conflicts with allocation pool {pool}.",
    DuplicateSubPort: (
        "segmentation_type {segmentation_type} and segmentation_id {segmentation_id} "
        "already in use on trunk {trunk_id}."
    ),
    TrunkPortInUse: "Port {port_id} is in use by another trunk.",
    ParentPortInUse: (
        "Port {port_id} is currently in use and is not eligible for use as a parent port."
    ),
    PortInUseAsTrunkParent: "Port {port_id} is currently a parent port for trunk {trunk_id}.",
    PortInUseAsSubPort: "Port {port_id} is currently a subport for trunk {trunk_id}.",
}
