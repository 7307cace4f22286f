"""The book: Neutron's rules between networks, subnets, ports and trunks, durable in SQLite.

No HTTP: requests go in as `attributes.parse_create` leaves them.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mesilla.network import errors
from mesilla.network.attributes import parse_create
from mesilla.network.database import Database, Row
from mesilla.network.store import POOLED_PORT_NAME, SUBPORT_OWNER, Book, Doc


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[Book]:
    opened = await Book.open(Database.in_work_dir(str(tmp_path)))
    yield opened
    await opened.close()


async def network(book: Book, **attrs: Any) -> Doc:
    return (await book.create_networks([parse_create("network", attrs)]))[0]


async def subnet(book: Book, net: Doc, cidr: str = "10.0.0.0/24", **attrs: Any) -> Doc:
    version = 6 if ":" in cidr else 4
    spec = parse_create("subnet", {"network_id": net["id"], "cidr": cidr, "ip_version": version, **attrs})
    return (await book.create_subnets([spec]))[0]


async def port(book: Book, net: Doc, **attrs: Any) -> Doc:
    return (await book.create_ports([parse_create("port", {"network_id": net["id"], **attrs})]))[0]


async def trunk(book: Book, parent: Doc, **attrs: Any) -> Doc:
    return await book.create_trunk(parse_create("trunk", {"port_id": parent["id"], **attrs}))


def ips(doc: Doc) -> list[str]:
    return [f["ip_address"] for f in doc["fixed_ips"]]


async def test_ports_get_addresses_from_one_subnet_per_version(book: Book) -> None:
    net = await network(book, name="n")
    v4 = await subnet(book, net, "10.0.0.0/28", allocation_pools=[{"start": "10.0.0.2", "end": "10.0.0.6"}])
    v6 = await subnet(book, net, "fd00::/64")
    assert v4["gateway_ip"] == "10.0.0.1"
    first = await port(book, net)
    assert ips(first) == ["10.0.0.2", "fd00::2"]
    assert first["mac_address"].startswith("fa:16:3e:")
    only_v6 = await port(book, net, fixed_ips=[{"subnet_id": v6["id"]}])
    assert ips(only_v6) == ["fd00::3"]
    # Outside the pools but in the subnet is allowed, as in Neutron.
    fixed = await port(book, net, fixed_ips=[{"ip_address": "10.0.0.9"}])
    assert fixed["fixed_ips"] == [{"subnet_id": v4["id"], "ip_address": "10.0.0.9"}]
    assert book.network_view(net)["subnets"] == [v4["id"], v6["id"]]


async def test_requested_address_conflicts_and_frees(book: Book) -> None:
    net = await network(book)
    sub = await subnet(book, net)
    taken = await port(book, net, fixed_ips=[{"subnet_id": sub["id"], "ip_address": "10.0.0.50"}])
    with pytest.raises(errors.IpAddressAlreadyAllocated):
        await port(book, net, fixed_ips=[{"ip_address": "10.0.0.50"}])
    with pytest.raises(errors.IpAddressAlreadyAllocated):
        await port(book, net, fixed_ips=[{"ip_address": "10.0.0.1"}])  # the gateway
    with pytest.raises(errors.InvalidIpForNetwork):
        await port(book, net, fixed_ips=[{"ip_address": "192.168.9.9"}])
    other = await network(book)
    other_sub = await subnet(book, other)  # the same CIDR on another network is fine
    with pytest.raises(errors.InvalidInput, match="invalid subnet"):
        await port(book, net, fixed_ips=[{"subnet_id": other_sub["id"]}])
    await book.delete_port(taken["id"])
    assert ips(await port(book, net, fixed_ips=[{"ip_address": "10.0.0.50"}])) == ["10.0.0.50"]


async def test_bulk_is_all_or_none_and_never_hands_out_an_address_twice(book: Book) -> None:
    net = await network(book)
    await subnet(book, net, "10.0.0.0/29")  # 5 addresses
    specs = [parse_create("port", {"network_id": net["id"]}) for _ in range(3)]
    made = await book.create_ports(specs)
    assert [ips(p) for p in made] == [["10.0.0.2"], ["10.0.0.3"], ["10.0.0.4"]]
    specs = [parse_create("port", {"network_id": net["id"]}) for _ in range(3)]
    with pytest.raises(errors.IpAddressGenerationFailure):
        await book.create_ports(specs)
    assert len(book.ports) == 3
    # Concurrent creates plan one after the other.
    both = await asyncio.gather(port(book, net), port(book, net))
    assert sorted(ips(p)[0] for p in both) == ["10.0.0.5", "10.0.0.6"]


async def test_macs_are_unique_per_network(book: Book) -> None:
    net, other = await network(book), await network(book)
    await port(book, net, mac_address="FA:16:3E:00:00:01")
    with pytest.raises(errors.MacAddressInUse):
        await port(book, net, mac_address="fa:16:3e:00:00:01")
    assert (await port(book, other, mac_address="fa:16:3e:00:00:01"))["mac_address"] == "fa:16:3e:00:00:01"
    with pytest.raises(errors.HTTPBadRequest, match="not a valid MAC"):
        await port(book, net, mac_address="fa:16:3e:00:01")


async def test_subnet_rules(book: Book) -> None:
    net = await network(book)
    sub = await subnet(book, net, "10.0.0.0/24", gateway_ip=None,
                       allocation_pools=[{"start": "10.0.0.10", "end": "10.0.0.20"}])
    assert sub["gateway_ip"] is None
    with pytest.raises(errors.InvalidInput, match="overlaps"):
        await subnet(book, net, "10.0.0.128/25")
    with pytest.raises(errors.GatewayConflictWithAllocationPools):
        await subnet(book, net, "10.1.0.0/24", gateway_ip="10.1.0.5",
                     allocation_pools=[{"start": "10.1.0.2", "end": "10.1.0.9"}])
    with pytest.raises(errors.NetworkNotFound):
        await subnet(book, {"id": "00000000-0000-0000-0000-000000000000"})
    used = await port(book, net)
    assert ips(used) == ["10.0.0.10"]
    with pytest.raises(errors.SubnetInUse):
        await book.delete_subnet(sub["id"])
    with pytest.raises(errors.NetworkInUse):
        await book.delete_network(net["id"])
    await book.delete_port(used["id"])
    await book.delete_network(net["id"])  # takes its subnets along
    assert book.subnets == {} and book.networks == {}


async def test_trunks_vlan_ids_per_trunk(book: Book) -> None:
    net = await network(book)
    await subnet(book, net)
    parent1 = await port(book, net, **{"binding:host_id": "h1"})
    parent2 = await port(book, net)
    t1, t2 = await trunk(book, parent1), await trunk(book, parent2)
    a, b, c, d = [await port(book, net, device_owner=SUBPORT_OWNER) for _ in range(4)]
    got = await book.add_subports(t1["id"], [
        {"port_id": a["id"], "segmentation_type": "vlan", "segmentation_id": 5},
        {"port_id": b["id"]},  # the lowest free
    ])
    assert [(s["port_id"], s["segmentation_id"]) for s in got["sub_ports"]] == [(a["id"], 5), (b["id"], 1)]
    # The same ID on another trunk is fine; on the same one a conflict, and nothing is added.
    await book.add_subports(
        t2["id"], [{"port_id": c["id"], "segmentation_type": "vlan", "segmentation_id": 5}]
    )
    with pytest.raises(errors.DuplicateSubPort):
        await book.add_subports(t1["id"], [
            {"port_id": d["id"], "segmentation_type": "vlan", "segmentation_id": 5}])
    with pytest.raises(errors.PortInUseAsSubPort):
        await book.add_subports(t1["id"], [{"port_id": c["id"]}])
    with pytest.raises(errors.PortInUseAsTrunkParent):
        await book.add_subports(t1["id"], [{"port_id": parent2["id"]}])
    with pytest.raises(errors.TrunkPortInUse):
        await trunk(book, parent1)
    with pytest.raises(errors.ParentPortInUse):
        await trunk(book, a)
    assert len(book.trunks[t1["id"]]["sub_ports"]) == 2
    # Attached: owned by the trunk, bound where its parent is, shown in the parent's details.
    attached = book.port_view(book.ports[a["id"]])
    assert (attached["device_owner"], attached["device_id"], attached["binding:host_id"]) == (
        SUBPORT_OWNER, t1["id"], "h1")
    assert attached["status"] == "ACTIVE"
    details = book.port_view(book.ports[parent1["id"]])["trunk_details"]
    assert details["trunk_id"] == t1["id"]
    assert details["sub_ports"][0] == {"port_id": a["id"], "segmentation_type": "vlan",
                                       "segmentation_id": 5, "mac_address": a["mac_address"]}
    # The parent moves: its subports follow.
    await book.update("port", parent1["id"], {"binding:host_id": "h9"})
    assert book.ports[b["id"]]["binding:host_id"] == "h9"
    with pytest.raises(errors.PortInUseAsSubPort):
        await book.delete_port(a["id"])
    with pytest.raises(errors.PortInUseAsTrunkParent):
        await book.delete_port(parent1["id"])
    with pytest.raises(errors.SubPortNotFound):
        await book.remove_subports(t1["id"], [{"port_id": c["id"]}])
    await book.remove_subports(t1["id"], [{"port_id": a["id"]}])
    assert (book.ports[a["id"]]["device_id"], book.ports[a["id"]]["device_owner"]) == ("", SUBPORT_OWNER)
    # VLAN 5 is free again on t1.
    await book.add_subports(
        t1["id"], [{"port_id": d["id"], "segmentation_id": 5, "segmentation_type": "vlan"}]
    )
    await book.delete_trunk(t1["id"])
    assert book.ports[b["id"]]["device_id"] == "" and book.trunk_of_subport(b["id"]) is None
    await book.delete_port(parent1["id"])


async def test_deleting_a_network_deletes_its_pooled_subports(tmp_path: Path) -> None:
    book = await Book.open(Database.in_work_dir(str(tmp_path)))
    hosts, pods = await network(book), await network(book)
    await subnet(book, hosts)
    sub = await subnet(book, pods, "10.1.0.0/24")
    t = await trunk(book, await port(book, hosts))
    pooled = [await port(book, pods, device_owner=SUBPORT_OWNER, name=POOLED_PORT_NAME) for _ in range(2)]
    spare = await port(book, pods, device_owner=SUBPORT_OWNER, name=POOLED_PORT_NAME)  # on no trunk
    kept = await port(book, hosts, device_owner=SUBPORT_OWNER)
    await book.add_subports(t["id"], [{"port_id": p["id"]} for p in [*pooled, kept]])
    # A port a pod uses (the agent renamed it) holds the network, as in Neutron.
    used = await port(book, pods, device_owner=SUBPORT_OWNER, name="mesilla-nested:c1/eth0")
    with pytest.raises(errors.NetworkInUse):
        await book.delete_network(pods["id"])
    assert len(book.trunks[t["id"]]["sub_ports"]) == 3
    await book.delete_port(used["id"])
    await book.delete_network(pods["id"])
    assert set(book.ports) == {t["port_id"], kept["id"]} and pods["id"] not in book.networks
    assert [s["port_id"] for s in book.trunks[t["id"]]["sub_ports"]] == [kept["id"]]
    assert all(book.trunk_of_subport(p["id"]) is None for p in [*pooled, spare])
    assert sub["id"] not in book.subnets
    # Durably: a reopened book agrees, and the pooled ports' VLAN IDs are free on the trunk.
    await book.close()
    book = await Book.open(Database.in_work_dir(str(tmp_path)))
    try:
        assert set(book.ports) == {t["port_id"], kept["id"]}
        other = await port(book, hosts, device_owner=SUBPORT_OWNER)
        got = await book.add_subports(t["id"], [{"port_id": other["id"]}])
        assert sorted(s["segmentation_id"] for s in got["sub_ports"]) == [1, 3]
    finally:
        await book.close()


async def test_a_restarted_book_has_everything_back(tmp_path: Path) -> None:
    book = await Book.open(Database.in_work_dir(str(tmp_path)))
    net = await network(book, name="n")
    sub = await subnet(book, net, "10.0.0.0/24")
    parent = await port(book, net)
    t = await trunk(book, parent, sub_ports=[])
    sp = await port(book, net, device_owner=SUBPORT_OWNER)
    await book.add_subports(
        t["id"], [{"port_id": sp["id"], "segmentation_type": "vlan", "segmentation_id": 7}]
    )
    token = await book.mint_trunk_token(t["id"])
    before = {name: dict(table) for name, table in book.tables.items()}
    await book.close()

    again = await Book.open(Database.in_work_dir(str(tmp_path)))
    try:
        assert again.tables == before
        assert list(again.ports) == [parent["id"], sp["id"]]  # in creation order
        assert again.trunk_of_token(token) == t["id"]
        assert again.trunk_of_subport(sp["id"]) == t["id"]
        # The allocations are back: taken addresses and VLAN IDs are refused, the next are new.
        with pytest.raises(errors.IpAddressAlreadyAllocated):
            await port(again, net, fixed_ips=[{"subnet_id": sub["id"], "ip_address": ips(sp)[0]}])
        assert ips(await port(again, net)) == ["10.0.0.4"]
        other = await port(again, net, device_owner=SUBPORT_OWNER)
        with pytest.raises(errors.DuplicateSubPort):
            await again.add_subports(t["id"], [{"port_id": other["id"], "segmentation_type": "vlan",
                                                "segmentation_id": 7}])
        with pytest.raises(errors.NetworkInUse):
            await again.delete_network(net["id"])
        # Deleting the trunk revokes its tokens, durably.
        await again.delete_trunk(t["id"])
        assert again.trunk_of_token(token) is None
    finally:
        await again.close()
    third = await Book.open(Database.in_work_dir(str(tmp_path)))
    assert third.trunk_of_token(token) is None and third.trunks == {}
    await third.close()


class FailingDatabase(Database):
    """A disk that fails the next write (a full disk, an I/O error)."""

    fail = False

    async def write(self, rows: list[Row]) -> None:
        if self.fail:
            self.fail = False
            raise sqlite3.OperationalError("disk I/O error")
        await super().write(rows)


async def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    db = FailingDatabase.in_work_dir(str(tmp_path))
    book = await Book.open(db)
    try:
        net = await network(book)
        await subnet(book, net)
        assert isinstance(db, FailingDatabase)
        db.fail = True
        with pytest.raises(errors.BookUnavailable, match="nothing was changed"):
            await port(book, net, fixed_ips=[{"ip_address": "10.0.0.9"}])
        assert book.ports == {}
        assert ips(await port(book, net, fixed_ips=[{"ip_address": "10.0.0.9"}])) == ["10.0.0.9"]
    finally:
        await book.close()
