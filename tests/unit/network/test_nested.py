"""The host side's decisions that need no kernel: backends, names, CNI results and errors."""

from __future__ import annotations

import json

import pytest

from mesilla.network.nested import plugin, plumbing

BINDING = {
    "state": "attached", "port_id": "1b98e153-409a-4c1e-9f1e-000000000001",
    "mac_address": "fa:16:3e:00:00:01", "segmentation_id": 7, "mtu": 1450,
    "addresses": [{"address": "10.30.0.2/24", "gateway": "10.30.0.1"}, {"address": "fd00::2/64", "gateway": None}],
}  # fmt: skip


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
    ovs = plumbing.from_host({"backend": "ovs", "ovs_dir": "/run/x/ovs", "bridge": "br-trunk", "trunk_nic": "eth0"})
    assert isinstance(ovs, plumbing.OvsPlumbing) and ovs.bridge == "br-trunk" and ovs.ovs.directory == "/run/x/ovs"
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
    good = {"cniVersion": "1.0.0", "name": "n", "type": "mesilla-nested", "network_id": "x", "agent_socket": "/s"}
    assert plugin._config(json.dumps(good)) == good
    for bad, code in (("nope", 7), ("[]", 7), ('{"cniVersion": "1.0.0", "agent_socket": "/s"}', 7),
                      ('{"cniVersion": "2.0.0", "network_id": "x", "agent_socket": "/s"}', 1)):  # fmt: skip
        with pytest.raises(plugin.CniFailure) as failure:
            plugin._config(bad)
        assert failure.value.code == code
