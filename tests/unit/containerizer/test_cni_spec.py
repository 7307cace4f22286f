"""CNI results in every version the reference plugins emit, and network configurations.

The result documents are the shapes containernetworking-plugins 1.1.1 prints
(see /work/shared/reference/networking/README.md section 4).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mesilla.containerizer.isolators.network.cni_spec import (
    CniError,
    load_configs,
    parse_config,
    parse_result,
    resolv_conf,
    supports_check,
)


def test_020_result_has_ip4_and_ip6() -> None:
    result = parse_result(
        {
            "cniVersion": "0.2.0",
            "ip4": {"ip": "10.99.0.4/24", "gateway": "10.99.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
            "ip6": {"ip": "fd00:99::4/64", "gateway": "fd00:99::1"},
            "dns": {},
        }
    )
    assert [(ip.address, ip.gateway, ip.version, ip.ip) for ip in result.container_ips()] == [
        ("10.99.0.4/24", "10.99.0.1", 4, "10.99.0.4"),
        ("fd00:99::4/64", "fd00:99::1", 6, "fd00:99::4"),
    ]
    assert result.routes == [{"dst": "0.0.0.0/0"}]


def test_010_result_without_version_reads_as_old_format() -> None:
    result = parse_result({"ip4": {"ip": "10.99.0.9/24"}})
    assert result.cni_version == "0.1.0"
    assert [ip.ip for ip in result.ips] == ["10.99.0.9"]


@pytest.mark.parametrize("version", ["0.3.0", "0.3.1", "0.4.0"])
def test_03x_and_040_results_carry_a_version_per_ip(version: str) -> None:
    result = parse_result(
        {
            "cniVersion": version,
            "interfaces": [
                {"name": "cni0", "mac": "aa:aa:aa:aa:aa:aa"},
                {"name": "veth1", "mac": "bb:bb:bb:bb:bb:bb"},
                {"name": "eth0", "mac": "cc:cc:cc:cc:cc:cc", "sandbox": "/run/netns/x"},
            ],
            "ips": [
                {"version": "4", "interface": 2, "address": "10.99.0.2/24", "gateway": "10.99.0.1"},
                {"version": "6", "interface": 2, "address": "fd00:99::2/64"},
                # An address on the host side (the bridge's) is not the container's.
                {"version": "4", "interface": 0, "address": "10.99.0.1/24"},
            ],
            "dns": {"nameservers": ["10.99.0.53"]},
        }
    )
    assert [(ip.ip, ip.version) for ip in result.container_ips()] == [
        ("10.99.0.2", 4),
        ("fd00:99::2", 6),
    ]
    assert result.dns == {"nameservers": ["10.99.0.53"]}


def test_100_result_infers_the_ip_version() -> None:
    result = parse_result(
        {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
            "ips": [{"interface": 0, "address": "fd00:99::2/64"}, {"address": "10.99.0.2/24"}],
        }
    )
    assert [(ip.ip, ip.version) for ip in result.container_ips()] == [
        ("fd00:99::2", 6),
        ("10.99.0.2", 4),
    ]


@pytest.mark.parametrize(
    "raw",
    [
        {"cniVersion": "0.4.0", "ips": [{"version": "6", "address": "10.99.0.2/24"}]},
        {"cniVersion": "1.0.0", "ips": [{"address": "not-an-address"}]},
        {"cniVersion": "0.2.0", "ip4": {"ip": "fd00::1/64"}},
        {"cniVersion": "1.0.0", "ips": [{}]},
        ["not", "an", "object"],
    ],
)
def test_malformed_results_are_refused_with_the_reason(raw: object) -> None:
    with pytest.raises(CniError):
        parse_result(raw)


def test_check_needs_040_or_later() -> None:
    assert not supports_check("0.3.1")
    assert supports_check("0.4.0")
    assert supports_check("1.0.0")


def test_conflist_plugins_get_name_version_runtime_config_and_prev_result() -> None:
    network = parse_config(
        {
            "cniVersion": "1.0.0",
            "name": "pods",
            "plugins": [
                {"type": "bridge", "bridge": "cni0"},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        "pods.conflist",
    )
    runtime = {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}
    first = network.plugin_config(0, runtime_config=runtime)
    assert first == {"type": "bridge", "bridge": "cni0", "name": "pods", "cniVersion": "1.0.0"}
    second = network.plugin_config(1, prev_result={"cniVersion": "1.0.0"}, runtime_config=runtime)
    assert second["runtimeConfig"] == runtime
    assert second["prevResult"] == {"cniVersion": "1.0.0"}


def test_a_conf_is_a_list_of_one() -> None:
    network = parse_config({"cniVersion": "0.4.0", "name": "n", "type": "bridge"}, "n.conf")
    assert [p["type"] for p in network.plugins] == ["bridge"]


@pytest.mark.parametrize(
    "source",
    [{"type": "bridge"}, {"name": "n", "plugins": []}, {"name": "n", "plugins": [{}]},
     {"name": "n", "type": "bridge", "cniVersion": "x.y"}, {"name": "../up", "type": "bridge"}],
)  # fmt: skip
def test_invalid_configurations_name_the_problem(source: dict) -> None:
    with pytest.raises(CniError, match=r"bad\.conf"):
        parse_config(source, "bad.conf")


def test_load_configs_by_name_and_refuses_duplicates(tmp_path: Path) -> None:
    (tmp_path / "10-a.conf").write_text(json.dumps({"name": "a", "type": "bridge"}))
    (tmp_path / "20-b.conflist").write_text(json.dumps({"name": "b", "plugins": [{"type": "ptp"}]}))
    (tmp_path / "README").write_text("not a config")
    assert sorted(load_configs(str(tmp_path))) == ["a", "b"]
    (tmp_path / "30-a.json").write_text(json.dumps({"name": "a", "type": "ptp"}))
    with pytest.raises(CniError, match="configured twice"):
        load_configs(str(tmp_path))


def test_resolv_conf_from_dns() -> None:
    dns = {"nameservers": ["10.0.0.53", "fd00::53"], "domain": "d", "search": ["a", "b"],
           "options": ["ndots:2"]}  # fmt: skip
    assert resolv_conf(dns) == (
        "nameserver 10.0.0.53\nnameserver fd00::53\ndomain d\nsearch a b\noptions ndots:2\n"
    )
