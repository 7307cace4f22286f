"""The `mesilla-nested` CNI plugin run by hand against a real agent and network service.

One network namespace the module creates holds the master (with the network
service), one agent whose trunk NIC is a veth there, and the agent's Open
vSwitch; each test makes its pod namespaces itself. The plugin runs as the
network/cni isolator runs it: a configuration on stdin, CNI_* variables.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openstack
import pytest
from pyroute2 import IPRoute

from mesilla.network.nested import plugin
from mesilla.network.nested.plumbing import PlumbingError, probe_vlan
from mesilla.network.ovs import OvsInstance
from mesilla.testing.netns import entered, network_namespace, run_in
from mesilla.testing.processes import Cluster, Daemon, http_json

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.filterwarnings("ignore::Warning:openstack"),
    pytest.mark.skipif(shutil.which("ovs-vswitchd") is None, reason="needs openvswitch-switch"),
]

PLUGIN = str(Path(sys.executable).parent / "mesilla-nested")
SUBPORT = "trunk:subport"


class Host:
    def __init__(self, root: Path, namespace: str) -> None:
        self.root = root
        self.namespace = namespace
        self.cluster = Cluster(root / "cluster", master_flags=["--network_service"],
                               agent_flags=["--network_trunk_nic=trunk0"])  # fmt: skip
        self.network_id = ""
        self.trunk_id = ""
        self.extra: list[str] = []

    @property
    def url(self) -> str:
        return f"{self.cluster.master_url}/network/"

    @property
    def socket(self) -> str:
        return str(self.cluster.runtime_dir() / "nested.sock")

    def sdk(self) -> Any:
        return openstack.connection.Connection(auth_type="none", network_endpoint_override=self.url)

    def ovs(self) -> OvsInstance:
        return OvsInstance(str(self.cluster.runtime_dir() / "network/ovs"))

    def conf(self, version: str = "1.0.0", **changes: Any) -> dict[str, Any]:
        return {"cniVersion": version, "name": "nested", "type": "mesilla-nested",
                "network_id": self.network_id, "agent_socket": self.socket, **changes}  # fmt: skip

    def subports(self) -> list[dict[str, Any]]:
        doc = http_json(f"{self.url}v2.0/trunks/{self.trunk_id}/get_subports")
        subs: list[dict[str, Any]] = doc["sub_ports"]
        return subs

    def pod_ports(self) -> list[dict[str, Any]]:
        ports: list[dict[str, Any]] = http_json(f"{self.url}v2.0/ports?device_owner={SUBPORT}")["ports"]
        return ports

    def pod_links(self) -> list[str]:
        return [p for p in self.ovs().ports("br-trunk") if p != "trunk0"]

    def bindings(self) -> list[str]:
        directory = self.cluster.agent_dir() / "network/nested"
        return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []

    def leftovers(self) -> list[str]:
        left = [f"subport {s['port_id']}" for s in self.subports()]
        left += [f"port {p['id']}" for p in self.pod_ports()]
        left += [f"ovs port {p}" for p in self.pod_links()]
        with IPRoute() as ipr:
            left += [f"link {n}" for link in ipr.link("dump")
                     if (n := link.get("IFLA_IFNAME")).startswith(("mn", "mt", "mp"))]  # fmt: skip
        left += [f"binding {b}" for b in self.bindings()]
        return left

    def restart_agent(self, *flags: str) -> None:
        started = time.time()
        self.cluster.agents[0].stop()
        self.cluster.agents[0].start(*self.extra, *flags)
        self.cluster.await_agent_active(0, after=started)

    def pooled(self) -> set[str]:
        """Port ids of the pool's ready subports (the agent's pooled bindings)."""
        directory = self.cluster.agent_dir() / "network/nested"
        docs = [json.loads(p.read_text()) for p in directory.glob("pool%2F*.json")]
        return {d["port_id"] for d in docs if d["state"] == "pooled"}

    def await_pooled(self, count: int) -> set[str]:
        for _ in range(300):
            if len(pooled := self.pooled()) == count:
                return pooled
            time.sleep(0.05)
        raise AssertionError(f"the pool holds {self.pooled()}, not {count} subports")

    def await_port_name(self, port_id: str, name: str) -> None:
        for _ in range(300):
            if http_json(f"{self.url}v2.0/ports/{port_id}")["port"]["name"] == name:
                return
            time.sleep(0.05)
        raise AssertionError(f"port {port_id} is not named {name}")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    root = tmp_path_factory.mktemp("nested-plugin")
    with network_namespace() as namespace, entered(namespace):
        state = Host(root, namespace)
        try:
            with IPRoute() as ipr:
                ipr.link("add", ifname="trunk0", kind="veth", peer="fab0")
                for name in ("trunk0", "fab0"):
                    ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
            state.cluster.start_master()
            conn = state.sdk()
            net = conn.network.create_network(name="pods", mtu=1400)
            conn.network.create_subnet(network_id=net.id, cidr="10.40.0.0/24", ip_version=4)
            state.network_id = net.id
            infra = conn.network.create_network(name="hosts")
            conn.network.create_subnet(network_id=infra.id, cidr="10.41.0.0/24", ip_version=4)
            parent = conn.network.create_port(network_id=infra.id, binding_host_id="host-0")
            state.trunk_id = conn.network.create_trunk(port_id=parent.id).id
            token = http_json(f"{state.url}v2.0/mesilla/trunk_tokens", {"trunk_id": state.trunk_id})["token"]
            (root / "token").write_text(token)
            state.extra = [f"--network_service_url={state.url}", f"--network_trunk_id={state.trunk_id}",
                           f"--network_trunk_token={root / 'token'}"]  # fmt: skip
            state.cluster.agents[0].start(*state.extra)
            state.cluster.await_agent_active(0)
            yield state
        finally:
            state.cluster.cleanup()
            state.ovs().stop()


@pytest.fixture
def pod(host: Host) -> Iterator[str]:
    with network_namespace("mesilla-pod") as name:
        yield f"/run/netns/{name}"


def cni(command: str, conf: dict[str, Any], netns: str, container: str = "ctr-1",
        ifname: str = "eth0") -> tuple[int, Any]:  # fmt: skip
    env = {"PATH": os.environ["PATH"], "CNI_COMMAND": command, "CNI_CONTAINERID": container,
           "CNI_NETNS": netns, "CNI_IFNAME": ifname, "CNI_PATH": str(Path(PLUGIN).parent)}  # fmt: skip
    done = subprocess.run(
        [PLUGIN], input=json.dumps(conf), capture_output=True, text=True, env=env, timeout=60
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None


def test_add_plumbs_the_subport_and_del_releases_it(host: Host, pod: str) -> None:
    rc, result = cni("ADD", host.conf(), pod)
    assert rc == 0, result
    [port] = host.pod_ports()
    [sub] = host.subports()
    assert sub["port_id"] == port["id"] and sub["segmentation_id"] == 1
    ip = port["fixed_ips"][0]["ip_address"]
    assert result == {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": port["mac_address"], "sandbox": pod}],
        "ips": [{"interface": 0, "address": f"{ip}/24", "gateway": "10.40.0.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.40.0.1"}], "dns": {},
    }  # fmt: skip
    link = run_in(pod, "ip", "-o", "link", "show", "eth0").stdout
    assert f"link/ether {port['mac_address']}" in link and "mtu 1400" in link
    assert f"inet {ip}/24" in run_in(pod, "ip", "-o", "-4", "addr", "show", "eth0").stdout
    assert "default via 10.40.0.1 dev eth0" in run_in(pod, "ip", "route").stdout
    # The host end is an access port of the trunk bridge, tagged with the subport's VLAN ID.
    [link_name] = host.pod_links()
    assert host.ovs().vsctl("get", "port", link_name, "tag").strip() == "1"
    assert host.ovs().vsctl("get", "port", "trunk0", "vlan_mode").strip() == "trunk"
    assert cni("CHECK", host.conf(), pod)[0] == 0

    # ADD again: the same port, the interface kept.
    rc, again = cni("ADD", host.conf(), pod)
    assert rc == 0 and again == result
    assert [p["id"] for p in host.pod_ports()] == [port["id"]]

    assert cni("DEL", host.conf(), pod) == (0, None)
    assert host.leftovers() == []
    assert "eth0" not in run_in(pod, "ip", "-o", "link").stdout
    assert cni("DEL", host.conf(), pod) == (0, None)  # DEL again, and DEL of what never was
    assert cni("DEL", host.conf(), pod, container="never-added") == (0, None)
    assert cni("CHECK", host.conf(), pod)[0] == 1


def test_results_follow_the_configurations_version(host: Host, pod: str) -> None:
    rc, result = cni("ADD", host.conf("0.2.0"), pod, container="old")
    assert rc == 0, result
    assert set(result) == {"cniVersion", "ip4", "dns"} and result["ip4"]["gateway"] == "10.40.0.1"
    assert cni("DEL", host.conf("0.2.0"), pod, container="old")[0] == 0
    rc, result = cni("ADD", host.conf("0.4.0"), pod, container="four")
    assert rc == 0 and result["ips"][0]["version"] == "4"
    assert cni("DEL", host.conf("0.4.0"), pod, container="four")[0] == 0
    assert host.leftovers() == []


def test_a_broken_add_is_repaired_by_add_and_released_by_del(host: Host, pod: str) -> None:
    assert cni("ADD", host.conf(), pod)[0] == 0
    [port] = host.pod_ports()
    run_in(pod, "ip", "link", "del", "eth0")  # takes the host end with it: half of an ADD
    rc, result = cni("ADD", host.conf(), pod)
    assert rc == 0 and result["interfaces"][0]["mac"] == port["mac_address"]
    assert f"link/ether {port['mac_address']}" in run_in(pod, "ip", "-o", "link", "show", "eth0").stdout
    assert len(host.pod_links()) == 1
    # Now the host end only goes: DEL still removes the rest.
    host.ovs().delete_port("br-trunk", host.pod_links()[0])
    assert cni("DEL", host.conf(), pod)[0] == 0
    assert host.leftovers() == []


def test_bad_configurations_and_networks_are_refused(host: Host, pod: str) -> None:
    rc, error = cni("ADD", {k: v for k, v in host.conf().items() if k != "network_id"}, pod)
    assert rc == 1 and error["code"] == 7 and "network_id" in error["msg"]
    rc, error = cni("ADD", host.conf(network_id="no-such-network"), pod)
    assert rc == 1 and error["code"] == 7 and "not a valid UUID" in error["msg"], error
    rc, error = cni("ADD", host.conf(network_id="0b5c8f4e-0000-4000-8000-000000000000"), pod)
    assert rc == 1 and error["code"] == 7 and "404" in error["msg"], error
    rc, error = cni("ADD", host.conf(agent_socket="/nonexistent.sock"), pod)
    assert rc == 1 and error["code"] == 11
    rc, error = cni("ADD", host.conf("9.9.9"), pod)
    assert rc == 1 and error["code"] == 1
    assert cni("ADD", host.conf(), "/run/netns/no-such-pod")[0] == 1
    rc, error = cni("GC", host.conf(), pod)
    assert rc == 1 and error["code"] == 4 and "GC" in error["msg"]
    rc, error = cni("ADD", {**host.conf(), "agent_socket": 5}, pod)
    assert rc == 1 and error["code"] == 7 and "agent_socket" in error["msg"]
    # What reaches the agent's socket is checked there too: a CNI error object, never a 500.
    for body in (b"nope", b"[]", b'{"command": "ADD", "config": {"network_id": "n"}}'):
        status, answer = plugin.forward(host.socket, body)
        assert status == 400 and json.loads(answer)["code"] in (4, 7), answer
    assert host.leftovers() == []


def test_a_restarted_agent_releases_what_a_crash_left(host: Host, pod: str) -> None:
    # An attach whose answer never came (the agent died between its two records) ...
    conn = host.sdk()
    pending = conn.network.create_port(network_id=host.network_id, device_owner=SUBPORT)
    directory = host.cluster.agent_dir() / "network/nested"
    (directory / "crashed%2Feth0.json").write_text(json.dumps({
        "state": "pending", "container": "crashed", "ifname": "eth0",
        "network_id": host.network_id, "port_id": pending.id,
    }))  # fmt: skip
    # ... and a subport of its trunk that no binding names.
    stray = conn.network.create_port(network_id=host.network_id, device_owner=SUBPORT)
    conn.network.add_trunk_subports(host.trunk_id, [{"port_id": stray.id, "segmentation_type": "vlan"}])
    # A live attachment survives the restart.
    assert cni("ADD", host.conf(), pod, container="live")[0] == 0
    [live] = [s["port_id"] for s in host.subports() if s["port_id"] != stray.id]

    host.restart_agent()
    assert [s["port_id"] for s in host.subports()] == [live]
    assert [p["id"] for p in host.pod_ports()] == [live]
    assert cni("CHECK", host.conf(), pod, container="live")[0] == 0
    assert cni("DEL", host.conf(), pod, container="live")[0] == 0
    assert host.leftovers() == []


def test_a_pool_keeps_ready_subports_that_attach_without_the_service(host: Host, pod: str) -> None:
    host.restart_agent("--network_nested_pool_size=2")
    try:
        rc, result = cni("ADD", host.conf(), pod, container="first")  # the network's first: no pool yet
        assert rc == 0, result
        pooled = host.await_pooled(2)
        assert pooled <= {s["port_id"] for s in host.subports()}
        with network_namespace("mesilla-pod") as second:
            rc, result = cni("ADD", host.conf(), f"/run/netns/{second}", container="second")
            assert rc == 0, result
            [taken] = [p for p in host.pod_ports() if p["mac_address"] == result["interfaces"][0]["mac"]]
            assert taken["id"] in pooled  # from the pool ...
            refilled = host.await_pooled(2)  # ... which fills up again in the background
            assert taken["id"] not in refilled
            # Pools are bindings: a restarted agent has the same one.
            host.restart_agent("--network_nested_pool_size=2")
            assert host.pooled() == refilled
            assert cni("DEL", host.conf(), f"/run/netns/{second}", container="second")[0] == 0
        assert cni("DEL", host.conf(), pod, container="first")[0] == 0
        assert {s["port_id"] for s in host.subports()} == refilled
    finally:
        host.restart_agent()  # no pool: drained
    assert host.pooled() == set()
    assert host.leftovers() == []


def test_deleting_a_network_drains_its_pools(host: Host, pod: str) -> None:
    conn = host.sdk()
    net = conn.network.create_network(name="doomed", mtu=1400)
    conn.network.create_subnet(network_id=net.id, cidr="10.42.0.0/24", ip_version=4)
    conf = host.conf(network_id=net.id)
    host.restart_agent("--network_nested_pool_size=2")
    try:
        assert cni("ADD", conf, pod, container="first")[0] == 0  # the network's first fills its pool
        pooled = host.await_pooled(2)
        with network_namespace("mesilla-pod") as second:
            rc, result = cni("ADD", conf, f"/run/netns/{second}", container="second")
            assert rc == 0, result
            [taken] = [p for p in host.pod_ports() if p["mac_address"] == result["interfaces"][0]["mac"]]
            assert taken["id"] in pooled
            # Renamed for its pod in the background: no longer a pooled port, it holds the network.
            host.await_port_name(taken["id"], "mesilla-nested:second/eth0")
            host.await_pooled(2)
            with pytest.raises(openstack.exceptions.ConflictException):
                conn.network.delete_network(net.id)
            assert cni("DEL", conf, f"/run/netns/{second}", container="second")[0] == 0
        assert cni("DEL", conf, pod, container="first")[0] == 0
        # Only pooled subports are left: they go with the network, and the agent forgets them
        # (and their veths) at its next look at its trunk.
        conn.network.delete_network(net.id)
        assert host.subports() == [] and host.pod_ports() == []
        host.await_pooled(0)
        assert host.leftovers() == []

        # Taken off the trunk while the agent is down (by an admin): the restarted agent
        # releases them.
        host.restart_agent("--network_nested_pool_size=2")
        assert cni("ADD", host.conf(), pod, container="third")[0] == 0
        host.await_pooled(2)
        assert cni("DEL", host.conf(), pod, container="third")[0] == 0
        host.cluster.agents[0].stop()
        for port_id in host.pooled():
            conn.network.delete_trunk_subports(host.trunk_id, [{"port_id": port_id}])
        host.restart_agent("--network_nested_pool_size=2")
        assert host.pooled() == set()
    finally:
        host.restart_agent()
    assert host.leftovers() == []


def test_pools_outlive_a_master_restart(host: Host, pod: str) -> None:
    host.restart_agent("--network_nested_pool_size=2")
    try:
        assert cni("ADD", host.conf(), pod, container="first")[0] == 0
        pooled = host.await_pooled(2)
        host.cluster.master.stop()
        host.cluster.start_master()
        assert pooled <= {s["port_id"] for s in host.subports()}  # the book has them back
        with network_namespace("mesilla-pod") as second:
            rc, result = cni("ADD", host.conf(), f"/run/netns/{second}", container="second")
            assert rc == 0, result
            [taken] = [p for p in host.pod_ports() if p["mac_address"] == result["interfaces"][0]["mac"]]
            assert taken["id"] in pooled
            host.await_port_name(taken["id"], "mesilla-nested:second/eth0")
            assert host.await_pooled(2) <= {s["port_id"] for s in host.subports()}
            assert cni("DEL", host.conf(), f"/run/netns/{second}", container="second")[0] == 0
        assert cni("DEL", host.conf(), pod, container="first")[0] == 0
    finally:
        host.restart_agent()
    assert host.leftovers() == []


def refused_start(host: Host, tmp_path: Path, *flags: str) -> str:
    """The log of an agent with `flags` that must refuse to start."""
    agent = Daemon("agent", [
        "--ip=127.0.0.1", "--port=0", f"--master={host.cluster.master_address}",
        f"--work_dir={tmp_path / 'w'}", f"--runtime_dir={tmp_path / 'r'}", *host.extra, *flags,
    ], tmp_path / "agent.log")  # fmt: skip
    agent.start()
    try:
        assert agent.wait_exit(60) != 0
    finally:
        agent.stop()
    log = agent.log_tail()
    assert "Traceback" not in log, log
    return log


def test_an_agent_without_its_trunk_nic_refuses_to_start(host: Host, tmp_path: Path) -> None:
    log = refused_start(host, tmp_path, "--network_trunk_nic=nosuchnic0")
    assert "Nested networking cannot start on --network_trunk_nic=nosuchnic0" in log, log


def test_the_backend_is_chosen_by_probing_the_kernel(host: Host, tmp_path: Path) -> None:
    with network_namespace() as namespace, entered(namespace):
        with IPRoute() as ipr:
            ipr.link("add", ifname="probe0", kind="veth", peer="probe1")
        # What iproute2 says about 802.1Q here, against what the probe finds (and leaves).
        vlan = ["ip", "link", "add", "link", "probe0", "name", "pv5", "type", "vlan", "id", "5"]
        made = subprocess.run(vlan, capture_output=True, check=False).returncode == 0
        assert probe_vlan("probe0") is made
        with IPRoute() as ipr:
            names = {link.get("IFLA_IFNAME") for link in ipr.link("dump")}
        assert names == {"lo", "probe0", "probe1", *(["pv5"] if made else [])}
        with pytest.raises(PlumbingError, match="nosuchnic0"):
            probe_vlan("nosuchnic0")
    # The agent (--network_nested_backend=auto) went by the probe.
    chosen = "vlan" if made else "ovs"
    assert f"({chosen} backend)" in host.cluster.agents[0].log_path.read_text()
    if not made:
        log = refused_start(host, tmp_path, "--network_trunk_nic=trunk0", "--network_nested_backend=vlan")
        assert "The vlan backend needs 802.1Q, which this kernel lacks" in log, log
