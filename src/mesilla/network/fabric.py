"""The cloud side of the trunks for the embedded service: the book as OpenFlow on a fabric bridge.

What Neutron's OVS agent does for trunks, from the book alone, so that a
cluster without OpenStack still gets segmented networks. Each host's trunk
NIC is cabled to an interface of the fabric bridge, named by the trunk's
parent port as ``binding:profile: {"fabric_port": "<interface>"}``. The
bridge (``fail_mode=secure``: nothing passes without a flow) gets:

* table 0, admission: a frame from trunk T tagged with subport S's VLAN ID
  passes only from S's MAC and, where S has port security (the default),
  with one of S's addresses as its IP or ARP source (a spoofed MAC or IP is
  dropped: the table's default). Its tag is rewritten to its network's
  internal tag, and register 0 remembers which subport sent it.
* table 1, forwarding within the internal tag (so networks never meet, even
  with the same CIDR, and the same VLAN ID on two trunks means two
  networks): to a subport's MAC, re-tagged with that subport's VLAN ID on
  its own trunk (the one it came from too: a hairpin between two pods of
  one host); broadcast and multicast to every other subport of the network.

`Fabric` re-computes the whole table on every change of the book and
replaces the bridge's flows with it (`ovs-ofctl replace-flows` changes only
what differs), one change at a time, in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections import defaultdict
from dataclasses import dataclass

from mesilla.common.flags import Flag, Flags
from mesilla.network.ovs import OvsError, OvsInstance
from mesilla.network.store import Book

log = logging.getLogger(__name__)

FABRIC_PORT = "fabric_port"
MULTICAST = "01:00:00:00:00:00/01:00:00:00:00:00"
RETRY = 0.2  # an interface the switch has not opened yet

FABRIC_FLAGS: list[Flag] = [
    Flag("fabric_bridge",
         "Drive this Open vSwitch bridge as the cloud side of the trunks (VLAN ID to network, "
         "isolation, anti-spoofing), from the network service's book; off when unset."),
    Flag("fabric_ovs_dir",
         "Where the fabric's own Open vSwitch keeps its database and sockets "
         "(default: <work_dir>/fabric-ovs)."),
]  # fmt: skip


@dataclass(frozen=True)
class Subport:
    number: int  # register 0: which subport sent a frame
    ofport: int
    vlan: int
    mac: str
    network_id: str
    ips: tuple[str, ...]
    port_security: bool


class NetworkTags:
    """Internal tags of networks, kept while a network exists (lowest free first)."""

    def __init__(self) -> None:
        self.tags: dict[str, int] = {}

    def update(self, network_ids: set[str]) -> None:
        for gone in set(self.tags) - network_ids:
            del self.tags[gone]
        for net in sorted(network_ids - set(self.tags)):
            taken = set(self.tags.values())
            self.tags[net] = next(t for t in range(1, 4095) if t not in taken)


def fabric_ports(book: Book) -> dict[str, str]:
    """Trunk id -> the fabric interface its parent port names."""
    found = {}
    for trunk in book.trunks.values():
        profile = book.ports[trunk["port_id"]].get("binding:profile") or {}
        if isinstance(profile.get(FABRIC_PORT), str):
            found[trunk["id"]] = profile[FABRIC_PORT]
    return found


def subports(book: Book, ofports: dict[str, int]) -> list[Subport]:
    """The subports of trunks whose fabric interface has an OpenFlow port (`ofports`: by trunk)."""
    found: list[Subport] = []
    for trunk_id, ofport in sorted(ofports.items()):
        trunk = book.trunks[trunk_id]
        if not trunk["admin_state_up"]:
            continue
        for sub in trunk["sub_ports"]:
            port = book.ports[sub["port_id"]]
            found.append(Subport(
                number=len(found) + 1, ofport=ofport, vlan=sub["segmentation_id"],
                mac=port["mac_address"], network_id=port["network_id"],
                ips=tuple(f["ip_address"] for f in port["fixed_ips"]),
                port_security=bool(port.get("port_security_enabled", True)),
            ))  # fmt: skip
    return found


def flows(subs: list[Subport], tags: dict[str, int]) -> list[str]:
    """The fabric bridge's whole flow table for these subports."""
    out = ["table=0,priority=0,actions=drop", "table=1,priority=0,actions=drop"]
    by_network: dict[str, list[Subport]] = defaultdict(list)
    for sub in subs:
        by_network[sub.network_id].append(sub)
    for sub in subs:
        admit = f"actions=mod_vlan_vid:{tags[sub.network_id]},load:{sub.number}->NXM_NX_REG0[],resubmit(,1)"
        match = f"table=0,priority=100,in_port={sub.ofport},dl_vlan={sub.vlan},dl_src={sub.mac}"
        if not sub.port_security:
            out.append(f"{match},{admit}")
            continue
        for ip in sub.ips:
            if ipaddress.ip_address(ip).version == 4:
                out.append(f"{match},ip,nw_src={ip},{admit}")
                out.append(f"{match},arp,arp_spa={ip},arp_sha={sub.mac},{admit}")
            else:
                out.append(f"{match},ipv6,ipv6_src={ip},{admit}")
        # Neighbour discovery starts from the link-local address.
        out.append(f"{match},ipv6,ipv6_src=fe80::/10,{admit}")
    for network_id, members in sorted(by_network.items()):
        tag = tags[network_id]
        for dest in members:
            out.append(f"table=1,priority=100,dl_vlan={tag},dl_dst={dest.mac},actions={_deliver(dest)}")
        for source in members:
            others = [_deliver(d) for d in members if d is not source]
            actions = ",".join(others) if others else "drop"
            out.append(f"table=1,priority=200,reg0={source.number},dl_vlan={tag},dl_dst={MULTICAST},"
                       f"actions={actions}")  # fmt: skip
    return out


def _deliver(sub: Subport) -> str:
    # Clearing in_port lets a frame go back out of the trunk it came in on (a hairpin).
    return f"mod_vlan_vid:{sub.vlan},load:0->NXM_OF_IN_PORT[],output:{sub.ofport}"


class Fabric:
    """Keeps a fabric bridge's flows equal to what the book says, from start to close."""

    def __init__(self, book: Book, ovs: OvsInstance, bridge: str) -> None:
        self.book = book
        self.ovs = ovs
        self.bridge = bridge
        self.tags = NetworkTags()
        self._changes = 0  # changes of the book seen
        self._applied = -1  # the last change the bridge's flows reflect
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await asyncio.to_thread(self._setup)
        self.book.listeners.append(self._book_changed)
        self._task = asyncio.create_task(self._run(), name="fabric")

    def _setup(self) -> None:
        self.ovs.start()
        self.ovs.add_bridge(self.bridge, "fail_mode=secure")

    def _book_changed(self) -> None:
        self._changes += 1
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.book.listeners.remove(self._book_changed)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def settled(self) -> None:
        """Waits until the flows reflect the book as it is now."""
        target = self._changes
        async with self._changed:
            await self._changed.wait_for(lambda: self._applied >= target)

    async def _run(self) -> None:
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: self._applied < self._changes)
            seen = self._changes
            wanted = fabric_ports(self.book)
            self.tags.update(set(self.book.networks))
            try:
                ofports = await asyncio.to_thread(self._ports, wanted)
                table = flows(subports(self.book, ofports), self.tags.tags)
                await asyncio.to_thread(self.ovs.replace_flows, self.bridge, table)
            except OvsError as exc:
                log.error("Fabric bridge %s: %s", self.bridge, exc)
                ofports = {}
            if len(ofports) < len(wanted):
                await asyncio.sleep(RETRY)  # an interface not opened yet: again, soon
                continue
            async with self._changed:
                self._applied = seen
                self._changed.notify_all()

    def _ports(self, wanted: dict[str, str]) -> dict[str, int]:
        """Puts the trunks' interfaces (only those) on the bridge; their OpenFlow ports by trunk."""
        present = set(self.ovs.ports(self.bridge))
        for interface in present - set(wanted.values()):
            self.ovs.delete_port(self.bridge, interface)
        ofports = {}
        for trunk_id, interface in wanted.items():
            if interface not in present:
                self.ovs.add_port(self.bridge, interface)
            number = self.ovs.ofport(interface)
            if number is not None:
                ofports[trunk_id] = number
        return ofports


async def start_fabric(flags: Flags, book: Book) -> Fabric | None:
    """The fabric `--fabric_bridge` asks for, started, or None."""
    if not flags.get("fabric_bridge"):
        return None
    directory = flags.get("fabric_ovs_dir") or f"{flags.work_dir}/fabric-ovs"
    fabric = Fabric(book, OvsInstance(directory), flags.fabric_bridge)
    await fabric.start()
    log.info("Fabric bridge %s follows the network book", flags.fabric_bridge)
    return fabric
