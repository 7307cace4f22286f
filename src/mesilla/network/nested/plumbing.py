"""Plumbing a pod's subport into its network namespace: the `ovs` and `vlan` backends.

The agent runs them (the plugin only forwards its request). Both end the
same way, Kuryr's nested binding: an interface created in the host's
namespace under a temporary name (`eth0` would clash there), moved into the
pod's namespace, renamed to `CNI_IFNAME`, given the Neutron port's MAC and
MTU, brought up, given its addresses and a default route through the
subnet's gateway. They differ in what carries the VLAN ID:

* `vlan`: an 802.1Q sub-interface of the trunk NIC (``kind=vlan``). A stale
  one holding the same VLAN ID on the same NIC (a pod namespace deleted late)
  makes the create fail with EEXIST; it is found in the namespaces the agent
  names and deleted, and the create retried.
* `ovs`: for kernels without 802.1Q (this one): a veth whose host end is an
  access port of the host's Open vSwitch bridge tagged with the VLAN ID; the
  bridge's uplink is the trunk NIC in trunk mode, so that the frames on the
  trunk are real 802.1Q all the same. The pods keep their offloads: the
  switch runs with userspace TSO, which handles the partial checksums veths
  leave (`mesilla.network.ovs`). A pooled subport is plumbed ahead
  (`prepare`: the veth with the port's MAC and MTU, its host end on the
  bridge), so that its attach is only the move into the pod and the pod's
  L3, with no switch to wait for.

`probe_vlan` tells the two apart: the kernel answers EOPNOTSUPP to a
``kind=vlan`` create where 802.1Q is missing. Every netlink operation goes
through pyroute2, in a pod's namespace over a socket opened there by the
calling thread (`setns` and back: pyroute2's own ``netns=`` forks a helper
per socket, ~20 ms each).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from mesilla.network.ovs import OvsInstance

OVS = "ovs"
VLAN = "vlan"
BACKENDS = (OVS, VLAN)


class PlumbingError(RuntimeError):
    """A pod's interface could not be set up; the message says which step failed."""


@dataclass(frozen=True)
class Address:
    address: str  # "10.0.0.5/24"
    gateway: str | None = None

    @property
    def interface(self) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
        return ipaddress.ip_interface(self.address)


@dataclass(frozen=True)
class Vif:
    """What a pod's interface is made of: its Neutron subport, as the agent bound it."""

    port_id: str
    mac_address: str
    segmentation_id: int
    mtu: int
    addresses: tuple[Address, ...]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Vif:
        return cls(
            port_id=str(doc["port_id"]), mac_address=str(doc["mac_address"]),
            segmentation_id=int(doc["segmentation_id"]), mtu=int(doc["mtu"]),
            addresses=tuple(Address(str(a["address"]), a.get("gateway")) for a in doc["addresses"]),
        )  # fmt: skip

    @property
    def host_name(self) -> str:
        """The host-side name (veth host end, or the sub-interface before its move): 15 chars max."""
        return host_name(self.port_id)


def host_name(port_id: str) -> str:
    return "mn" + port_id.replace("-", "")[:11]


def pod_end_name(port_id: str) -> str:
    """The pod end of a prepared veth while it waits in the host's namespace."""
    return "mp" + port_id.replace("-", "")[:11]


def _temporary_name() -> str:
    return "mt" + uuid.uuid4().hex[:11]


_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def _netlink_socket_in(path: str) -> socket.socket:
    """A netlink socket of the namespace at `path`, opened by this thread from inside it."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(path, os.O_RDONLY)
        try:
            _setns(target)
            try:
                return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
            finally:
                _setns(own)  # never left in the pod's namespace: this thread serves others next
        finally:
            os.close(target)
    finally:
        os.close(own)


@contextlib.contextmanager
def _namespace(path: str) -> Iterator[IPRoute]:
    try:
        sock = _netlink_socket_in(path)
    except OSError as exc:
        raise PlumbingError(f"Cannot enter the pod's network namespace {path}: {exc}") from None
    with IPRoute(use_socket=sock) as ipr:
        yield ipr


def _ns_fd(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise PlumbingError(f"Cannot open the pod's network namespace {path}: {exc}") from None


def _index(ipr: IPRoute, ifname: str) -> int | None:
    # One RTM_GETLINK by name: link_lookup dumps every link of the namespace.
    try:
        return int(ipr.link("get", ifname=ifname)[0]["index"])
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            return None
        raise


def _trunk_index(ipr: IPRoute, trunk_nic: str) -> int:
    index = _index(ipr, trunk_nic)
    if index is None:
        raise PlumbingError(f"The trunk NIC {trunk_nic} does not exist in this namespace")
    return index


def _trunk_up(trunk_nic: str) -> None:
    with IPRoute() as ipr:
        ipr.link("set", index=_trunk_index(ipr, trunk_nic), state="up")


def _link_attr(ipr: IPRoute, index: int, name: str) -> Any:
    return ipr.link("get", index=index)[0].get(name)


def _move(ipr: IPRoute, name: str, netns: str, ifname: str) -> None:
    """Moves `name` into the pod's namespace as `ifname` (one message: the kernel renames it
    there once moved)."""
    target = _ns_fd(netns)
    try:
        ipr.link("set", index=_index(ipr, name), net_ns_fd=target, ifname=ifname)
    finally:
        os.close(target)


def _configure_pod_end(netns: str, ifname: str, vif: Vif) -> str:
    """Gives the moved interface the port's L2 and L3; returns its MAC."""
    with _namespace(netns) as ipr:
        index = _index(ipr, ifname)
        if index is None:
            raise PlumbingError(f"{ifname} did not arrive in {netns}")
        ipr.link("set", index=index, address=vif.mac_address, mtu=vif.mtu, state="up")
        for addr in vif.addresses:
            iface = addr.interface
            ipr.addr("add", index=index, address=str(iface.ip), prefixlen=iface.network.prefixlen)
        for addr in vif.addresses:
            if addr.gateway:
                family = socket.AF_INET6 if addr.interface.version == 6 else socket.AF_INET
                dst = "::/0" if family == socket.AF_INET6 else "0.0.0.0/0"
                ipr.route("replace", dst=dst, gateway=addr.gateway, oif=index, family=family)
    return vif.mac_address


def pod_end_ready(netns: str, ifname: str, vif: Vif) -> bool:
    """Whether the pod already has `ifname` with the port's MAC and addresses (a repeated ADD)."""
    with contextlib.suppress(PlumbingError), _namespace(netns) as ipr:
        index = _index(ipr, ifname)
        if index is None or _link_attr(ipr, index, "IFLA_ADDRESS") != vif.mac_address:
            return False
        have = {(a.get("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.addr("dump", index=index)}
        return all((str(a.interface.ip), a.interface.network.prefixlen) in have for a in vif.addresses)
    return False


def _delete_pod_end(netns: str | None, ifname: str, mac: str | None) -> None:
    """Deletes the pod's interface if it is ours (it has the port's MAC, when known)."""
    if not netns or not os.path.exists(netns):
        return
    with contextlib.suppress(PlumbingError), _namespace(netns) as ipr:
        index = _index(ipr, ifname)
        if index is not None and (mac is None or _link_attr(ipr, index, "IFLA_ADDRESS") == mac):
            with contextlib.suppress(NetlinkError):
                ipr.link("del", index=index)


class OvsPlumbing:
    """veth pairs on the host's Open vSwitch bridge, access ports tagged with the VLAN ID."""

    name = OVS

    def __init__(self, ovs: OvsInstance, bridge: str) -> None:
        self.ovs = ovs
        self.bridge = bridge

    def setup_host(self, trunk_nic: str) -> None:
        """The bridge, with the trunk NIC as its uplink in trunk mode (kept when there)."""
        self.ovs.start()
        self.ovs.add_bridge(self.bridge)
        self.ovs.add_port(self.bridge, trunk_nic, "vlan_mode=trunk")
        _trunk_up(trunk_nic)

    def prepare(self, vif: Vif) -> None:
        """The veth of a pooled subport, both ends in the host's namespace: the host end on
        the bridge, tagged, the pod end (`pod_end_name`) with the port's MAC and MTU."""
        with IPRoute() as ipr:
            ends = (_index(ipr, vif.host_name), _index(ipr, pod_end_name(vif.port_id)))
        ready = None not in ends
        if ready:
            self.ovs.add_port(self.bridge, vif.host_name, f"tag={vif.segmentation_id}")  # kept if there
        else:
            self.unplug(vif.port_id, None, "", None)
            self._make(vif)

    def _make(self, vif: Vif) -> None:
        host, pod_end = vif.host_name, pod_end_name(vif.port_id)
        try:
            with IPRoute() as ipr:
                ipr.link("add", ifname=host, kind="veth", peer=pod_end)
                ipr.link("set", index=_index(ipr, pod_end), address=vif.mac_address, mtu=vif.mtu)
                ipr.link("set", index=_index(ipr, host), mtu=vif.mtu, state="up")
        except NetlinkError as exc:
            raise PlumbingError(f"Cannot create the veth {host} for port {vif.port_id}: {exc}") from None
        self.ovs.add_port(self.bridge, host, f"tag={vif.segmentation_id}")

    def plug(self, vif: Vif, netns: str, ifname: str) -> str:
        host, pod_end = vif.host_name, pod_end_name(vif.port_id)
        with IPRoute() as ipr:
            present = _index(ipr, host) is not None
            prepared = present and _index(ipr, pod_end) is not None
        if present and not prepared and pod_end_ready(netns, ifname, vif):
            self.ovs.add_port(self.bridge, host, f"tag={vif.segmentation_id}")
            return vif.mac_address  # a repeated ADD
        if not prepared:  # not from a pool, or a half-done ADD: made afresh
            self.unplug(vif.port_id, netns, ifname, vif.mac_address)
            self._make(vif)
        try:
            with IPRoute() as ipr:
                _move(ipr, pod_end, netns, ifname)
        except NetlinkError as exc:
            raise PlumbingError(f"Cannot move {pod_end} of port {vif.port_id} into {netns}: {exc}") from None
        return _configure_pod_end(netns, ifname, vif)

    def unplug(self, port_id: str, netns: str | None, ifname: str, mac: str | None) -> None:
        host = host_name(port_id)
        self.ovs.delete_port(self.bridge, host)
        with IPRoute() as ipr:
            index = _index(ipr, host)
            if index is not None:
                with contextlib.suppress(NetlinkError):
                    ipr.link("del", index=index)  # takes the pod end with it, wherever it is
        _delete_pod_end(netns, ifname, mac)


class VlanPlumbing:
    """802.1Q sub-interfaces of the trunk NIC, moved into the pods' namespaces."""

    name = VLAN

    def __init__(self, trunk_nic: str, stale_namespaces: Callable[[], list[str]] = list) -> None:
        self.trunk_nic = trunk_nic
        #: Where a stale sub-interface holding a VLAN ID may be left (pod namespaces).
        self.stale_namespaces = stale_namespaces

    def setup_host(self, trunk_nic: str) -> None:
        _trunk_up(trunk_nic)

    def prepare(self, vif: Vif) -> None:
        """Nothing ahead: a sub-interface is one netlink call at attach, no switch to wait for."""

    def plug(self, vif: Vif, netns: str, ifname: str) -> str:
        if pod_end_ready(netns, ifname, vif):
            return vif.mac_address
        self.unplug(vif.port_id, netns, ifname, vif.mac_address)
        temporary = _temporary_name()
        try:
            with IPRoute() as ipr:
                link = _index(ipr, self.trunk_nic)
                if link is None:
                    raise PlumbingError(f"The trunk NIC {self.trunk_nic} does not exist")
                try:
                    ipr.link("add", ifname=temporary, kind="vlan", link=link, vlan_id=vif.segmentation_id)
                except NetlinkError as exc:
                    if exc.code != errno.EEXIST or not self._clear_stale(vif.segmentation_id):
                        raise
                    ipr.link("add", ifname=temporary, kind="vlan", link=link, vlan_id=vif.segmentation_id)
                _move(ipr, temporary, netns, ifname)
        except NetlinkError as exc:
            raise PlumbingError(
                f"Cannot create VLAN {vif.segmentation_id} on {self.trunk_nic} for port {vif.port_id}: {exc}"
            ) from None
        return _configure_pod_end(netns, ifname, vif)

    def _clear_stale(self, vlan_id: int) -> bool:
        """Deletes a sub-interface of the trunk NIC with `vlan_id` left in a pod namespace."""
        for path in self.stale_namespaces():
            with contextlib.suppress(PlumbingError, NetlinkError), _namespace(path) as ipr:
                for link in ipr.link("dump"):
                    info = link.get(("IFLA_LINKINFO", "IFLA_INFO_DATA")) or {}
                    if link.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) == "vlan" and (
                        info.get("IFLA_VLAN_ID") == vlan_id
                    ):
                        ipr.link("del", index=link["index"])
                        return True
        return False

    def unplug(self, port_id: str, netns: str | None, ifname: str, mac: str | None) -> None:
        _delete_pod_end(netns, ifname, mac)


Plumbing = OvsPlumbing | VlanPlumbing


def backend(name: str, trunk_nic: str, ovs_dir: str, bridge: str,
            stale_namespaces: Callable[[], list[str]] = list) -> Plumbing:  # fmt: skip
    """The plumbing of backend `name` (`choose`'s answer) for this host."""
    if name == OVS:
        return OvsPlumbing(OvsInstance(ovs_dir), bridge)
    if name == VLAN:
        return VlanPlumbing(trunk_nic, stale_namespaces)
    raise PlumbingError(f"No plumbing backend '{name}': expecting {' or '.join(BACKENDS)}")


def probe_vlan(trunk_nic: str) -> bool:
    """Whether the kernel makes 802.1Q sub-interfaces (the probe one is deleted at once)."""
    probe = _temporary_name()
    with IPRoute() as ipr:
        link = _trunk_index(ipr, trunk_nic)
        try:
            ipr.link("add", ifname=probe, kind="vlan", link=link, vlan_id=4094)
        except NetlinkError as exc:
            if exc.code == errno.EOPNOTSUPP:
                return False
            if exc.code == errno.EEXIST:
                return True  # a pod holds that VLAN ID: 802.1Q is there
            raise PlumbingError(f"Probing 802.1Q on {trunk_nic}: {exc}") from None
        ipr.link("del", index=_index(ipr, probe))
    return True


def choose(backend: str, vlan_supported: bool) -> str:
    """The backend to use: as configured, or `vlan` where the kernel has 802.1Q, else `ovs`."""
    if backend == "auto":
        return VLAN if vlan_supported else OVS
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend '{backend}': expecting auto, {' or '.join(BACKENDS)}")
    if backend == VLAN and not vlan_supported:
        raise ValueError("The vlan backend needs 802.1Q, which this kernel lacks: use ovs (or auto)")
    return backend
