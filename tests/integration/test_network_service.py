"""The network service (seed 002) driven by unmodified openstacksdk, over HTTP on 127.0.0.1.

`mesilla network` (and `mesilla master --network_service`) run as processes
of their own, so that a restart is a real one, `kill -9` included.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openstack
import pytest
from openstack import exceptions as sdk_errors

from mesilla.testing.cluster import free_port
from mesilla.testing.processes import Daemon, answers

# openstacksdk warns about its own deprecations on every call.
pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::Warning:openstack")]

SUBPORT = "trunk:subport"


class Service:
    def __init__(self, daemon: Daemon, url: str) -> None:
        self.daemon = daemon
        self.url = url  # ends with "/"

    def start(self) -> None:
        self.daemon.start()
        self.daemon.await_ready(lambda: answers(self.url), "an answer to GET /")

    def sdk(self, token: str | None = None) -> Any:
        """A new openstacksdk connection: auth-less (an admin), or sending `token`."""
        if token is None:
            return openstack.connection.Connection(auth_type="none", network_endpoint_override=self.url)
        return openstack.connection.Connection(
            auth_type="admin_token", auth={"endpoint": self.url, "token": token},
            network_endpoint_override=self.url,
        )

    def http(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        """A raw request (for what the SDK hides: query strings, bodies of errors)."""
        request = urllib.request.Request(
            self.url + path.lstrip("/"), method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **({"X-Auth-Token": token} if token else {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


def _service(tmp_path: Path, kind: str, extra: list[str], mount: str) -> Iterator[Service]:
    port = free_port()
    daemon = Daemon(kind, ["--ip=127.0.0.1", f"--port={port}", f"--work_dir={tmp_path / 'work'}", *extra],
                    tmp_path / f"{kind}.log")
    service = Service(daemon, f"http://127.0.0.1:{port}{mount}")
    try:
        service.start()
        yield service
    finally:
        if not daemon.stop():
            daemon.kill()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    yield from _service(tmp_path, "network", [], "/")


def neutron_error(exc: sdk_errors.HttpException) -> dict[str, Any]:
    assert exc.response is not None
    body: dict[str, Any] = exc.response.json()
    assert set(body) == {"NeutronError"} and set(body["NeutronError"]) == {"type", "message", "detail"}
    assert body["NeutronError"]["detail"] == ""
    return body["NeutronError"]  # type: ignore[no-any-return]


def test_version_documents(service: Service) -> None:
    status, versions = service.http("GET", "/")
    assert status == 200
    assert versions == {"versions": [{"id": "v2.0", "status": "CURRENT",
                                      "links": [{"href": service.url + "v2.0/", "rel": "self"}]}]}
    status, resources = service.http("GET", "/v2.0")
    assert {r["collection"] for r in resources["resources"]} == {"networks", "subnets", "ports", "trunks"}
    status, extensions = service.http("GET", "/v2.0/extensions")
    assert {"trunk", "trunk-details", "binding"} <= {e["alias"] for e in extensions["extensions"]}


def test_bad_requests_are_neutron_shaped(service: Service) -> None:
    def error(method: str, path: str, body: Any = None) -> tuple[int, str, str]:
        request = urllib.request.Request(service.url + path.lstrip("/"), method=method, data=body,
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(request, timeout=30)
        answer = json.loads(failed.value.read())["NeutronError"]
        assert answer["detail"] == ""
        return failed.value.code, answer["type"], answer["message"]

    assert error("POST", "/v2.0/networks", b"{not json") == (
        400, "HTTPBadRequest", "Malformed request body: it is not JSON")
    assert error("POST", "/v2.0/networks", b'{"net": {}}') == (
        400, "HTTPBadRequest", "Unable to find 'network' in request body")
    assert error("POST", "/v2.0/networks", b'{"network": {"colour": "red"}}') == (
        400, "HTTPBadRequest", "Unrecognized attribute(s) 'colour'")
    assert error("POST", "/v2.0/networks", b'{"network": {"admin_state_up": "maybe"}}')[:2] == (
        400, "HTTPBadRequest")
    assert error("POST", "/v2.0/ports", b'{"port": {"name": "x"}}') == (
        400, "HTTPBadRequest", "Failed to parse request. Required attribute 'network_id' not specified")
    assert error("POST", "/v2.0/ports", b'{"port": {"network_id": "nope"}}') == (
        400, "HTTPBadRequest", "Invalid input for network_id. Reason: 'nope' is not a valid UUID.")
    missing = "5a1c5b0e-0000-4000-8000-000000000000"
    assert error("POST", "/v2.0/ports", json.dumps({"port": {"network_id": missing}}).encode()) == (
        404, "NetworkNotFound", f"Network {missing} could not be found.")
    assert error("POST", "/v2.0/trunks", b'{"trunks": [{}]}')[:2] == (400, "HTTPBadRequest")
    assert error("GET", "/v2.0/routers")[:2] == (404, "HTTPNotFound")
    assert error("DELETE", "/v2.0/networks")[:2] == (405, "HTTPMethodNotAllowed")
    assert error("PUT", f"/v2.0/trunks/{missing}/add_subports", b'{"sub_ports": []}')[:2] == (
        404,
        "TrunkNotFound",
    )
    status, created = service.http("POST", "/v2.0/networks", {"network": {"name": "n"}})
    assert status == 201
    status, shown = service.http(
        "GET", f"/v2.0/networks/{created['network']['id']}?fields=name&fields=status"
    )
    assert shown == {"network": {"name": "n", "status": "ACTIVE"}}
    assert error("PUT", f"/v2.0/networks/{created['network']['id']}", b'{"network": {"shared": true}}') == (
        400, "HTTPBadRequest", "Cannot update read-only attribute shared")


def test_life_cycle(service: Service) -> None:
    conn = service.sdk()
    net = conn.network.create_network(name="pods-a")
    assert (net.status, net.is_admin_state_up, net.mtu) == ("ACTIVE", True, 1500)
    v4 = conn.network.create_subnet(
        network_id=net.id, cidr="10.10.0.0/24", ip_version=4, name="v4",
        allocation_pools=[{"start": "10.10.0.10", "end": "10.10.0.100"}], dns_nameservers=["10.10.0.53"],
        is_dhcp_enabled=False,
    )
    assert (v4.gateway_ip, v4.allocation_pools, v4.dns_nameservers, v4.is_dhcp_enabled) == (
        "10.10.0.1", [{"start": "10.10.0.10", "end": "10.10.0.100"}], ["10.10.0.53"], False)
    v6 = conn.network.create_subnet(network_id=net.id, cidr="fd00:10::/64", ip_version=6, name="v6")
    assert v6.gateway_ip == "fd00:10::1"
    assert conn.network.get_network(net.id).subnet_ids == [v4.id, v6.id]

    # Ports: one address per IP version, lowest first; a given MAC and a fixed address kept.
    host = conn.network.create_port(network_id=net.id, name="host-1", device_owner="compute:nova",
                                    binding_host_id="host-1", tags=["mesilla"])
    assert sorted(f["ip_address"] for f in host.fixed_ips) == ["10.10.0.10", "fd00:10::2"]
    assert host.mac_address.startswith("fa:16:3e:") and host.status == "ACTIVE"
    assert host.binding_host_id == "host-1" and host.tags == ["mesilla"]
    pinned = conn.network.create_port(network_id=net.id, mac_address="fa:16:3e:00:00:01",
                                      fixed_ips=[{"subnet_id": v4.id, "ip_address": "10.10.0.77"}],
                                      is_admin_state_up=False)
    assert (pinned.mac_address, pinned.fixed_ips, pinned.status) == (
        "fa:16:3e:00:00:01", [{"subnet_id": v4.id, "ip_address": "10.10.0.77"}], "DOWN")
    bulk = list(conn.network.create_ports([
        {"network_id": net.id, "name": "spare", "device_owner": SUBPORT, "fixed_ips": [{"subnet_id": v4.id}]}
        for _ in range(3)
    ]))
    assert [p.fixed_ips[0]["ip_address"] for p in bulk] == ["10.10.0.11", "10.10.0.12", "10.10.0.13"]

    # Filters, as kuryr looks a host's trunk port up; repeated keys; fields.
    assert [p.id for p in conn.network.ports(fixed_ips=["ip_address=10.10.0.10"])] == [host.id]
    assert [p.id for p in conn.network.ports(device_owner=SUBPORT, name="spare")] == [p.id for p in bulk]
    status, body = service.http(
        "GET", f"/v2.0/ports?name=host-1&name=spare&network_id={net.id}&fields=id&fields=name"
    )
    assert status == 200 and [sorted(p) for p in body["ports"]] == [["id", "name"]] * 4
    status, body = service.http("GET", "/v2.0/ports?tags=mesilla")
    assert [p["id"] for p in body["ports"]] == [host.id]
    status, body = service.http("GET", "/v2.0/ports?not-tags-any=mesilla,other&fields=name")
    assert [p["name"] for p in body["ports"]] == ["", "spare", "spare", "spare"]
    status, body = service.http("GET", "/v2.0/ports?sort_key=name&sort_dir=desc&fields=name")
    assert [p["name"] for p in body["ports"]] == ["spare", "spare", "spare", "host-1", ""]
    status, body = service.http("GET", "/v2.0/ports?colour=red")
    assert status == 400 and body["NeutronError"]["type"] == "HTTPBadRequest"
    paged = list(conn.network.ports(limit=2))
    assert len(paged) == 5

    # Conflicts and not-founds, Neutron-shaped.
    with pytest.raises(sdk_errors.ConflictException) as conflict:
        conn.network.create_port(network_id=net.id, fixed_ips=[{"ip_address": "10.10.0.77"}])
    assert neutron_error(conflict.value) == {
        "type": "IpAddressAlreadyAllocated", "detail": "",
        "message": f"IP address 10.10.0.77 already allocated in subnet {v4.id}"}
    with pytest.raises(sdk_errors.ConflictException) as conflict:
        conn.network.create_port(network_id=net.id, mac_address="fa:16:3e:00:00:01")
    assert neutron_error(conflict.value)["type"] == "MacAddressInUse"
    with pytest.raises(sdk_errors.NotFoundException) as missing:
        conn.network.get_port("5a1c5b0e-0000-4000-8000-000000000000")
    assert neutron_error(missing.value)["type"] == "PortNotFound"
    with pytest.raises(sdk_errors.BadRequestException) as bad:
        conn.network.create_subnet(network_id=net.id, cidr="10.20.0.5/24", ip_version=4)
    assert neutron_error(bad.value)["type"] == "InvalidInput"
    with pytest.raises(sdk_errors.BadRequestException):
        conn.network.create_subnet(network_id=net.id, cidr="10.10.0.0/25", ip_version=4)  # overlaps
    with pytest.raises(sdk_errors.ConflictException) as in_use:
        conn.network.delete_network(net.id)
    assert neutron_error(in_use.value)["type"] == "NetworkInUse"

    # Trunks: the host port is the parent; subports get VLAN IDs per trunk.
    other_host = conn.network.create_port(network_id=net.id, name="host-2", binding_host_id="host-2")
    trunk = conn.network.create_trunk(port_id=host.id, name="trunk-1")
    trunk2 = conn.network.create_trunk(port_id=other_host.id, name="trunk-2")
    assert (trunk.status, trunk.sub_ports) == ("ACTIVE", [])
    a, b, c = bulk
    trunk = conn.network.add_trunk_subports(trunk, [
        {"port_id": a.id, "segmentation_type": "vlan", "segmentation_id": 5},
        {"port_id": b.id, "segmentation_type": "vlan"},  # the lowest free
    ])
    assert [(s["port_id"], s["segmentation_id"]) for s in trunk.sub_ports] == [(a.id, 5), (b.id, 1)]
    conn.network.add_trunk_subports(
        trunk2, [{"port_id": c.id, "segmentation_type": "vlan", "segmentation_id": 5}]
    )
    with pytest.raises(sdk_errors.ConflictException) as duplicate:
        conn.network.add_trunk_subports(trunk, [{"port_id": pinned.id, "segmentation_type": "vlan",
                                                 "segmentation_id": 1}])
    assert neutron_error(duplicate.value)["type"] == "DuplicateSubPort"
    with pytest.raises(sdk_errors.ConflictException) as twice:
        conn.network.add_trunk_subports(trunk, [{"port_id": c.id, "segmentation_type": "vlan"}])
    assert neutron_error(twice.value)["type"] == "PortInUseAsSubPort"
    with pytest.raises(sdk_errors.BadRequestException):
        conn.network.add_trunk_subports(trunk, [{"port_id": pinned.id, "segmentation_type": "vlan",
                                                 "segmentation_id": 4095}])
    assert conn.network.get_trunk_subports(trunk) == {"sub_ports": [
        {"port_id": a.id, "segmentation_type": "vlan", "segmentation_id": 5},
        {"port_id": b.id, "segmentation_type": "vlan", "segmentation_id": 1},
    ]}
    parent = conn.network.get_port(host.id)
    assert parent.trunk_details == {"trunk_id": trunk.id, "sub_ports": [
        {"port_id": a.id, "segmentation_type": "vlan", "segmentation_id": 5, "mac_address": a.mac_address},
        {"port_id": b.id, "segmentation_type": "vlan", "segmentation_id": 1, "mac_address": b.mac_address},
    ]}
    sub = conn.network.get_port(a.id)
    assert (sub.device_owner, sub.device_id, sub.binding_host_id, sub.status) == (
        SUBPORT, trunk.id, "host-1", "ACTIVE")
    with pytest.raises(sdk_errors.ConflictException):
        conn.network.delete_port(a.id)  # still a subport
    with pytest.raises(sdk_errors.NotFoundException) as not_sub:
        conn.network.delete_trunk_subports(trunk, [{"port_id": c.id}])
    assert neutron_error(not_sub.value)["type"] == "SubPortNotFound"
    trunk = conn.network.delete_trunk_subports(trunk, [{"port_id": a.id}])
    assert [s["port_id"] for s in trunk.sub_ports] == [b.id]
    assert conn.network.get_port(a.id).device_id == ""

    # Tear everything down; a deleted port's address is free again.
    conn.network.delete_trunk(trunk)
    conn.network.delete_trunk(trunk2)
    assert list(conn.network.trunks()) == []
    for port in conn.network.ports():
        conn.network.delete_port(port)
    again = conn.network.create_port(network_id=net.id, fixed_ips=[{"ip_address": "10.10.0.77"}])
    conn.network.delete_port(again)
    conn.network.delete_network(net)
    assert list(conn.network.networks()) == [] and list(conn.network.subnets()) == []


def test_concurrent_ports_never_share_an_address(service: Service) -> None:
    conn = service.sdk()
    net = conn.network.create_network(name="hammer")
    subnet = conn.network.create_subnet(network_id=net.id, cidr="10.30.0.0/26", ip_version=4)  # 61 addresses
    local = threading.local()

    def client() -> Any:
        if not hasattr(local, "conn"):
            local.conn = service.sdk()
        return local.conn

    def one(i: int) -> list[str]:
        if i % 5 == 0:
            ports = list(client().network.create_ports([{"network_id": net.id}, {"network_id": net.id}]))
        else:
            ports = [client().network.create_port(network_id=net.id)]
        return [p.fixed_ips[0]["ip_address"] for p in ports]

    with ThreadPoolExecutor(max_workers=8) as pool:
        got = [ip for ips in pool.map(one, range(40)) for ip in ips]
    assert len(got) == 48 and len(set(got)) == 48
    listed = [p.fixed_ips[0]["ip_address"] for p in conn.network.ports(network_id=net.id)]
    assert sorted(listed) == sorted(got)

    # Many asking for the same address at once: exactly one gets it.
    def same(_: int) -> str:
        try:
            client().network.create_port(network_id=net.id,
                                         fixed_ips=[{"subnet_id": subnet.id, "ip_address": "10.30.0.62"}])
            return "created"
        except sdk_errors.ConflictException as exc:
            return str(neutron_error(exc)["type"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = sorted(pool.map(same, range(8)))
    assert outcomes == ["IpAddressAlreadyAllocated"] * 7 + ["created"]


def test_a_killed_service_restarts_with_everything(service: Service) -> None:
    conn = service.sdk()
    net = conn.network.create_network(name="durable")
    subnet = conn.network.create_subnet(network_id=net.id, cidr="10.40.0.0/24", ip_version=4)
    parent = conn.network.create_port(network_id=net.id, binding_host_id="h1")
    subports = list(
        conn.network.create_ports([{"network_id": net.id, "device_owner": SUBPORT} for _ in range(2)])
    )
    trunk = conn.network.create_trunk(port_id=parent.id, sub_ports=[
        {"port_id": subports[0].id, "segmentation_type": "vlan", "segmentation_id": 100}])
    status, minted = service.http("POST", "/v2.0/mesilla/trunk_tokens", {"trunk_id": trunk.id})
    assert status == 201
    before = {c: service.http("GET", f"/v2.0/{c}")[1] for c in ("networks", "subnets", "ports", "trunks")}

    # SIGKILL: whatever was answered must already be on disk.
    service.daemon.kill()
    service.start()
    conn = service.sdk()
    assert {c: service.http("GET", f"/v2.0/{c}")[1] for c in before} == before
    with pytest.raises(sdk_errors.ConflictException):
        conn.network.create_port(
            network_id=net.id, fixed_ips=[{"ip_address": parent.fixed_ips[0]["ip_address"]}]
        )
    fresh = conn.network.create_port(network_id=net.id, fixed_ips=[{"subnet_id": subnet.id}])
    assert fresh.fixed_ips[0]["ip_address"] == "10.40.0.5"
    with pytest.raises(sdk_errors.ConflictException):
        conn.network.add_trunk_subports(trunk, [{"port_id": subports[1].id, "segmentation_type": "vlan",
                                                 "segmentation_id": 100}])
    scoped = service.sdk(minted["token"])
    assert scoped.network.get_trunk_subports(trunk.id)["sub_ports"][0]["segmentation_id"] == 100


def test_trunk_tokens_manage_their_trunk_only(service: Service) -> None:
    admin = service.sdk()
    net = admin.network.create_network(name="scoped")
    subnet = admin.network.create_subnet(network_id=net.id, cidr="10.50.0.0/24", ip_version=4)
    mine = admin.network.create_trunk(port_id=admin.network.create_port(network_id=net.id).id)
    theirs = admin.network.create_trunk(port_id=admin.network.create_port(network_id=net.id).id)
    vm_port = admin.network.create_port(network_id=net.id, device_owner="compute:nova")
    status, minted = service.http("POST", "/v2.0/mesilla/trunk_tokens", {"trunk_id": mine.id})
    assert status == 201 and minted["trunk_id"] == mine.id
    token = minted["token"]
    agent = service.sdk(token)

    # What the agent of that host does for a pod: port, attach, detach, delete.
    port = agent.network.create_port(network_id=net.id, device_owner=SUBPORT, name="pod-1")
    trunk = agent.network.add_trunk_subports(mine.id, [{"port_id": port.id, "segmentation_type": "vlan"}])
    assert trunk.sub_ports == [{"port_id": port.id, "segmentation_type": "vlan", "segmentation_id": 1}]
    assert agent.network.get_trunk_subports(mine.id)["sub_ports"][0]["port_id"] == port.id
    # A port taken from a pool is renamed for its pod; its name is all the agent may change.
    assert agent.network.update_port(port.id, name="mesilla-nested:c1/eth0").name == "mesilla-nested:c1/eth0"
    with pytest.raises(sdk_errors.ForbiddenException):
        agent.network.update_port(port.id, admin_state_up=False)
    agent.network.delete_trunk_subports(mine.id, [{"port_id": port.id}])
    pooled = list(agent.network.create_ports([{"network_id": net.id, "device_owner": SUBPORT}] * 2))
    agent.network.delete_port(port)
    # What it needs to plumb a pod: the network's MTU, the subnet's prefix and gateway.
    assert agent.network.get_network(net.id).mtu == 1500
    assert agent.network.get_subnet(subnet.id).gateway_ip == "10.50.0.1"

    refused: list[Callable[[], object]] = [
        lambda: list(agent.network.subnets()),
        lambda: list(agent.network.networks()),
        lambda: agent.network.get_trunk_subports(theirs.id),
        lambda: agent.network.add_trunk_subports(theirs.id, [{"port_id": pooled[0].id}]),
        lambda: agent.network.add_trunk_subports(mine.id, [{"port_id": vm_port.id}]),
        lambda: agent.network.delete_port(vm_port.id),
        lambda: agent.network.create_port(network_id=net.id, device_owner="compute:nova"),
        lambda: agent.network.create_network(name="nope"),
        lambda: list(agent.network.ports()),
        lambda: agent.network.get_trunk(mine.id),
        lambda: agent.network.delete_trunk(mine.id, ignore_missing=False),
    ]
    for call in refused:
        with pytest.raises(sdk_errors.ForbiddenException) as forbidden:
            call()
        assert neutron_error(forbidden.value)["type"] == "HTTPForbidden"
    status, body = service.http("POST", "/v2.0/mesilla/trunk_tokens", {"trunk_id": theirs.id}, token=token)
    assert status == 403 and body["NeutronError"]["type"] == "HTTPForbidden"
    # A port on another trunk is not the agent's to delete.
    admin.network.add_trunk_subports(theirs.id, [{"port_id": pooled[1].id, "segmentation_type": "vlan"}])
    with pytest.raises(sdk_errors.ForbiddenException):
        agent.network.delete_port(pooled[1].id)
    with pytest.raises(sdk_errors.ForbiddenException):
        agent.network.update_port(pooled[1].id, name="mine-now")
    assert admin.network.get_port(vm_port.id).id == vm_port.id

    # Deleting the trunk revokes the token: it is refused, never taken for an admin's.
    admin.network.delete_trunk(mine)
    with pytest.raises(sdk_errors.ForbiddenException):
        agent.network.create_port(network_id=net.id, device_owner=SUBPORT)
    status, body = service.http("POST", "/v2.0/mesilla/trunk_tokens", {"trunk_id": mine.id})
    assert status == 404 and body["NeutronError"]["type"] == "TrunkNotFound"


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Service]:
    yield from _service(tmp_path, "master", ["--network_service"], "/network/")


def test_the_master_serves_it_at_network(master: Service) -> None:
    conn = master.sdk()
    net = conn.network.create_network(name="on-master")
    conn.network.create_subnet(network_id=net.id, cidr="10.60.0.0/24", ip_version=4)
    port = conn.network.create_port(network_id=net.id)
    assert [p.id for p in conn.network.ports()] == [port.id]
    assert master.http("GET", "/")[1]["versions"][0]["links"][0]["href"] == master.url + "v2.0/"
    conn.network.delete_port(port)
    conn.network.delete_network(net)
    assert list(conn.network.networks()) == []
    # The master's own endpoints are where they were.
    with urllib.request.urlopen(master.url.replace("/network/", "/state"), timeout=30) as state:
        assert json.loads(state.read())["activated_slaves"] == 0
