"""The book of networks, subnets, ports and trunks, and the rules Neutron keeps between them.

Every resource is a Neutron-shaped document (what the API shows, less the
fields derived from others: a network's ``subnets``, a port's ``status`` and
``trunk_details``, a trunk's ``status``). A mutation is planned against the
book as it stands, written to the database in one transaction, and only then
applied in memory, all under one lock: so an answer never shows what is not
durable, two requests never plan from the same state (no address or VLAN ID
handed out twice), and a failed write changes nothing.

Allocations are not recorded apart: a subnet's addresses are its ports'
``fixed_ips``, a trunk's segmentation IDs its ``sub_ports``. The indexes
(`SubnetAddresses`, `TrunkSegments`, which trunk a port belongs to) are
rebuilt from the documents on recovery.

Subports follow Neutron's trunk plugin: attached, a port gets
``device_owner: trunk:subport``, ``device_id: <trunk id>`` and its parent's
``binding:host_id`` (which follows the parent's); removed, it loses the
device id and host but keeps its owner, so that it can be found (and
deleted by the trunk's scoped token) as a spare subport. That is also where
port pools fit, with no table of their own: the pool of (host, network) is
the attached subports on that network bound to that host and not yet handed
to a pod (``GET /v2.0/ports?device_owner=trunk:subport&network_id=N&
binding:host_id=H&name=available-port``), filled and drained by bulk port
creates and atomic add/remove_subports. Deleting a network deletes its
pooled subports (named ``available-port``, Kuryr's name for them) with it,
as Neutron deletes a network's DHCP ports: they hold the network for no pod.

One module of over 600 lines: every mutation is planned and committed through
the one lock and transaction above, so Neutron's rules between the four
resources stay in the class that keeps that invariant.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ipaddress
import random
import secrets
import sqlite3
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar

from mesilla.network import errors, ipam, segmentation
from mesilla.network.database import Database, Row
from mesilla.network.ipam import IPAddress, SubnetAddresses
from mesilla.network.segmentation import TrunkSegments

SUBPORT_OWNER = "trunk:subport"
#: The name of a pooled subport, ready and not yet handed to a pod (Kuryr's).
POOLED_PORT_NAME = "available-port"
MAC_PREFIX = "fa:16:3e"
TOKEN_PREFIX = "mesilla-trunk-"

Doc = dict[str, Any]
T = TypeVar("T")
P = ParamSpec("P")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _new_doc(values: Doc) -> Doc:
    stamp = _now()
    return {"id": str(uuid.uuid4()), **values, "created_at": stamp, "updated_at": stamp,
            "revision_number": 1}


def _revised(doc: Doc, changes: Doc) -> Doc:
    return {**doc, **changes, "updated_at": _now(), "revision_number": doc["revision_number"] + 1}


def _found(table: dict[str, Doc], key: str, missing: Callable[[str], Exception]) -> Doc:
    """The document `key` of `table`; raises `missing(key)` (a 404) when there is none."""
    doc = table.get(key)
    if doc is None:
        raise missing(key)
    return doc


def _pooled(port: Doc) -> bool:
    return bool(port["device_owner"] == SUBPORT_OWNER and port["name"] == POOLED_PORT_NAME)


def token_digest(token: str) -> str:
    """Only digests of scoped tokens are kept: the book's file gives none away."""
    return hashlib.sha256(token.encode()).hexdigest()


def _normal_mac(text: str) -> str:
    parts = text.replace("-", ":").lower().split(":")
    hexdigits = set("0123456789abcdef")
    if len(parts) != 6 or not all(len(p) == 2 and set(p) <= hexdigits for p in parts):
        raise errors.HTTPBadRequest(
            f"Invalid input for mac_address. Reason: '{text}' is not a valid MAC address."
        )
    if int(parts[0], 16) & 1:
        raise errors.HTTPBadRequest(
            f"Invalid input for mac_address. Reason: '{text}' is a multicast MAC address."
        )
    return ":".join(parts)


class BookError(RuntimeError):
    """The book's file cannot be read; the message names it and the way out."""


class Change:
    """The rows one mutation writes; applied in memory once they are durable."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def put(self, table: str, doc: Doc) -> Doc:
        self.rows.append((table, doc["id"], doc))
        return doc

    def delete(self, table: str, key: str) -> None:
        self.rows.append((table, key, None))


def _mutation(
    plan: Callable[Concatenate[Book, Change, P], T],
) -> Callable[Concatenate[Book, P], Coroutine[Any, Any, T]]:
    """Makes a method that plans a change (into its `change`, raising a NeutronError to
    refuse) the mutation that plans and commits it, under the book's lock."""

    @functools.wraps(plan)
    async def mutation(book: Book, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await book._mutate(lambda change: plan(book, change, *args, **kwargs))

    return mutation


class Book:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.networks: dict[str, Doc] = {}
        self.subnets: dict[str, Doc] = {}
        self.ports: dict[str, Doc] = {}
        self.trunks: dict[str, Doc] = {}
        # By table name, as the database names them (the same dicts as above).
        self.tables: dict[str, dict[str, Doc]] = {
            "networks": self.networks, "subnets": self.subnets, "ports": self.ports,
            "trunks": self.trunks, "trunk_tokens": {},
        }
        self._addresses: dict[str, SubnetAddresses] = {}
        self._segments: dict[str, TrunkSegments] = {}
        self._trunk_of_parent: dict[str, str] = {}
        self._trunk_of_subport: dict[str, str] = {}
        self._macs: dict[tuple[str, str], str] = {}  # (network, mac) -> port
        self._lock = asyncio.Lock()
        #: Called after every change is applied (the fabric re-computes its flows).
        self.listeners: list[Callable[[], None]] = []

    @classmethod
    async def open(cls, db: Database) -> Book:
        """The book as the database has it (empty for a new file)."""
        book = cls(db)
        try:
            loaded = await db.load()
        except (sqlite3.DatabaseError, ValueError) as exc:
            await db.close()
            raise BookError(
                f"Cannot read the network book {db.path}: {exc}. Restore it, or move it away "
                "to start with no networks"
            ) from None
        # Subnets before ports (ports take their addresses), ports before trunks.
        for table in ("networks", "subnets", "ports", "trunks", "trunk_tokens"):
            for doc in loaded[table]:
                book._index(table, doc)
                book.tables[table][doc["id"]] = doc
        return book

    async def close(self) -> None:
        async with self._lock:
            await self.db.close()

    # --- indexes ---------------------------------------------------------------------

    def _index(self, table: str, doc: Doc) -> None:
        if table == "subnets" and doc["id"] not in self._addresses:
            cidr = ipaddress.ip_network(doc["cidr"])
            pools = [ipam.Pool(ipaddress.ip_address(p["start"]), ipaddress.ip_address(p["end"]))
                     for p in doc["allocation_pools"]]
            gateway = ipaddress.ip_address(doc["gateway_ip"]) if doc["gateway_ip"] else None
            self._addresses[doc["id"]] = SubnetAddresses(doc["id"], cidr, pools, gateway)
        elif table == "ports":
            for fixed in doc["fixed_ips"]:
                self._addresses[fixed["subnet_id"]].add(ipaddress.ip_address(fixed["ip_address"]))
            self._macs[(doc["network_id"], doc["mac_address"])] = doc["id"]
        elif table == "trunks":
            segments = self._segments.setdefault(doc["id"], TrunkSegments(doc["id"]))
            self._trunk_of_parent[doc["port_id"]] = doc["id"]
            for sub in doc["sub_ports"]:
                segments.add(sub["segmentation_id"], sub["port_id"])
                self._trunk_of_subport[sub["port_id"]] = doc["id"]

    def _unindex(self, table: str, doc: Doc, deleted: bool) -> None:
        if table == "subnets" and deleted:
            del self._addresses[doc["id"]]
        elif table == "ports":
            for fixed in doc["fixed_ips"]:
                self._addresses[fixed["subnet_id"]].discard(ipaddress.ip_address(fixed["ip_address"]))
            self._macs.pop((doc["network_id"], doc["mac_address"]), None)
        elif table == "trunks":
            segments = self._segments[doc["id"]]
            self._trunk_of_parent.pop(doc["port_id"], None)
            for sub in doc["sub_ports"]:
                segments.discard(sub["segmentation_id"])
                self._trunk_of_subport.pop(sub["port_id"], None)
            if deleted:
                del self._segments[doc["id"]]

    def _apply(self, change: Change) -> None:
        for table, key, doc in change.rows:
            old = self.tables[table].get(key)
            if old is not None:
                self._unindex(table, old, deleted=doc is None)
            if doc is None:
                self.tables[table].pop(key, None)
            else:
                self._index(table, doc)
                self.tables[table][key] = doc
        for listener in self.listeners:
            listener()

    async def _mutate(self, plan: Callable[[Change], T]) -> T:
        """Runs `plan` (which raises a NeutronError to refuse) and commits what it planned."""
        async with self._lock:
            change = Change()
            result = plan(change)
            commit = asyncio.ensure_future(self._commit(change))
            try:
                await asyncio.shield(commit)
            except asyncio.CancelledError:
                # The write goes on in its thread: hold the lock until it is applied.
                await asyncio.gather(commit, return_exceptions=True)
                raise
            return result

    async def _commit(self, change: Change) -> None:
        try:
            await self.db.write(change.rows)
        except (sqlite3.Error, OSError) as exc:
            raise errors.BookUnavailable(
                f"The network book {self.db.path} could not be written ({exc}); nothing was changed"
            ) from None
        self._apply(change)

    # --- reads -----------------------------------------------------------------------

    def network(self, net_id: str) -> Doc:
        return _found(self.networks, net_id, errors.NetworkNotFound)

    def subnet(self, subnet_id: str) -> Doc:
        return _found(self.subnets, subnet_id, errors.SubnetNotFound)

    def port(self, port_id: str) -> Doc:
        return _found(self.ports, port_id, errors.PortNotFound)

    def trunk(self, trunk_id: str) -> Doc:
        return _found(self.trunks, trunk_id, errors.TrunkNotFound)

    def trunk_of_subport(self, port_id: str) -> str | None:
        return self._trunk_of_subport.get(port_id)

    def trunk_of_token(self, token: str) -> str | None:
        entry = self.tables["trunk_tokens"].get(token_digest(token))
        return None if entry is None else entry["trunk_id"]

    def _subnets_of(self, net_id: str) -> list[Doc]:
        return [s for s in self.subnets.values() if s["network_id"] == net_id]

    # The views add what is derived from other documents.

    def network_view(self, doc: Doc) -> Doc:
        return {**doc, "status": "ACTIVE",
                "subnets": [s["id"] for s in self._subnets_of(doc["id"])]}

    def subnet_view(self, doc: Doc) -> Doc:
        return doc

    def port_view(self, doc: Doc) -> Doc:
        bound = bool(doc["binding:host_id"])
        view = {**doc, "status": "ACTIVE" if bound and doc["admin_state_up"] else "DOWN",
                "binding:vif_type": "other" if bound else "unbound", "binding:vif_details": {}}
        trunk_id = self._trunk_of_parent.get(doc["id"])
        if trunk_id is not None:
            view["trunk_details"] = {
                "trunk_id": trunk_id,
                "sub_ports": [
                    {**sub, "mac_address": self.ports[sub["port_id"]]["mac_address"]}
                    for sub in self.trunks[trunk_id]["sub_ports"]
                ],
            }
        return view

    def trunk_view(self, doc: Doc) -> Doc:
        parent = self.ports[doc["port_id"]]
        active = doc["admin_state_up"] and bool(parent["binding:host_id"])
        return {**doc, "status": "ACTIVE" if active else "DOWN"}

    def view(self, resource: str, doc: Doc) -> Doc:
        views: dict[str, Callable[[Doc], Doc]] = {
            "network": self.network_view, "subnet": self.subnet_view,
            "port": self.port_view, "trunk": self.trunk_view,
        }
        return views[resource](doc)

    # --- networks --------------------------------------------------------------------

    @_mutation
    def create_networks(self, change: Change, specs: list[Doc]) -> list[Doc]:
        return [change.put("networks", _new_doc(spec)) for spec in specs]

    @_mutation
    def update(self, change: Change, resource: str, key: str, changes: Doc) -> Doc:
        """Changes plain attributes (names, flags, tags); a port's host moves its subports too."""
        doc = {"network": self.network, "subnet": self.subnet,
               "port": self.port, "trunk": self.trunk}[resource](key)
        if resource == "subnet" and "dns_nameservers" in changes:
            for server in changes["dns_nameservers"]:
                ipam.parse_address(server, "dns_nameservers")
        new = change.put(resource + "s", _revised(doc, changes))
        trunk_id = self._trunk_of_parent.get(key) if resource == "port" else None
        if trunk_id is not None and "binding:host_id" in changes:
            for sub in self.trunks[trunk_id]["sub_ports"]:
                change.put("ports", _revised(self.ports[sub["port_id"]],
                                             {"binding:host_id": changes["binding:host_id"]}))
        return new

    @_mutation
    def delete_network(self, change: Change, net_id: str) -> None:
        """Refused while ports other than pooled subports are on it; its subnets and pooled
        subports (taken off their trunks) go with it."""
        self.network(net_id)
        ports = [p for p in self.ports.values() if p["network_id"] == net_id]
        if not all(_pooled(p) for p in ports):
            raise errors.NetworkInUse(net_id)
        pooled = {p["id"] for p in ports}
        for trunk_id in {self._trunk_of_subport[p] for p in pooled if p in self._trunk_of_subport}:
            trunk = self.trunks[trunk_id]
            kept = [s for s in trunk["sub_ports"] if s["port_id"] not in pooled]
            change.put("trunks", _revised(trunk, {"sub_ports": kept}))
        for port_id in pooled:
            change.delete("ports", port_id)
        for subnet in self._subnets_of(net_id):
            change.delete("subnets", subnet["id"])
        change.delete("networks", net_id)

    # --- subnets ---------------------------------------------------------------------

    @_mutation
    def create_subnets(self, change: Change, specs: list[Doc]) -> list[Doc]:
        planned: list[Doc] = []
        for spec in specs:
            planned.append(change.put("subnets", self._plan_subnet(spec, planned)))
        return planned

    def _plan_subnet(self, spec: Doc, planned: list[Doc]) -> Doc:
        self.network(spec["network_id"])
        if spec["ip_version"] not in (4, 6):
            raise errors.HTTPBadRequest(
                f"Invalid input for ip_version. Reason: '{spec['ip_version']}' is not in [4, 6]."
            )
        cidr = ipam.parse_cidr(spec["cidr"], spec["ip_version"])
        for other in [*self._subnets_of(spec["network_id"]), *planned]:
            if other["network_id"] == spec["network_id"] and cidr.overlaps(
                ipaddress.ip_network(other["cidr"])
            ):
                raise errors.InvalidInput(
                    f"Requested subnet with cidr: {cidr} for network: {spec['network_id']} "
                    "overlaps with another subnet"
                )
        gateway: IPAddress | None
        if "gateway_ip" not in spec:
            gateway = ipam.default_gateway(cidr)
        elif spec["gateway_ip"] is None:
            gateway = None
        else:
            gateway = ipam.parse_address(spec["gateway_ip"], "gateway_ip")
            if gateway not in ipam.host_range(cidr):
                raise errors.InvalidInput(
                    f"Gateway is not valid on subnet: {gateway} is not a host address of {cidr}."
                )
        if spec["allocation_pools"] is None:
            pools = ipam.default_pools(cidr, gateway)
        else:
            pools = []
            for pool in spec["allocation_pools"]:
                if set(pool) != {"start", "end"}:
                    raise errors.HTTPBadRequest(
                        f"Invalid input for allocation_pools. Reason: {pool} must have exactly "
                        "'start' and 'end'."
                    )
                pools.append(ipam.Pool(ipam.parse_address(pool["start"], "allocation_pools"),
                                       ipam.parse_address(pool["end"], "allocation_pools")))
            ipam.validate_pools(cidr, pools, gateway)
        for server in spec["dns_nameservers"]:
            ipam.parse_address(server, "dns_nameservers")
        if spec["ip_version"] == 4 and (spec["ipv6_ra_mode"] or spec["ipv6_address_mode"]):
            raise errors.InvalidInput(
                "ipv6_ra_mode or ipv6_address_mode cannot be set for an IPv4 subnet"
            )
        for mode in ("ipv6_ra_mode", "ipv6_address_mode"):
            if spec[mode] not in (None, "slaac", "dhcpv6-stateful", "dhcpv6-stateless"):
                raise errors.HTTPBadRequest(
                    f"Invalid input for {mode}. Reason: '{spec[mode]}' is not in "
                    "['dhcpv6-stateful', 'dhcpv6-stateless', 'slaac']."
                )
        return _new_doc({
            **spec, "cidr": str(cidr), "gateway_ip": None if gateway is None else str(gateway),
            "allocation_pools": [p.json() for p in pools], "subnetpool_id": None,
            "segment_id": None, "service_types": [],
        })

    @_mutation
    def delete_subnet(self, change: Change, subnet_id: str) -> None:
        self.subnet(subnet_id)
        if self._addresses[subnet_id].allocated:
            raise errors.SubnetInUse(subnet_id)
        change.delete("subnets", subnet_id)

    # --- ports -----------------------------------------------------------------------

    @_mutation
    def create_ports(self, change: Change, specs: list[Doc]) -> list[Doc]:
        """All or none: a bulk request that fails in any port creates no port."""
        reserved: dict[str, set[IPAddress]] = {}
        macs: set[tuple[str, str]] = set()
        return [change.put("ports", self._plan_port(spec, reserved, macs)) for spec in specs]

    def _plan_port(self, spec: Doc, reserved: dict[str, set[IPAddress]],
                   macs: set[tuple[str, str]]) -> Doc:
        net_id = spec["network_id"]
        self.network(net_id)
        if spec["mac_address"] is None:
            mac = self._new_mac(net_id, macs)
        else:
            mac = _normal_mac(spec["mac_address"])
            if (net_id, mac) in self._macs or (net_id, mac) in macs:
                raise errors.MacAddressInUse(net_id, mac)
        macs.add((net_id, mac))
        fixed_ips = self._plan_fixed_ips(net_id, spec["fixed_ips"], reserved)
        return _new_doc({**spec, "mac_address": mac, "fixed_ips": fixed_ips})

    def _new_mac(self, net_id: str, taken: set[tuple[str, str]]) -> str:
        while True:
            tail = ":".join(f"{random.randrange(256):02x}" for _ in range(3))
            mac = f"{MAC_PREFIX}:{tail}"
            if (net_id, mac) not in self._macs and (net_id, mac) not in taken:
                return mac

    def _plan_fixed_ips(self, net_id: str, requested: list[Doc] | None,
                        reserved: dict[str, set[IPAddress]]) -> list[Doc]:
        """Neutron's rules: none asked for, one address per IP version from the first
        subnet that has one; else each entry names a subnet, an address, or both."""
        subnets = self._subnets_of(net_id)
        chosen: list[tuple[str, IPAddress]] = []

        def take(subnet_id: str, ip: IPAddress) -> None:
            reserved.setdefault(subnet_id, set()).add(ip)
            chosen.append((subnet_id, ip))

        if requested is None:
            for version in (4, 6):
                of_version = [s for s in subnets if s["ip_version"] == version]
                for subnet in of_version:
                    ip = self._addresses[subnet["id"]].next_free(reserved.get(subnet["id"], ()))
                    if ip is not None:
                        take(subnet["id"], ip)
                        break
                else:
                    if of_version:
                        raise errors.IpAddressGenerationFailure(net_id)
            return [{"subnet_id": s, "ip_address": str(ip)} for s, ip in chosen]

        # Specific addresses first, so that "any address" entries do not take them.
        for entry in sorted(requested, key=lambda e: "ip_address" not in e):
            unknown = set(entry) - {"subnet_id", "ip_address"}
            if unknown or not entry:
                raise errors.HTTPBadRequest(
                    f"Invalid input for fixed_ips. Reason: {entry} must have 'subnet_id', "
                    "'ip_address' or both."
                )
            subnet_id = entry.get("subnet_id")
            if subnet_id is not None:
                subnet = self.subnet(str(subnet_id))
                if subnet["network_id"] != net_id:
                    raise errors.InvalidInput(
                        f"Failed to create port on network {net_id}, because fixed_ips "
                        f"included invalid subnet {subnet_id}"
                    )
            if "ip_address" in entry:
                ip = ipam.parse_address(entry["ip_address"], "fixed_ips")
                if subnet_id is None:
                    owners = [s for s in subnets if ip in ipaddress.ip_network(s["cidr"])]
                    if not owners:
                        raise errors.InvalidIpForNetwork(str(ip))
                    subnet_id = owners[0]["id"]
                addresses = self._addresses[subnet_id]
                addresses.check_requested(ip, reserved.get(subnet_id, ()))
                take(subnet_id, ip)
            else:
                assert subnet_id is not None
                ip_or_none = self._addresses[subnet_id].next_free(reserved.get(subnet_id, ()))
                if ip_or_none is None:
                    raise errors.IpAddressGenerationFailure(net_id)
                take(subnet_id, ip_or_none)
        return [{"subnet_id": s, "ip_address": str(ip)} for s, ip in chosen]

    @_mutation
    def delete_port(self, change: Change, port_id: str) -> None:
        """Frees its addresses; refused while it is a trunk's parent or subport."""
        self.port(port_id)
        if port_id in self._trunk_of_parent:
            raise errors.PortInUseAsTrunkParent(port_id, self._trunk_of_parent[port_id])
        if port_id in self._trunk_of_subport:
            raise errors.PortInUseAsSubPort(port_id, self._trunk_of_subport[port_id])
        change.delete("ports", port_id)

    # --- trunks ----------------------------------------------------------------------

    @_mutation
    def create_trunk(self, change: Change, spec: Doc) -> Doc:
        parent = self.port(spec["port_id"])
        if parent["id"] in self._trunk_of_parent:
            raise errors.TrunkPortInUse(parent["id"])
        if parent["id"] in self._trunk_of_subport:
            raise errors.ParentPortInUse(parent["id"])
        trunk = _new_doc({**spec, "sub_ports": []})
        trunk["sub_ports"] = self._plan_attach(change, trunk, parent, spec["sub_ports"])
        return change.put("trunks", trunk)

    def _live_trunk(self, trunk_id: str) -> Doc:
        trunk = self.trunk(trunk_id)
        if not trunk["admin_state_up"]:
            raise errors.Conflict(f"Trunk {trunk_id} is currently disabled.")
        return trunk

    @_mutation
    def add_subports(self, change: Change, trunk_id: str, subs: list[Doc]) -> Doc:
        """All or none, as Neutron's add_subports."""
        trunk = self._live_trunk(trunk_id)
        added = self._plan_attach(change, trunk, self.ports[trunk["port_id"]], subs)
        subports = [*trunk["sub_ports"], *added]
        return change.put("trunks", _revised(trunk, {"sub_ports": subports}))

    def _plan_attach(self, change: Change, trunk: Doc, parent: Doc, subs: list[Doc]) -> list[Doc]:
        segments = self._segments.get(trunk["id"], TrunkSegments(trunk["id"]))
        checked: list[tuple[Doc, str, int | None]] = []
        seen: set[str] = set()
        for sub in subs:
            if not isinstance(sub, dict) or "port_id" not in sub or set(sub) - {
                "port_id", "segmentation_type", "segmentation_id"
            }:
                raise errors.HTTPBadRequest(
                    f"Invalid input for sub_ports. Reason: {sub} must have 'port_id' and may have "
                    "'segmentation_type' and 'segmentation_id'."
                )
            port = self.port(str(sub["port_id"]))
            if port["id"] in seen:
                raise errors.HTTPBadRequest(
                    f"Invalid input for sub_ports. Reason: port {port['id']} is listed twice."
                )
            seen.add(port["id"])
            if port["id"] == parent["id"] or port["id"] in self._trunk_of_parent:
                raise errors.PortInUseAsTrunkParent(
                    port["id"], self._trunk_of_parent.get(port["id"], str(trunk["id"]))
                )
            if port["id"] in self._trunk_of_subport:
                raise errors.PortInUseAsSubPort(port["id"], self._trunk_of_subport[port["id"]])
            if port["device_id"]:
                raise errors.PortInUse(port["id"], port["network_id"], port["device_id"])
            kind, vid = segmentation.validate(
                sub.get("segmentation_type", segmentation.VLAN), sub.get("segmentation_id")
            )
            checked.append((port, kind, vid))
        # Named IDs first, so that "the lowest free" never takes one named later in the batch.
        reserved: list[int] = []
        for _, _, vid in checked:
            if vid is not None:
                segments.check_requested(vid, reserved)
                reserved.append(vid)
        added = []
        for port, kind, vid in checked:
            if vid is None:
                vid = segments.lowest_free(reserved)
                reserved.append(vid)
            added.append({"port_id": port["id"], "segmentation_type": kind, "segmentation_id": vid})
            change.put("ports", _revised(port, {
                "device_owner": SUBPORT_OWNER, "device_id": trunk["id"],
                "binding:host_id": parent["binding:host_id"],
            }))
        return added

    @_mutation
    def remove_subports(self, change: Change, trunk_id: str, subs: list[Doc]) -> Doc:
        trunk = self._live_trunk(trunk_id)
        gone: set[str] = set()
        for sub in subs:
            if not isinstance(sub, dict) or "port_id" not in sub:
                raise errors.HTTPBadRequest(
                    f"Invalid input for sub_ports. Reason: {sub} must have 'port_id'."
                )
            port_id = str(sub["port_id"])
            if self._trunk_of_subport.get(port_id) != trunk_id or port_id in gone:
                raise errors.SubPortNotFound(trunk_id, port_id)
            gone.add(port_id)
        self._plan_detach(change, gone)
        kept = [s for s in trunk["sub_ports"] if s["port_id"] not in gone]
        return change.put("trunks", _revised(trunk, {"sub_ports": kept}))

    def _plan_detach(self, change: Change, port_ids: Iterable[str]) -> None:
        for port_id in port_ids:
            change.put("ports", _revised(self.ports[port_id], {"device_id": "", "binding:host_id": ""}))

    @_mutation
    def delete_trunk(self, change: Change, trunk_id: str) -> None:
        """Detaches its subports and revokes the tokens scoped to it."""
        trunk = self.trunk(trunk_id)
        self._plan_detach(change, [s["port_id"] for s in trunk["sub_ports"]])
        for digest, entry in self.tables["trunk_tokens"].items():
            if entry["trunk_id"] == trunk_id:
                change.delete("trunk_tokens", digest)
        change.delete("trunks", trunk_id)

    @_mutation
    def mint_trunk_token(self, change: Change, trunk_id: str) -> str:
        """A new token that may manage the subports of `trunk_id` only (`mesilla.network.access`)."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.trunk(trunk_id)
        change.put("trunk_tokens", {"id": token_digest(token), "trunk_id": trunk_id,
                                    "created_at": _now()})
        return token

