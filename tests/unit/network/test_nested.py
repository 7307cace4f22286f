"""The host side's decisions that need no kernel: backends, names, CNI results and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mesilla.common.flags import FlagError
from mesilla.network.nested import plugin, plumbing

BINDING = {
    "state": "attached",
    "port_id": "1b98e153-409a-4c1e-9f1e-000000000001",
    "mac_address": "fa:16:3e:00:00:01",
    "segmentation_id": 7,
    "mtu": 1450,
    "addresses": [
        {"address": "10.30.0.2/24", "gateway": "10.30.0.1"},
        {"address": "fd00::2/64", "gateway": None},
    ],
}


def test_the_backend_follows_the_kernel_or_the_flag() -> None:
    assert plumbing.choose("auto", vlan_supported=False) == "ovs"
    assert plumbing.choose("auto", vlan_supported=True) == "vlan"
    assert plumbing.choose("ovs", vlan_supported=True) == "ovs"
    assert plumbing.choose("vlan", vlan_supported=True) == "vlan"
    with pytest.raises(ValueError, match="lacks"):
        plumbing.choose("vlan", vlan_supported=False)
    with pytest.raises(ValueError, match="Unknown backend"):
        plumbing.choose("macvlan", vlan_supported=True)


def test_plumbing_comes_from_the_agents_answer() -> None:
    ovs = plumbing.from_host(
        {"backend": "ovs", "ovs_dir": "/run/x/ovs", "bridge": "br-trunk", "trunk_nic": "eth0"}
    )
    assert (
        isinstance(ovs, plumbing.OvsPlumbing)
        and ovs.bridge == "br-trunk"
        and ovs.ovs.directory == "/run/x/ovs"
    )
    vlan = plumbing.from_host({"backend": "vlan", "trunk_nic": "ens3"})
    assert isinstance(vlan, plumbing.VlanPlumbing) and vlan.trunk_nic == "ens3"
    with pytest.raises(plumbing.PlumbingError):
        plumbing.from_host({"backend": "sriov"})


def test_host_names_fit_ifnamsiz() -> None:
    vif = plumbing.Vif.from_json(BINDING)
    assert vif.host_name == "mn1b98e153409" and len(vif.host_name) <= 15
    assert vif.addresses[0].interface.network.prefixlen == 24


def test_results_per_cni_version() -> None:
    current = plugin.result("1.0.0", BINDING, "eth0", "/run/netns/p", "fa:16:3e:00:00:01")
    assert current["interfaces"] == [{"name": "eth0", "mac": "fa:16:3e:00:00:01", "sandbox": "/run/netns/p"}]
    assert current["ips"] == [{"interface": 0, "address": "10.30.0.2/24", "gateway": "10.30.0.1"},
                              {"interface": 0, "address": "fd00::2/64"}]
    assert current["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.30.0.1"}]
    assert [ip["version"] for ip in plugin.result("0.3.1", BINDING, "eth0", "/p", "m")["ips"]] == ["4", "6"]
    old = plugin.result("0.2.0", BINDING, "eth0", "/p", "m")
    assert old == {"cniVersion": "0.2.0", "dns": {},
                   "ip4": {"ip": "10.30.0.2/24", "gateway": "10.30.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
                   "ip6": {"ip": "fd00::2/64"}}  # fmt: skip


def test_configurations_are_checked() -> None:
    good = {
        "cniVersion": "1.0.0",
        "name": "n",
        "type": "mesilla-nested",
        "network_id": "x",
        "agent_socket": "/s",
    }
    assert plugin._config(json.dumps(good)) == good
    for bad, code in (("nope", 7), ("[]", 7), ('{"cniVersion": "1.0.0", "agent_socket": "/s"}', 7),
                      ('{"cniVersion": "2.0.0", "network_id": "x", "agent_socket": "/s"}', 1)):  # fmt: skip
        with pytest.raises(plugin.CniFailure) as failure:
            plugin._config(bad)
        assert failure.value.code == code


def test_the_vlan_backend_is_told_where_stale_sub_interfaces_may_be(tmp_path: Path) -> None:
    from mesilla.agent.main import AGENT_FLAGS
    from mesilla.common.flags import parse
    from mesilla.network.nested.agent import NestedAgent, enabled

    (tmp_path / "token").write_text("mesilla-trunk-x\n")
    flags = parse(AGENT_FLAGS, [
        "--master=127.0.0.1:5050", f"--work_dir={tmp_path / 'work'}", f"--runtime_dir={tmp_path / 'run'}",
        "--network_service_url=http://127.0.0.1:9696/", "--network_trunk_id=t1",
        f"--network_trunk_token={tmp_path / 'token'}", "--network_trunk_nic=ens3",
    ])  # fmt: skip
    assert enabled(flags)
    agent = NestedAgent(flags)
    for pod in ("c1", "c2.child"):
        (tmp_path / "run/isolators/network/cni" / pod).mkdir(parents=True)
        (tmp_path / "run/isolators/network/cni" / pod / "ns").touch()
    agent.backend = "vlan"
    assert agent.host() == {
        "backend": "vlan",
        "trunk_nic": "ens3",
        "namespaces": [
            str(tmp_path / "run/isolators/network/cni/c1/ns"),
            str(tmp_path / "run/isolators/network/cni/c2.child/ns"),
        ],
    }
    agent.backend = "ovs"
    assert agent.host()["ovs_dir"] == str(tmp_path / "run/network/ovs")
    with pytest.raises(FlagError, match="together"):
        enabled(parse(AGENT_FLAGS, ["--master=m:1", "--work_dir=/w", "--network_trunk_id=t1"]))
