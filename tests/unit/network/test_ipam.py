"""A subnet's addresses: default layout, lowest free first, never the gateway, refusals."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

import pytest

from mesilla.network import errors, ipam
from mesilla.network.ipam import Pool, SubnetAddresses


def addresses(cidr: str, gateway: str | None = "first") -> SubnetAddresses:
    net = ip_network(cidr)
    gw = ipam.default_gateway(net) if gateway == "first" else (ip_address(gateway) if gateway else None)
    return SubnetAddresses("s1", net, ipam.default_pools(net, gw), gw)


def test_ipv4_default_layout_leaves_out_network_gateway_and_broadcast() -> None:
    net = ip_network("10.0.0.0/24")
    gateway = ipam.default_gateway(net)
    assert str(gateway) == "10.0.0.1"
    assert [str(p) for p in ipam.default_pools(net, gateway)] == ["10.0.0.2-10.0.0.254"]
    # A gateway inside the range splits it.
    assert [str(p) for p in ipam.default_pools(net, ip_address("10.0.0.100"))] == [
        "10.0.0.1-10.0.0.99", "10.0.0.101-10.0.0.254",
    ]
    assert [str(p) for p in ipam.default_pools(net, None)] == ["10.0.0.1-10.0.0.254"]


def test_ipv6_default_layout_has_no_broadcast() -> None:
    net = ip_network("fd00::/120")
    assert [str(p) for p in ipam.default_pools(net, ipam.default_gateway(net))] == ["fd00::2-fd00::ff"]


def test_lowest_free_first_never_the_gateway_nor_reserved() -> None:
    subnet = addresses("10.0.0.0/29", gateway="10.0.0.3")
    # Pools 10.0.0.1-2 and 10.0.0.4-6.
    got = []
    for _ in range(5):
        ip = subnet.next_free()
        assert ip is not None
        subnet.add(ip)
        got.append(str(ip))
    assert got == ["10.0.0.1", "10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
    assert subnet.next_free() is None
    subnet.discard(ip_address("10.0.0.4"))
    assert str(subnet.next_free()) == "10.0.0.4"
    assert subnet.next_free([ip_address("10.0.0.4")]) is None


def test_requested_addresses() -> None:
    subnet = addresses("10.0.0.0/24")
    subnet.check_requested(ip_address("10.0.0.77"))
    subnet.add(ip_address("10.0.0.77"))
    with pytest.raises(errors.IpAddressAlreadyAllocated):
        subnet.check_requested(ip_address("10.0.0.77"))
    with pytest.raises(errors.IpAddressAlreadyAllocated):
        subnet.check_requested(ip_address("10.0.0.1"))  # the gateway
    with pytest.raises(errors.IpAddressAlreadyAllocated):
        subnet.check_requested(ip_address("10.0.0.9"), reserved=[ip_address("10.0.0.9")])
    for outside in ("10.0.1.5", "10.0.0.0", "10.0.0.255", "fd00::5"):
        with pytest.raises(errors.InvalidIpForSubnet):
            subnet.check_requested(ip_address(outside))


def test_cidr_checks() -> None:
    assert str(ipam.parse_cidr("10.1.0.0/16", 4)) == "10.1.0.0/16"
    with pytest.raises(errors.InvalidInput, match="recommended CIDR"):
        ipam.parse_cidr("10.1.0.5/16", 4)
    with pytest.raises(errors.InvalidInput, match="do not match"):
        ipam.parse_cidr("fd00::/64", 4)
    with pytest.raises(errors.HTTPBadRequest, match="not a valid IP subnet"):
        ipam.parse_cidr("10.1.0.0/33", 4)
    with pytest.raises(errors.InvalidInput, match="too small"):
        ipam.parse_cidr("10.1.0.0/31", 4)


def test_pool_checks() -> None:
    net = ip_network("10.0.0.0/24")
    gateway = ip_address("10.0.0.1")

    def pool(a: str, b: str) -> Pool:
        return Pool(ip_address(a), ip_address(b))

    ipam.validate_pools(net, [pool("10.0.0.10", "10.0.0.20"), pool("10.0.0.30", "10.0.0.40")], gateway)
    with pytest.raises(errors.InvalidAllocationPool):
        ipam.validate_pools(net, [pool("10.0.0.20", "10.0.0.10")], gateway)
    with pytest.raises(errors.OutOfBoundsAllocationPool):
        ipam.validate_pools(net, [pool("10.0.0.10", "10.0.1.10")], gateway)
    with pytest.raises(errors.OutOfBoundsAllocationPool):
        ipam.validate_pools(net, [pool("10.0.0.200", "10.0.0.255")], gateway)  # broadcast
    with pytest.raises(errors.OverlappingAllocationPools):
        ipam.validate_pools(net, [pool("10.0.0.10", "10.0.0.20"), pool("10.0.0.15", "10.0.0.25")], gateway)
    with pytest.raises(errors.GatewayConflictWithAllocationPools):
        ipam.validate_pools(net, [pool("10.0.0.1", "10.0.0.20")], gateway)
