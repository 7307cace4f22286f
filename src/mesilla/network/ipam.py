"""IP address management of one subnet: its CIDR, gateway, allocation pools and what is taken.

Pure bookkeeping, no I/O: the book (`mesilla.network.store`) keeps one
`SubnetAddresses` per subnet, rebuilt from the ports' ``fixed_ips`` on recovery
(the ports are the only record of what is allocated, so the two cannot
disagree), and calls it only between two awaits, so concurrent requests never
get the same address. Addresses are handed out lowest first from the pools;
the gateway and (IPv4) the network and broadcast addresses never are.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mesilla.network import errors

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Pool:
    """An allocation pool, both ends included (Neutron's ``{"start", "end"}``)."""

    start: IPAddress
    end: IPAddress

    def __contains__(self, ip: IPAddress) -> bool:
        return ip.version == self.start.version and int(self.start) <= int(ip) <= int(self.end)

    def overlaps(self, other: Pool) -> bool:
        return int(self.start) <= int(other.end) and int(other.start) <= int(self.end)

    def __str__(self) -> str:
        return f"{self.start}-{self.end}"

    def json(self) -> dict[str, str]:
        return {"start": str(self.start), "end": str(self.end)}


def parse_address(text: object, what: str = "ip_address") -> IPAddress:
    if not isinstance(text, str):
        raise errors.HTTPBadRequest(
            f"Invalid input for {what}. Reason: '{text}' is not a valid IP address."
        )
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise errors.HTTPBadRequest(
            f"Invalid input for {what}. Reason: '{text}' is not a valid IP address."
        ) from None


def parse_cidr(text: object, ip_version: int) -> IPNetwork:
    """A subnet's CIDR: of `ip_version`, without host bits, with room for a host."""
    if not isinstance(text, str):
        raise errors.HTTPBadRequest(
            f"Invalid input for cidr. Reason: '{text}' is not a valid IP subnet."
        )
    try:
        loose = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise errors.HTTPBadRequest(
            f"Invalid input for cidr. Reason: '{text}' is not a valid IP subnet."
        ) from None
    if loose.network_address != ipaddress.ip_address(text.partition("/")[0]):
        raise errors.InvalidInput(
            f"'{text}' isn't a recommended CIDR, it should be '{loose}'."
        )
    if loose.version != ip_version:
        raise errors.InvalidInput(
            "Cidr and IP version do not match: "
            f"'{text}' is an IPv{loose.version} subnet, ip_version is {ip_version}."
        )
    # IPv4 /31 and /32 (and IPv6 /128) have no address left for a port.
    if loose.num_addresses < (4 if loose.version == 4 else 2):
        raise errors.InvalidInput(f"Subnet {text} is too small: no address for a port.")
    return loose


def host_range(cidr: IPNetwork) -> Pool:
    """The addresses a port may have: all but the network and (IPv4) broadcast address."""
    last = cidr.broadcast_address - 1 if cidr.version == 4 else cidr.broadcast_address
    return Pool(cidr.network_address + 1, last)


def default_gateway(cidr: IPNetwork) -> IPAddress:
    return cidr.network_address + 1


def default_pools(cidr: IPNetwork, gateway: IPAddress | None) -> list[Pool]:
    """The whole subnet less the gateway, as Neutron lays it out."""
    hosts = host_range(cidr)
    first, last = hosts.start, hosts.end
    if gateway is None or gateway not in hosts:
        return [hosts]
    pools = []
    if int(gateway) > int(first):
        pools.append(Pool(first, gateway - 1))
    if int(gateway) < int(last):
        pools.append(Pool(gateway + 1, last))
    return pools


def validate_pools(cidr: IPNetwork, pools: Sequence[Pool], gateway: IPAddress | None) -> None:
    hosts = host_range(cidr)
    for pool in pools:
        versions = {pool.start.version, pool.end.version}
        if versions != {cidr.version} or int(pool.start) > int(pool.end):
            raise errors.InvalidAllocationPool(str(pool))
        if pool.start not in hosts or pool.end not in hosts:
            raise errors.OutOfBoundsAllocationPool(str(pool), str(cidr))
    ordered = sorted(pools, key=lambda p: int(p.start))
    for one, two in itertools.pairwise(ordered):
        if one.overlaps(two):
            raise errors.OverlappingAllocationPools(str(one), str(two), str(cidr))
    if gateway is not None:
        for pool in pools:
            if gateway in pool:
                raise errors.GatewayConflictWithAllocationPools(str(gateway), str(pool))


@dataclass
class SubnetAddresses:
    """What a subnet has handed out, and the next address it would hand out."""

    subnet_id: str
    cidr: IPNetwork
    pools: Sequence[Pool]  # in address order once made
    gateway: IPAddress | None
    allocated: set[IPAddress] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.pools = sorted(self.pools, key=lambda p: int(p.start))

    def check_requested(self, ip: IPAddress, reserved: Iterable[IPAddress] = ()) -> None:
        """A port may ask for any host address of the subnet, in a pool or not, but the
        gateway and what is taken (or `reserved` by the same request) are refused."""
        if ip not in host_range(self.cidr):
            raise errors.InvalidIpForSubnet(str(ip))
        if ip == self.gateway or ip in self.allocated or ip in set(reserved):
            raise errors.IpAddressAlreadyAllocated(str(ip), self.subnet_id)

    def next_free(self, reserved: Iterable[IPAddress] = ()) -> IPAddress | None:
        """The lowest free pool address, skipping `reserved` (held by the same request)."""
        taken = self.allocated | set(reserved)
        for pool in self.pools:
            ip = pool.start
            while ip in taken or ip == self.gateway:
                if ip == pool.end:
                    break
                ip += 1
            else:
                return ip
        return None

    def add(self, ip: IPAddress) -> None:
        self.allocated.add(ip)

    def discard(self, ip: IPAddress) -> None:
        self.allocated.discard(ip)
