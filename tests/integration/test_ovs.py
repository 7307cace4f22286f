"""A private Open vSwitch, started and stopped by Mesilla inside a namespace the test creates."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from mesilla.network.ovs import OvsInstance, kernel_datapath
from mesilla.testing.netns import entered, network_namespace

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
