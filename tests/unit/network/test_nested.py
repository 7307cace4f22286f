"""The host side's decisions that need no kernel: backends, names, CNI results and errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from mesilla.common.flags import FlagError
from mesilla.network.nested import cni, plugin, plumbing

BINDING = {
    "state": "attached", "port_id": "1b98e153-409a-4c1e-9f1e-000000000001",
    "mac_address": "fa:16:3e:00:00:01", "segmentation_id": 7, "mtu": 1450,
    "addresses": [{"address": "10.30.0.2/24", "gateway": "10.30.0.1"},
                  {"address": "fd00::2/64", "gateway": None}],
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


def test_plumbing_of_the_chosen_backend() -> None:
    ovs = plumbing.backend("ovs", "eth0", "/run/x/ovs", "br-trunk")
    assert isinstance(ovs, plumbing.OvsPlumbing) and ovs.bridge == "br-trunk"
    assert ovs.ovs.directory == "/run/x/ovs"
    vlan = plumbing.backend("vlan", "ens3", "/run/x/ovs", "br-trunk", lambda: ["/run/ns/p"])
    assert isinstance(vlan, plumbing.VlanPlumbing) and vlan.trunk_nic == "ens3"
    assert vlan.stale_namespaces() == ["/run/ns/p"]
    with pytest.raises(plumbing.PlumbingError):
        plumbing.backend("sriov", "eth0", "/run/x/ovs", "br-trunk")


def test_host_names_fit_ifnamsiz() -> None:
    vif = plumbing.Vif.from_json(BINDING)
    assert vif.host_name == "mn1b98e153409" and len(vif.host_name) <= 15
    assert plumbing.pod_end_name(vif.port_id) == "mp1b98e153409"
    assert vif.addresses[0].interface.network.prefixlen == 24


def test_results_per_cni_version() -> None:
    current = cni.result("1.0.0", BINDING, "eth0", "/run/netns/p", "fa:16:3e:00:00:01")
    assert current["interfaces"] == [{"name": "eth0", "mac": "fa:16:3e:00:00:01", "sandbox": "/run/netns/p"}]
    assert current["ips"] == [{"interface": 0, "address": "10.30.0.2/24", "gateway": "10.30.0.1"},
                              {"interface": 0, "address": "fd00::2/64"}]
    assert current["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.30.0.1"}]
    assert [ip["version"] for ip in cni.result("0.3.1", BINDING, "eth0", "/p", "m")["ips"]] == ["4", "6"]
    old = cni.result("0.2.0", BINDING, "eth0", "/p", "m")
    assert old == {"cniVersion": "0.2.0", "dns": {},
                   "ip4": {"ip": "10.30.0.2/24", "gateway": "10.30.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
                   "ip6": {"ip": "fd00::2/64"}}  # fmt: skip


def test_configurations_are_checked() -> None:
    good = {"cniVersion": "1.0.0", "name": "n", "type": "mesilla-nested", "network_id": "x",
            "agent_socket": "/s"}  # fmt: skip
    assert cni.config(good) == good
    for bad, code in (("nope", 7), ([], 7), ({"cniVersion": "1.0.0", "agent_socket": "/s"}, 7),
                      ({"cniVersion": "2.0.0", "network_id": "x", "agent_socket": "/s"}, 1)):  # fmt: skip
        with pytest.raises(plugin.CniFailure) as failure:
            cni.config(bad)
        assert failure.value.code == code


def test_the_plugin_reads_json_with_the_c_scanner_alone() -> None:
    text = ' {"a": [1, 2.5, "x\\u00e9", null, true], "b": {"c": -3e2}} \n'
    assert plugin.parse(text) == json.loads(text)
    for bad in ("", "nope", '{"a": 1} extra', "{'a': 1}"):
        with pytest.raises(ValueError):
            plugin.parse(bad)


def test_the_plugin_forwards_the_configuration_as_given() -> None:
    env = {"CNI_CONTAINERID": 'c"1', "CNI_NETNS": "/run/netns/p\u00e9", "CNI_IFNAME": "eth0", "PATH": "/bin"}
    conf = {"cniVersion": "1.0.0", "network_id": "n", "agent_socket": "/run/nested.sock", "x": [1]}
    socket_path, body = plugin.request("ADD", conf, json.dumps(conf) + "\n", env)
    assert socket_path == "/run/nested.sock"
    assert json.loads(body) == {"command": "ADD", "container_id": 'c"1', "netns": "/run/netns/p\u00e9",
                                "ifname": "eth0", "config": conf}  # fmt: skip
    with pytest.raises(plugin.CniFailure) as failure:
        plugin.request("ADD", {"network_id": "n"}, "{}", env)
    assert failure.value.code == 7 and "agent_socket" in failure.value.msg


def run_plugin(tmp_path: Path, answer: bytes | None, conf: dict[str, str]) -> tuple[int, dict[str, object]]:
    """The plugin's ADD against a stand-in agent on a unix socket that answers `answer` (None:
    no agent at all); its exit status and what it printed."""
    path = str(tmp_path / f"agent-{uuid.uuid4().hex[:8]}.sock")
    server = None
    if answer is not None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen(1)

        def serve() -> None:
            assert server is not None
            connection, _ = server.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(answer)

        threading.Thread(target=serve, daemon=True).start()
    try:
        done = subprocess.run([sys.executable, "-I", "-S", plugin.__file__],
                              input=json.dumps({**conf, "agent_socket": path}), capture_output=True,
                              text=True, env={"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1"},
                              timeout=30)  # fmt: skip
    finally:
        if server is not None:
            server.close()
    return done.returncode, json.loads(done.stdout)


def test_the_plugin_turns_what_goes_wrong_into_cni_errors(tmp_path: Path) -> None:
    conf = {"cniVersion": "0.4.0", "network_id": "n"}
    rc, error = run_plugin(tmp_path, None, conf)
    assert rc == 1 and error["code"] == 11 and error["cniVersion"] == "0.4.0"
    assert "does not answer" in str(error["msg"])
    failed = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\noops"
    rc, error = run_plugin(tmp_path, failed, conf)
    assert rc == 1 and error["code"] == 11 and "500" in str(error["msg"])
    agent_error = b'{"cniVersion": "0.4.0", "code": 7, "msg": "no such network"}'
    rc, error = run_plugin(tmp_path, b"HTTP/1.1 400 Bad Request\r\n\r\n" + agent_error, conf)
    assert rc == 1 and error == json.loads(agent_error)
    rc, result = run_plugin(tmp_path, b'HTTP/1.1 200 OK\r\n\r\n{"cniVersion": "0.4.0"}', conf)
    assert rc == 0 and result == {"cniVersion": "0.4.0"}


def test_the_plugin_imports_nothing_but_the_standard_library() -> None:
    # The way it is worth starting: isolated, without site, its own file alone.
    code = (
        "import sys; p = sys.argv[1]; exec(compile(open(p).read(), p, 'exec'), {'__name__': 'plugin'}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('mesilla', 'json', 'socket', 're', 'enum', 'typing')))"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, plugin.__file__],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]", done.stdout
    version = subprocess.run([sys.executable, "-I", "-S", plugin.__file__], env={"CNI_COMMAND": "VERSION"},
                             capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(version.stdout) == {"cniVersion": "1.0.0",
                                          "supportedVersions": plugin.SUPPORTED_VERSIONS}  # fmt: skip


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
    cni_root = tmp_path / "run/isolators/network/cni"
    assert agent.pod_namespaces() == [str(cni_root / "c1/ns"), str(cni_root / "c2.child/ns")]
    assert agent.ovs_dir == str(tmp_path / "run/network/ovs")
    with pytest.raises(FlagError, match="together"):
        enabled(parse(AGENT_FLAGS, ["--master=m:1", "--work_dir=/w", "--network_trunk_id=t1"]))
