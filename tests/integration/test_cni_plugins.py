"""The CNI plugin client against Debian's containernetworking-plugins.

Each test runs in a network namespace of its own (the "host" side, where the
bridge and the veths' host ends go) and attaches a second namespace made by
`netns.create` (the container's). Plugins that fail or hang are small scripts
in a plugins directory of the test's.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesilla.common import procfs
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolators.network import netns
from mesilla.containerizer.isolators.network.cni import NetworkCniIsolator
from mesilla.containerizer.isolators.network.cni_plugin import (
    Attachment,
    PluginError,
    PluginRunner,
)
from mesilla.containerizer.isolators.network.cni_spec import CniError, parse_config, parse_result
from mesilla.containerizer.types import ContainerConfig
from mesilla.testing.netns import entered, network_namespace, run_in
from mesilla.v1.mesos import CommandInfo, ContainerID, ContainerInfo, NetworkInfo

PLUGINS = "/usr/lib/cni"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or not os.path.exists(f"{PLUGINS}/bridge") or not shutil.which("ip"),
        reason="needs root, iproute2 and containernetworking-plugins in /usr/lib/cni",
    ),
]


@pytest.fixture
def host_side() -> Iterator[str]:
    with network_namespace() as name, entered(name):
        yield name


@pytest.fixture
def pod_ns(tmp_path: Path, host_side: str) -> Iterator[str]:
    path = str(tmp_path / "ns")
    netns.create(path)
    try:
        yield path
    finally:
        netns.remove(str(tmp_path), path)


def bridge_network(version: str, ipam_dir: Path, name: str = "testnet") -> dict:
    return {
        "cniVersion": version,
        "name": name,
        "type": "bridge",
        "bridge": "mtest0",
        "isGateway": True,
        "ipam": {
            "type": "host-local",
            "dataDir": str(ipam_dir),
            "ranges": [[{"subnet": "10.99.0.0/24", "gateway": "10.99.0.1"}]],
            "routes": [{"dst": "0.0.0.0/0"}],
        },
    }


def leases(ipam_dir: Path, name: str = "testnet") -> list[str]:
    directory = ipam_dir / name
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if p.name[0].isdigit())


@pytest.mark.parametrize("version", ["1.0.0", "0.4.0", "0.3.1", "0.2.0"])
async def test_add_check_del_in_each_version(version: str, pod_ns: str, tmp_path: Path) -> None:
    ipam = tmp_path / "ipam"
    network = parse_config(bridge_network(version, ipam), "testnet.conf")
    runner = PluginRunner(PLUGINS, 30)
    where = Attachment("ctr-1", pod_ns, "eth0")

    assert version in await runner.supported_versions("bridge")
    raw = await runner.add(network, where)
    result = parse_result(raw)
    assert result.cni_version == version
    [ip] = result.container_ips()
    assert ip.version == 4 and ip.ip.startswith("10.99.0.")
    assert f"{ip.ip}/24" in run_in(pod_ns, "ip", "-br", "addr", "show", "eth0").stdout
    assert leases(ipam) == [ip.ip]

    # CHECK exists from 0.4.0 on; the client does not ask it of older configurations.
    assert await runner.check(network, where, raw) is (version in ("1.0.0", "0.4.0"))
    if version in ("1.0.0", "0.4.0"):
        run_in(pod_ns, "ip", "addr", "del", f"{ip.ip}/24", "dev", "eth0")
        with pytest.raises(PluginError, match="Failed to match addr"):
            await runner.check(network, where, raw)

    await runner.delete(network, where, raw)
    await runner.delete(network, where, raw)  # DEL is idempotent
    assert leases(ipam) == []
    assert "eth0" not in run_in(pod_ns, "ip", "-br", "link").stdout


async def test_conflist_chains_prev_result_and_deletes_in_reverse(pod_ns: str, tmp_path: Path) -> None:
    ipam = tmp_path / "ipam"
    bridge = bridge_network("1.0.0", ipam)
    bridge.pop("cniVersion"), bridge.pop("name")
    source = {
        "cniVersion": "1.0.0",
        "name": "testnet",
        "plugins": [bridge, {"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.accept_local": "1"}}],
    }
    network = parse_config(source, "testnet.conflist")
    runner = PluginRunner(PLUGINS, 30)
    where = Attachment("ctr-2", pod_ns, "eth0")
    raw = await runner.add(network, where)
    # tuning passes the bridge's result on: the last plugin's result has the address.
    [ip] = parse_result(raw).container_ips()
    sysctl = run_in(pod_ns, "sysctl", "-n", "net.ipv4.conf.eth0.accept_local").stdout.strip()
    assert sysctl == "1"
    assert await runner.check(network, where, raw)
    await runner.delete(network, where, raw)
    assert leases(ipam) == []
    assert ip.ip


def script_plugin(directory: Path, name: str, body: str) -> None:
    directory.mkdir(exist_ok=True)
    path = directory / name
    # VERSION answered like a real plugin, so that the failure is the verb's.
    path.write_text(
        "#!/bin/sh\n"
        'if [ "$CNI_COMMAND" = VERSION ]; then\n'
        '  echo \'{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}\'; exit 0\n'
        "fi\n" + body
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


async def test_a_plugin_error_carries_its_msg(pod_ns: str, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    script_plugin(
        plugins, "refuse",
        'cat >/dev/null; echo \'{"cniVersion":"1.0.0","code":7,"msg":"no addresses left",'
        '"details":"range 10.99.0.0/30"}\'; exit 1\n',
    )  # fmt: skip
    network = parse_config({"cniVersion": "1.0.0", "name": "n", "type": "refuse"}, "n.conf")
    runner = PluginRunner(str(plugins), 30)
    with pytest.raises(PluginError) as failure:
        await runner.add(network, Attachment("ctr-3", pod_ns, "eth0"))
    assert failure.value.code == 7
    assert failure.value.msg == "no addresses left"
    assert "no addresses left (range 10.99.0.0/30)" in str(failure.value)
    assert "'refuse'" in str(failure.value) and "ADD" in str(failure.value)


async def test_a_hanging_plugin_is_killed_with_what_it_started(pod_ns: str, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    pids = tmp_path / "pids"
    script_plugin(plugins, "hang", f"sleep 1000 & echo $$ $! > {pids}; wait\n")
    network = parse_config({"cniVersion": "1.0.0", "name": "n", "type": "hang"}, "n.conf")
    runner = PluginRunner(str(plugins), 1)
    with pytest.raises(PluginError, match="within 1s: killed"):
        await runner.add(network, Attachment("ctr-4", pod_ns, "eth0"))
    for pid in pids.read_text().split():
        # SIGKILL went to the whole group; an orphan may take a moment to finish dying.
        for _ in range(200):
            if procfs.start_time(pid) is None:  # gone, or a zombie
                break
            await asyncio.sleep(0.05)
        assert procfs.start_time(pid) is None, f"process {pid} of the plugin survived"


async def test_an_unsupported_version_or_missing_plugin_is_refused(pod_ns: str, tmp_path: Path) -> None:
    runner = PluginRunner(PLUGINS, 30)
    where = Attachment("ctr-5", pod_ns, "eth0")
    network = parse_config({**bridge_network("1.0.0", tmp_path), "cniVersion": "0.9.0"}, "x.conf")
    with pytest.raises(CniError, match=r"does not support cniVersion 0\.9\.0"):
        await runner.add(network, where)
    missing = parse_config({"cniVersion": "1.0.0", "name": "n", "type": "nope"}, "n.conf")
    with pytest.raises(CniError, match="'nope' is not in --network_cni_plugins_dir"):
        await runner.add(missing, where)
    evil = parse_config({"cniVersion": "1.0.0", "name": "n", "type": "../bin/sh"}, "n.conf")
    with pytest.raises(CniError, match="Invalid CNI plugin type"):
        await runner.add(evil, where)


def test_result_file_round_trip(tmp_path: Path) -> None:
    # What the isolator checkpoints (network.info) parses back the same.
    raw = {"cniVersion": "1.0.0", "ips": [{"address": "10.99.0.7/24"}]}
    (tmp_path / "network.info").write_text(json.dumps(raw))
    assert parse_result(json.loads((tmp_path / "network.info").read_text())).ips[0].ip == "10.99.0.7"


async def test_isolator_layout_under_the_persistent_root(host_side: str, tmp_path: Path) -> None:
    """--network_cni_root_dir_persist keeps Mesos's layout under --work_dir; cleanup removes it."""
    config_dir = tmp_path / "cni"
    config_dir.mkdir()
    (config_dir / "testnet.conf").write_text(json.dumps(bridge_network("0.4.0", tmp_path / "ipam")))
    isolator = NetworkCniIsolator(ContainerizerFlags(
        network_cni_config_dir=str(config_dir), network_cni_plugins_dir=PLUGINS,
        network_cni_root_dir_persist=True, work_dir=str(tmp_path / "work"),
        runtime_dir=str(tmp_path / "run"),
    ))  # fmt: skip
    container_id = ContainerID(value="ctr-layout")
    config = ContainerConfig(
        command=CommandInfo(value="true"), sandbox=str(tmp_path),
        container_info=ContainerInfo(type="MESOS", hostname="web",
                                     network_infos=[NetworkInfo(name="testnet")]),
    )  # fmt: skip
    launch = await isolator.prepare(container_id, config)
    directory = tmp_path / "work/isolators/network/cni/ctr-layout"
    try:
        assert launch is not None and launch.enter_namespaces == {"network": str(directory / "ns")}
        assert netns.is_bound(str(directory / "ns"))
        ip = launch.environment["MESOS_CONTAINER_IP"]
        assert json.loads((directory / "testnet/network.conf").read_text())["name"] == "testnet"
        assert parse_result(json.loads((directory / "testnet/eth0/network.info").read_text())).ips[0].ip == ip
        assert (directory / "hosts").read_text() == f"127.0.0.1 localhost\n{ip} web\n"
        assert (await isolator.status(container_id))["network_infos"][0]["ip_addresses"] == [
            {"protocol": "IPv4", "ip_address": ip}
        ]
        assert await isolator.check(container_id) == ["testnet"]
    finally:
        await isolator.cleanup(container_id)
    assert not directory.exists()
    assert leases(tmp_path / "ipam") == []
