"""A private Open vSwitch, started and stopped by Mesilla inside a namespace the test creates,
and the network service's fabric bridge following the book."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from mesilla.network.ovs import PACKET_RECEIVE_BUFFER, OvsInstance, kernel_datapath
from mesilla.testing.cluster import free_port
from mesilla.testing.netns import entered, network_namespace, run_in
from mesilla.testing.processes import Daemon, answers, http_json

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(shutil.which("ovs-vswitchd") is None, reason="needs openvswitch-switch"),
]


@pytest.fixture
def ovs(tmp_path: Path) -> Iterator[tuple[OvsInstance, str]]:
    with network_namespace() as namespace, entered(namespace):
        instance = OvsInstance(str(tmp_path / "ovs"))
        try:
            instance.start()
            yield instance, namespace
        finally:
            instance.stop()


def test_bridge_ports_and_flows(ovs: tuple[OvsInstance, str]) -> None:
    instance, namespace = ovs
    instance.add_bridge("br-test", "fail_mode=secure")
    datapath = instance.vsctl("get", "bridge", "br-test", "datapath_type").strip()
    assert datapath == ("system" if kernel_datapath() else "netdev")
    with IPRoute() as ipr:
        ipr.link("add", ifname="ovt-a", kind="veth", peer="ovt-b")
        ipr.link("set", index=ipr.link_lookup(ifname="ovt-a")[0], state="up")
    instance.add_port("br-test", "ovt-a", "tag=7")
    assert instance.ports("br-test") == ["ovt-a"]
    assert instance.vsctl("get", "port", "ovt-a", "tag").strip() == "7"
    number = instance.ofport("ovt-a")
    assert number is not None and number > 0
    if datapath == "netdev":  # the port is an AF_PACKET socket of ovs-vswitchd, its buffer widened
        sockets = run_in(namespace, "ss", "-0", "-m", "-n", "-p").stdout
        [line] = [line for line in sockets.splitlines() if "*:ovt-a" in line]
        assert "ovs-vswitchd" in line and f"rb{2 * PACKET_RECEIVE_BUFFER}," in line, sockets
    assert instance.ofport("nothing") is None
    instance.replace_flows("br-test", [f"table=0,priority=10,in_port={number},actions=drop",
                                       "table=0,priority=0,actions=drop"])
    flows = instance.ofctl("dump-flows", "br-test", "--no-stats")
    assert f"in_port={number}" in flows or "in_port=ovt-a" in flows
    instance.replace_flows("br-test", ["table=0,priority=0,actions=drop"])
    assert "in_port" not in instance.ofctl("dump-flows", "br-test", "--no-stats")
    instance.delete_port("br-test", "ovt-a")
    instance.delete_port("br-test", "ovt-a")  # twice: --if-exists
    assert instance.ports("br-test") == []


def test_start_keeps_a_running_instance_and_stop_ends_it(ovs: tuple[OvsInstance, str]) -> None:
    instance, _ = ovs
    pids = instance.pids()
    assert set(pids) == {"ovsdb-server", "ovs-vswitchd"}
    instance.add_bridge("br-kept")
    OvsInstance(instance.directory).start()  # a restarted agent: same daemons, same bridge
    assert instance.pids() == pids
    assert "br-kept" in instance.vsctl("list-br").split()
    instance.stop()
    assert instance.pids() == {} and not instance.running


def test_mesilla_network_keeps_its_fabric_bridge_equal_to_the_book(tmp_path: Path) -> None:
    with network_namespace() as namespace, entered(namespace):
        with IPRoute() as ipr:
            ipr.link("add", ifname="t-host", kind="veth", peer="h-trunk")
            for name in ("t-host", "h-trunk"):
                ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        fabric = OvsInstance(str(tmp_path / "fabric-ovs"))
        daemon = Daemon(
            "network",
            [
                f"--port={port}",
                f"--work_dir={tmp_path / 'work'}",
                "--fabric_bridge=br-fab",
                f"--fabric_ovs_dir={fabric.directory}",
            ],
            tmp_path / "network.log",
        )
        try:
            daemon.start()
            daemon.await_ready(lambda: answers(url), "an answer to GET /")
            net = http_json(url + "v2.0/networks", {"network": {"name": "a"}})["network"]
            http_json(
                url + "v2.0/subnets",
                {"subnet": {"network_id": net["id"], "cidr": "10.9.0.0/24", "ip_version": 4}},
            )
            parent = http_json(url + "v2.0/ports", {"port": {
                "network_id": net["id"], "binding:profile": {"fabric_port": "t-host"}}})["port"]  # fmt: skip
            trunk = http_json(url + "v2.0/trunks", {"trunk": {"port_id": parent["id"]}})["trunk"]
            sub = http_json(
                url + "v2.0/ports", {"port": {"network_id": net["id"], "device_owner": "trunk:subport"}}
            )["port"]
            request = urllib.request.Request(
                f"{url}v2.0/trunks/{trunk['id']}/add_subports", method="PUT",
                data=json.dumps({"sub_ports": [{"port_id": sub["id"], "segmentation_type": "vlan",
                                                "segmentation_id": 42}]}).encode(),
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            urllib.request.urlopen(request, timeout=10).close()
            wanted = f"dl_vlan=42,dl_src={sub['mac_address']},nw_src={sub['fixed_ips'][0]['ip_address']}"

            def flows() -> str:
                return fabric.ofctl("dump-flows", "br-fab", "--no-stats") if fabric.running else ""

            daemon.await_ready(lambda: wanted in flows(), "the subport's flows on br-fab", 30)
            assert fabric.ports("br-fab") == ["t-host"]
            assert fabric.vsctl("get", "bridge", "br-fab", "fail_mode").strip() == "secure"
            urllib.request.urlopen(
                urllib.request.Request(url + f"v2.0/trunks/{trunk['id']}", method="DELETE"), timeout=10
            ).close()
            daemon.await_ready(lambda: "dl_vlan=42" not in flows() and fabric.ports("br-fab") == [],
                               "the trunk's flows and port gone", 30)  # fmt: skip
        finally:
            daemon.stop()
            fabric.stop()
