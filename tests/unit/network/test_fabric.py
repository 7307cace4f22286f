"""The fabric's flow table, computed from a real book (no switch: `flows` is what it would get)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.unit.network.test_store import network, port, subnet, trunk

from mesilla.network.database import Database
from mesilla.network.fabric import NetworkTags, fabric_ports, flows, subports
from mesilla.network.store import SUBPORT_OWNER, Book


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[Book]:
    opened = await Book.open(Database.in_work_dir(str(tmp_path)))
    yield opened
    await opened.close()


async def test_vlan_ids_map_to_internal_tags_with_anti_spoofing(book: Book) -> None:
    changes: list[int] = []
    book.listeners.append(lambda: changes.append(1))
    a, b, hosts = await network(book, name="a"), await network(book, name="b"), await network(book, name="h")
    for net in (a, b):
        await subnet(book, net, "10.30.0.0/24")
    await subnet(book, hosts, "10.252.0.0/24")
    trunks = []
    for i in range(2):
        parent = await port(
            book, hosts, **{"binding:host_id": f"h{i}", "binding:profile": {"fabric_port": f"t-h{i}"}}
        )
        trunks.append(await trunk(book, parent))
    unwired = await trunk(book, await port(book, hosts))
    pa0 = await port(book, a, device_owner=SUBPORT_OWNER)
    pb1 = await port(book, b, device_owner=SUBPORT_OWNER)
    pa1 = await port(book, a, device_owner=SUBPORT_OWNER, port_security_enabled=False)
    await book.add_subports(trunks[0]["id"], [{"port_id": pa0["id"], "segmentation_type": "vlan"}])
    await book.add_subports(trunks[1]["id"], [{"port_id": pb1["id"], "segmentation_type": "vlan"},
                                              {"port_id": pa1["id"], "segmentation_type": "vlan"}])
    assert changes, "every change tells the listeners"

    assert fabric_ports(book) == {trunks[0]["id"]: "t-h0", trunks[1]["id"]: "t-h1"}
    assert unwired["id"] not in fabric_ports(book)
    tags = NetworkTags()
    tags.update(set(book.networks))
    tag_a, tag_b = tags.tags[a["id"]], tags.tags[b["id"]]
    assert len(set(tags.tags.values())) == 3
    subs = subports(book, {trunks[0]["id"]: 1, trunks[1]["id"]: 2})
    by_port = {s.mac: s for s in subs}
    assert [by_port[p["mac_address"]].vlan for p in (pa0, pb1, pa1)] == [1, 1, 2]
    table = flows(subs, tags.tags)

    mac_a0, mac_b1, mac_a1 = pa0["mac_address"], pb1["mac_address"], pa1["mac_address"]
    n_a0, n_b1, n_a1 = (by_port[m].number for m in (mac_a0, mac_b1, mac_a1))
    admit = [f for f in table if f.startswith("table=0,priority=100")]
    # VLAN 1 is network A on trunk 0 and network B on trunk 1: each gets its own internal tag.
    assert (f"table=0,priority=100,in_port=1,dl_vlan=1,dl_src={mac_a0},ip,nw_src=10.30.0.2,"
            f"actions=mod_vlan_vid:{tag_a},load:{n_a0}->NXM_NX_REG0[],resubmit(,1)") in admit
    assert (
        f"table=0,priority=100,in_port=2,dl_vlan=1,dl_src={mac_b1},arp,arp_spa=10.30.0.2,arp_sha={mac_b1},"
        f"actions=mod_vlan_vid:{tag_b},load:{n_b1}->NXM_NX_REG0[],resubmit(,1)"
    ) in admit
    # Port security off: the MAC on its VLAN is all that is checked.
    assert (f"table=0,priority=100,in_port=2,dl_vlan=2,dl_src={mac_a1},"
            f"actions=mod_vlan_vid:{tag_a},load:{n_a1}->NXM_NX_REG0[],resubmit(,1)") in admit
    assert "table=0,priority=0,actions=drop" in table and "table=1,priority=0,actions=drop" in table
    # Unicast within a tag, re-tagged for the destination's trunk; nothing crosses networks.
    deliver_a1 = "mod_vlan_vid:2,load:0->NXM_OF_IN_PORT[],output:2"
    assert f"table=1,priority=100,dl_vlan={tag_a},dl_dst={mac_a1},actions={deliver_a1}" in table
    assert not [f for f in table if f.startswith(f"table=1,priority=100,dl_vlan={tag_b},") and mac_a1 in f]
    # Broadcast from a0 goes to a1 only; b1 has nobody to flood to.
    flood = [f for f in table if "priority=200" in f]
    assert (
        f"table=1,priority=200,reg0={n_a0},dl_vlan={tag_a},dl_dst=01:00:00:00:00:00/01:00:00:00:00:00,actions={deliver_a1}"
        in flood
    )
    assert (
        f"table=1,priority=200,reg0={n_b1},dl_vlan={tag_b},dl_dst=01:00:00:00:00:00/01:00:00:00:00:00,actions=drop"
        in flood
    )
    # A trunk whose fabric port is not open yet contributes nothing.
    assert {s.ofport for s in subports(book, {trunks[0]["id"]: 1})} == {1}


def test_network_tags_are_kept_while_networks_live() -> None:
    tags = NetworkTags()
    tags.update({"n1", "n2"})
    first = dict(tags.tags)
    tags.update({"n2", "n3"})
    assert tags.tags["n2"] == first["n2"]
    assert tags.tags["n3"] == first["n1"]  # the freed tag is the lowest free
    tags.update(set())
    assert tags.tags == {}
