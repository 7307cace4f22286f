"""Two simulated hosts and the fabric, for nested networking tests and benchmarks (seed 002).

`nested_site(root)` creates three network namespaces: the fabric (the master
with its network service and the fabric's Open vSwitch bridge ``br-fab``,
and a management bridge on 10.251.0.0/24 the agents reach the master over)
and two hosts, each with a trunk NIC ``eth0`` (a veth to a port of
``br-fab``), a management veth, and its own `mesilla agent` with its own
Open vSwitch. It provisions what an operator would: networks A and B on the
same CIDR, a trunk and a trunk token per host, and each host's CNI
configurations (`nested-a`, `nested-b`, type `mesilla-nested`). The calling
thread runs in the fabric's namespace until the block ends; then every
daemon, Open vSwitch, mount and namespace it made is gone, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from mesilla.network.ovs import OvsInstance
from mesilla.testing.netns import entered, network_namespace, release_namespace_mounts
from mesilla.testing.processes import Cluster, http_json

MASTER_IP = "10.251.0.1"
AGENT_IPS = ["10.251.0.10", "10.251.0.11"]
CIDR = "10.30.0.0/24"
GATEWAY = "10.30.0.1"
MTU = 1450


class NestedSite:
    def __init__(self, root: Path, fabric: str, hosts: list[str], agent_flags: list[str]) -> None:
        self.root = root
        self.fabric = fabric
        self.hosts = hosts
        self.cluster = Cluster(
            root / "cluster", num_agents=len(hosts), master_ip=MASTER_IP, agent_ips=AGENT_IPS[: len(hosts)],
            master_flags=[
                "--network_service", "--fabric_bridge=br-fab", f"--fabric_ovs_dir={root / 'fabric-ovs'}",
            ],
            agent_flags=[
                "--launcher=linux", "--isolation=filesystem/linux,posix/cpu,posix/mem,network/cni",
                "--resources=cpus:8;mem:8192;disk:8192;ports:[31000-32000]",
                f"--network_cni_plugins_dir=/usr/lib/cni:{Path(sys.executable).parent}",
                "--network_trunk_nic=eth0", "--executor_reregistration_timeout=10secs", *agent_flags,
            ],
        )  # fmt: skip
        self.networks: dict[str, str] = {}  # "a"/"b" -> network id
        self.trunks: list[str] = []
        self.extra: list[list[str]] = []  # each agent's own flags

    @property
    def service_url(self) -> str:
        return f"{self.cluster.master_url}/network/"

    def call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """The network service as an admin (GET, or POST `body`)."""
        return http_json(self.service_url + path, body)

    def ovs(self, i: int) -> OvsInstance:
        return OvsInstance(str(self.cluster.runtime_dir(i) / "network/ovs"))

    def fabric_ovs(self) -> OvsInstance:
        return OvsInstance(str(self.root / "fabric-ovs"))

    def socket(self, i: int) -> str:
        return str(self.cluster.runtime_dir(i) / "nested.sock")

    def cni_config(self, i: int, network: str) -> dict[str, Any]:
        return {"cniVersion": "1.0.0", "name": f"nested-{network}", "type": "mesilla-nested",
                "network_id": self.networks[network], "agent_socket": self.socket(i)}  # fmt: skip

    def start_agent(self, i: int, *flags: str) -> None:
        started = time.time()
        with entered(self.hosts[i]):
            self.cluster.agents[i].start(*self.extra[i], *flags)
        self.cluster.await_agent_active(i, after=started)

    def restart_agent(self, i: int, *flags: str) -> None:
        self.cluster.agents[i].stop()
        self.start_agent(i, *flags)

    def wire(self) -> None:
        """Trunk NICs to br-fab's ports, management veths to the fabric's bridge."""
        with IPRoute(netns=self.fabric, flags=0) as ipr:
            ipr.link("add", ifname="mgmt0", kind="bridge")
            bridge = ipr.link_lookup(ifname="mgmt0")[0]
            ipr.addr("add", index=bridge, address=MASTER_IP, prefixlen=24)
            ipr.link("set", index=bridge, state="up")
        for i, host in enumerate(self.hosts):
            veth(host, "eth0", self.fabric, f"t-h{i}")
            veth(host, "mgmt", self.fabric, f"m-h{i}")
            with IPRoute(netns=self.fabric, flags=0) as ipr:
                for name in (f"t-h{i}", f"m-h{i}"):
                    ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
                ipr.link("set", index=ipr.link_lookup(ifname=f"m-h{i}")[0], master=bridge)
            with IPRoute(netns=host, flags=0) as ipr:
                mgmt = ipr.link_lookup(ifname="mgmt")[0]
                ipr.addr("add", index=mgmt, address=AGENT_IPS[i], prefixlen=24)
                ipr.link("set", index=mgmt, state="up")

    def provision(self) -> None:
        """What an operator does: networks, each host's trunk and token, the CNI configurations."""
        for name in ("a", "b"):
            net = self.call("v2.0/networks", {"network": {"name": f"net-{name}", "mtu": MTU}})["network"]
            self.call("v2.0/subnets", {"subnet": {"network_id": net["id"], "cidr": CIDR, "ip_version": 4,
                                                  "gateway_ip": GATEWAY}})  # fmt: skip
            self.networks[name] = net["id"]
        infra = self.call("v2.0/networks", {"network": {"name": "hosts"}})["network"]
        self.call(
            "v2.0/subnets", {"subnet": {"network_id": infra["id"], "cidr": "10.252.0.0/24", "ip_version": 4}}
        )
        for i in range(len(self.hosts)):
            parent = self.call("v2.0/ports", {"port": {
                "network_id": infra["id"], "name": f"host-{i}", "binding:host_id": f"host-{i}",
                "binding:profile": {"fabric_port": f"t-h{i}"},
            }})["port"]  # fmt: skip
            trunk = self.call("v2.0/trunks", {"trunk": {"port_id": parent["id"], "name": f"trunk-{i}"}})[
                "trunk"
            ]
            self.trunks.append(trunk["id"])
            token = self.call("v2.0/mesilla/trunk_tokens", {"trunk_id": trunk["id"]})["token"]
            token_file = self.root / f"token-{i}"
            token_file.write_text(token)
            token_file.chmod(0o600)
            config_dir = self.root / f"cni-{i}"
            config_dir.mkdir()
            for name in self.networks:
                (config_dir / f"nested-{name}.conf").write_text(json.dumps(self.cni_config(i, name)))
            self.extra.append([
                f"--network_service_url={self.service_url}", f"--network_trunk_id={trunk['id']}",
                f"--network_trunk_token={token_file}", f"--network_cni_config_dir={config_dir}",
            ])  # fmt: skip

    def stop(self) -> None:
        self.cluster.cleanup()
        for i in range(len(self.hosts)):
            self.ovs(i).stop()
        self.fabric_ovs().stop()


def veth(ns_a: str, name_a: str, ns_b: str, name_b: str) -> None:
    """A veth pair between two namespaces, made under temporary names (eth0 is the host's own)."""
    temporary = {ns_a: f"nt{uuid.uuid4().hex[:10]}", ns_b: f"nt{uuid.uuid4().hex[:10]}"}
    with IPRoute() as ipr:
        ipr.link("add", ifname=temporary[ns_a], kind="veth", peer=temporary[ns_b])
        for ns in (ns_a, ns_b):
            ipr.link("set", index=ipr.link_lookup(ifname=temporary[ns])[0], net_ns_fd=ns)
    for ns, name in ((ns_a, name_a), (ns_b, name_b)):
        with IPRoute(netns=ns, flags=0) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname=temporary[ns])[0], ifname=name)


@contextlib.contextmanager
def nested_site(root: Path, agent_flags: list[str] | None = None) -> Iterator[NestedSite]:
    with contextlib.ExitStack() as stack:
        fabric = stack.enter_context(network_namespace("mesilla-fab"))
        hosts = [stack.enter_context(network_namespace(f"mesilla-h{i}")) for i in range(2)]
        site = NestedSite(root, fabric, hosts, agent_flags or [])
        try:
            site.wire()
            with entered(fabric):
                site.cluster.start_master()
                site.provision()
                for i in range(len(hosts)):
                    site.start_agent(i)
                yield site
        finally:
            site.stop()
            release_namespace_mounts(str(root))
