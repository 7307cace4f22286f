"""network/cni's pure parts: runtimeConfig from a NetworkInfo, what status reports, /etc files."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from mesilla.containerizer.isolators.network.cni import (
    _Info,
    _Network,
    _reported,
    _runtime_config,
    _with_mesos_args,
    _write_etc_files,
    cni_id,
)
from mesilla.containerizer.isolators.network.cni_spec import CniError, parse_config, parse_result
from mesilla.v1.mesos import ContainerID, NetworkInfo


def network_info(**fields: object) -> NetworkInfo:
    return msgspec.convert({"name": "pods", **fields}, NetworkInfo)


def test_runtime_config_from_port_mappings_ips_and_labels() -> None:
    info = network_info(
        port_mappings=[{"host_port": 31000, "container_port": 80},
                       {"host_port": 31001, "container_port": 53, "protocol": "UDP"}],
        ip_addresses=[{"ip_address": "10.99.0.9"}, {"protocol": "IPv6"}],
        labels={"labels": [{"key": "mac", "value": "0a:58:00:00:00:01"},
                           {"key": "bandwidth", "value": '{"ingressRate": 1000}'}]},
    )  # fmt: skip
    assert _runtime_config(info) == {
        "portMappings": [
            {"hostPort": 31000, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 31001, "containerPort": 53, "protocol": "udp"},
        ],
        "ips": ["10.99.0.9"],
        "mac": "0a:58:00:00:00:01",
        "bandwidth": {"ingressRate": 1000},
    }
    assert _runtime_config(network_info()) == {}
    with pytest.raises(CniError, match="not JSON"):
        _runtime_config(network_info(labels={"labels": [{"key": "bandwidth", "value": "fast"}]}))


def test_status_reports_the_request_with_the_addresses_given() -> None:
    result = parse_result({"cniVersion": "0.2.0", "ip4": {"ip": "10.99.0.4/24"}, "ip6": {"ip": "fd00::4/64"}})
    reported = _reported(_Network("pods", "eth0", network_info(groups=["g"]), result))
    assert reported["name"] == "pods" and reported["groups"] == ["g"]
    assert reported["ip_addresses"] == [
        {"protocol": "IPv4", "ip_address": "10.99.0.4"},
        {"protocol": "IPv6", "ip_address": "fd00::4"},
    ]


def test_etc_files_name_the_first_ipv4_and_take_the_results_dns(tmp_path: Path) -> None:
    info = _Info(str(tmp_path))
    v6_first = parse_result(
        {
            "cniVersion": "1.0.0",
            "ips": [{"address": "fd00::4/64"}, {"address": "10.99.0.4/24"}],
            "dns": {"nameservers": ["10.99.0.53"], "search": ["pods.local"]},
        }
    )
    info.networks.append(_Network("pods", "eth0", network_info(), v6_first))
    _write_etc_files(info, "web")
    assert (tmp_path / "hosts").read_text() == "127.0.0.1 localhost\n10.99.0.4 web\n"
    assert (tmp_path / "hostname").read_text() == "web\n"
    assert (tmp_path / "resolv.conf").read_text() == "nameserver 10.99.0.53\nsearch pods.local\n"


def test_cni_container_ids_round_trip_nested_ids() -> None:
    nested = ContainerID(value="child", parent=ContainerID(value="pod"))
    assert cni_id(nested) == "pod.child"
    assert ContainerID.from_path("pod.child".split(".")) == nested


def test_plugins_get_the_network_info_in_args_as_mesos_passes_it() -> None:
    listed = parse_config({"cniVersion": "1.0.0", "name": "pods", "plugins": [
        {"type": "bridge", "args": {"mine": 1}}, {"type": "portmap"}]}, "pods.conflist")  # fmt: skip
    mapped = network_info(port_mappings=[{"host_port": 31000, "container_port": 80}])
    with_args = _with_mesos_args(listed, mapped)
    first = with_args.plugin_config(0)
    assert first["args"]["mine"] == 1
    assert first["args"]["org.apache.mesos"]["network_info"]["port_mappings"] == [
        {"host_port": 31000, "container_port": 80}
    ]
    assert with_args.source["plugins"][1]["args"]["org.apache.mesos"]["network_info"]["name"] == "pods"
    single = _with_mesos_args(parse_config({"name": "n", "type": "ptp"}, "n.conf"), network_info())
    assert single.plugin_config(0)["args"]["org.apache.mesos"]["network_info"] == {"name": "pods"}
    reserved = parse_config({"name": "n", "type": "ptp", "args": {"org.apache.mesos": {}}}, "n.conf")
    with pytest.raises(CniError, match="which the agent sets"):
        _with_mesos_args(reserved, network_info())
