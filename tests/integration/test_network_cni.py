"""Pods and tasks on CNI networks, end to end through the scheduler and operator APIs.

The whole cluster (master, agent, executors, containers) runs inside a
network namespace the module creates, with a CNI configuration directory it
writes: bridges on private ranges (10.99.0.0/24, 10.98.0.0/24), host-local
leases in the test's directory, and two script plugins that fail or hang. The
pods' own namespaces are bound under the agent's runtime directory; their
veths' host ends, the bridges and the portmap rules live in the module's
namespace, which is deleted at the end whatever happened.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.faults.workload import executor_sandbox, pod_executor, task, tid

from mesilla.containerizer.launcher.linux import LinuxLauncher
from mesilla.testing.images import build_image, write_docker_save
from mesilla.testing.netns import entered, network_namespace, release_namespace_mounts, run_in
from mesilla.testing.processes import Cluster, http_json
from mesilla.testing.scheduler import Framework, Json, scalar

PLUGINS = "/usr/lib/cni"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(f"{PLUGINS}/bridge").exists(), reason="needs containernetworking-plugins"
    ),
]


class Net:
    """The module's network namespace, CNI configuration and cluster."""

    def __init__(self, root: Path, namespace: str) -> None:
        self.root = root
        self.namespace = namespace
        self.ipam = root / "ipam"
        self.config_dir = root / "cni"
        self.plugins_dir = root / "plugins"
        self.images = root / "images"
        self.cluster: Cluster | None = None

    def agent_flags(self) -> list[str]:
        return [
            "--launcher=linux",
            "--isolation=filesystem/linux,docker/runtime,posix/cpu,posix/mem,network/cni,network/ports",
            "--enforce_container_ports",
            "--container_ports_watch_interval=200ms",
            "--image_providers=docker",
            f"--docker_registry={self.images}",
            "--resources=cpus:8;mem:8192;disk:8192;ports:[31000-32000]",
            f"--network_cni_config_dir={self.config_dir}",
            f"--network_cni_plugins_dir={PLUGINS}:{self.plugins_dir}",
            "--network_cni_plugin_timeout=2secs",
            "--executor_reregistration_timeout=10secs",
        ]

    def leases(self, network: str = "pods") -> list[str]:
        directory = self.ipam / network
        return (
            sorted(p.name for p in directory.iterdir() if p.name[0].isdigit()) if directory.is_dir() else []
        )

    def veths(self) -> list[str]:
        links = run_in(self.namespace, "ip", "-br", "link").stdout.split()
        return [name.split("@")[0] for name in links if name.startswith("veth")]

    def leftovers(self) -> list[str]:
        assert self.cluster is not None
        left = [f"lease {lease}" for net in ("pods", "other", "dual") for lease in self.leases(net)]
        left += [f"portmap rule {rule}" for rule in portmap_rules()]
        left += [f"veth {v}" for v in self.veths()]
        left += [f"mount {m}" for m in self.cluster.mounts()]
        cni_root = self.cluster.runtime_dir() / "isolators/network/cni"
        left += [f"cni dir {p.name}" for p in cni_root.iterdir()] if cni_root.is_dir() else []
        return left


def portmap_rules() -> list[str]:
    """The portmap plugin's DNAT rules in the (entered) test namespace."""
    dump = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=False).stdout
    return [line for line in dump.splitlines() if line.startswith("-A CNI-DN-")]


def write_configs(net: Net) -> None:
    net.config_dir.mkdir()
    bridge = {
        "type": "bridge", "bridge": "mtest0", "isGateway": True, "capabilities": {"ips": True},
        "ipam": {"type": "host-local", "dataDir": str(net.ipam),
                 "ranges": [[{"subnet": "10.99.0.0/24", "gateway": "10.99.0.1"}]],
                 "routes": [{"dst": "0.0.0.0/0"}]},
    }  # fmt: skip
    pods = {"cniVersion": "1.0.0", "name": "pods",
            "plugins": [bridge, {"type": "tuning", "capabilities": {"mac": True}},
                        {"type": "portmap", "capabilities": {"portMappings": True}}]}  # fmt: skip
    other = {
        "cniVersion": "0.4.0", "name": "other", "type": "bridge", "bridge": "mtest1",
        "ipam": {"type": "host-local", "dataDir": str(net.ipam),
                 "ranges": [[{"subnet": "10.98.0.0/24"}]]},
    }  # fmt: skip
    dual = {
        "cniVersion": "1.0.0", "name": "dual", "type": "bridge", "bridge": "mtest2", "isGateway": True,
        "ipam": {"type": "host-local", "dataDir": str(net.ipam),
                 "ranges": [[{"subnet": "10.97.0.0/24"}], [{"subnet": "fd00:97::/64"}]]},
    }  # fmt: skip
    (net.config_dir / "10-pods.conflist").write_text(json.dumps(pods))
    (net.config_dir / "50-dual.conf").write_text(json.dumps(dual))
    (net.config_dir / "20-other.conf").write_text(json.dumps(other))
    (net.config_dir / "30-broken.conf").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "broken", "type": "refuse"})
    )
    (net.config_dir / "40-stuck.conf").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "stuck", "type": "hang"})
    )
    net.plugins_dir.mkdir()
    version = (
        '#!/bin/sh\nif [ "$CNI_COMMAND" = VERSION ]; then\n'
        '  echo \'{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}\'; exit 0\nfi\n'
        '[ "$CNI_COMMAND" = DEL ] && exit 0\n'
    )
    scripts = {
        "refuse": 'echo \'{"cniVersion":"1.0.0","code":11,"msg":"the fabric said no"}\'; exit 1\n',
        "hang": "exec sleep 1000\n",
    }
    for name, body in scripts.items():
        path = net.plugins_dir / name
        path.write_text(version + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    if not LinuxLauncher.available():
        pytest.skip("needs conmon and an OCI runtime that runs containers here")
    root = tmp_path_factory.mktemp("cni")
    with network_namespace() as namespace, entered(namespace):
        state = Net(root, namespace)
        write_configs(state)
        state.images.mkdir()
        write_docker_save(build_image(), str(state.images / "netimage:latest.tar"), ["netimage:latest"])
        try:
            yield state
        finally:
            if state.cluster is not None:
                state.cluster.cleanup()
            release_namespace_mounts(str(root))


@pytest.fixture(scope="module")
def cluster(net: Net) -> Cluster:
    net.cluster = Cluster(net.root / "cluster", agent_flags=net.agent_flags())
    net.cluster.start()
    return net.cluster


@pytest.fixture
async def framework(cluster: Cluster) -> AsyncIterator[Framework]:
    framework = Framework(cluster.master_address, capabilities=["TASK_RESTARTING_STATE"])
    await framework.subscribe()
    try:
        yield framework
    finally:
        await framework.close()


def on_networks(*names: str, **network: Any) -> Json:
    return {"type": "MESOS", "network_infos": [{"name": n, **network} for n in names]}


def networked_pod(*names: str, **network: Any) -> Json:
    return {**pod_executor(), "container": on_networks(*names, **network)}


SEEN_INSIDE = (
    "ip -o addr show eth0 | awk '$3 == \"inet\" {print $4}' | cut -d/ -f1 > ip; "
    'echo "$MESOS_CONTAINER_IP" > env_ip; hostname > hostname'
)


def reported_ips(update_status: Json) -> list[list[str]]:
    infos = update_status.get("container_status", {}).get("network_infos", [])
    return [[a["ip_address"] for a in info.get("ip_addresses", [])] for info in infos]


def running_status(framework: Framework, task_id: str) -> Json:
    return next(u.status for u in framework.updates if u.task_id == task_id and u.state == "TASK_RUNNING")


def task_sandbox(cluster: Cluster, framework: Framework, executor: Json, task_info: Json) -> Path:
    fw_id = framework.framework_id["value"]  # type: ignore[index]
    return executor_sandbox(cluster, fw_id, executor["executor_id"]["value"]) / "tasks" / tid(task_info)


async def await_released(net: Net) -> None:
    """Waits (bounded: the agent cleans up after the terminal update) until nothing is left."""
    for _ in range(300):
        if not net.leftovers():
            return
        await asyncio.sleep(0.1)
    assert net.leftovers() == []


async def test_a_pods_containers_share_one_ip_that_is_reported(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    executor = networked_pod("pods")
    first = task("first", SEEN_INSIDE + "; until [ -e ../../stop ]; do sleep 0.1; done")
    second = task("second", SEEN_INSIDE)
    await framework.launch_group(await framework.offer(), executor, [first, second])
    await framework.until_state([tid(second)], "TASK_FINISHED", 60)
    await framework.until_state([tid(first)], "TASK_RUNNING", 60)

    seen = {}
    for task_info in (first, second):
        sandbox = task_sandbox(cluster, framework, executor, task_info)
        seen[task_info["name"]] = {f: (sandbox / f).read_text().strip() for f in ("ip", "env_ip", "hostname")}
    ip = seen["first"]["ip"]
    assert ip.startswith("10.99.0."), seen
    assert seen["second"]["ip"] == ip and seen["first"]["env_ip"] == ip and seen["second"]["env_ip"] == ip
    # One namespace per pod: one ADD, one lease.
    assert net.leases() == [ip]
    # Reported as Mesos: every status update, GET_CONTAINERS, the agent's and master's state.
    assert reported_ips(running_status(framework, tid(first))) == [[ip]]
    containers = cluster.agent_call({"type": "GET_CONTAINERS"})["get_containers"]["containers"]
    executor_entry = next(c for c in containers if c["executor_id"] == executor["executor_id"])
    assert [
        [a["ip_address"] for a in n["ip_addresses"]]
        for n in executor_entry["container_status"]["network_infos"]
    ] == [[ip]]
    assert executor_entry["container_status"]["network_infos"][0]["name"] == "pods"
    master_task = next(
        t for f in http_json(f"{cluster.master_url}/state")["frameworks"] for t in f["tasks"]
        if t["id"] == tid(first)
    )  # fmt: skip
    statuses = master_task["statuses"]
    assert [
        a["ip_address"] for a in statuses[-1]["container_status"]["network_infos"][0]["ip_addresses"]
    ] == [ip]
    tasks = http_json(f"{cluster.master_url}/api/v1", {"type": "GET_TASKS"})["get_tasks"]["tasks"]
    [listed] = [t for t in tasks if t["task_id"]["value"] == tid(first)]
    assert listed["statuses"][-1]["container_status"]["network_infos"][0]["ip_addresses"] == [
        {"protocol": "IPv4", "ip_address": ip}
    ]
    # The pod's namespace is reachable from the host side of the network.
    assert run_in(net.namespace, "busybox", "ping", "-c", "1", "-W", "5", ip, check=False).returncode == 0

    fw_id = framework.framework_id["value"]  # type: ignore[index]
    (executor_sandbox(cluster, fw_id, executor["executor_id"]["value"]) / "stop").touch()
    await framework.until_state([tid(first)], "TASK_FINISHED", 60)
    await await_released(net)


SERVER = """
import socket
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", 7777)); t.listen()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 7777))
c, _ = t.accept(); c.sendall(b"tcp:" + c.recv(100)); c.close()
d, a = u.recvfrom(100); u.sendto(b"udp:" + d, a)
"""

CLIENT = """
import socket, sys, time
ip = sys.argv[1]
for _ in range(300):
    try:
        c = socket.create_connection((ip, 7777), timeout=5); break
    except OSError:
        time.sleep(0.1)
c.sendall(b"hi"); got = c.recv(100)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(1)
for _ in range(30):
    u.sendto(b"hi", (ip, 7777))
    try:
        got += b" " + u.recvfrom(100)[0]; break
    except socket.timeout:
        pass
open("got", "wb").write(got)
sys.exit(0 if got == b"tcp:hi udp:hi" else 1)
"""


async def test_two_pods_reach_each_other_by_ip_over_tcp_and_udp(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    server_pod, client_pod = networked_pod("pods"), networked_pod("pods")
    server = task("server", f"{shlex.quote(sys.executable)} -c {shlex.quote(SERVER)}")
    await framework.launch_group(await framework.offer(), server_pod, [server])
    await framework.until_state([tid(server)], "TASK_RUNNING", 60)
    [[server_ip]] = reported_ips(running_status(framework, tid(server)))
    client = task("client", f"{shlex.quote(sys.executable)} -c {shlex.quote(CLIENT)} {server_ip}")
    await framework.launch_group(await framework.offer(), client_pod, [client])
    await framework.until_state([tid(server), tid(client)], "TERMINAL", 90)
    got = (task_sandbox(cluster, framework, client_pod, client) / "got").read_bytes()
    assert got == b"tcp:hi udp:hi"
    assert framework.state(tid(client)) == "TASK_FINISHED"
    assert framework.state(tid(server)) == "TASK_FINISHED"
    [[client_ip]] = reported_ips(running_status(framework, tid(client)))
    assert client_ip != server_ip
    await await_released(net)


async def test_a_pod_on_two_networks_gets_eth0_and_eth1(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    executor = networked_pod("pods", "other")
    probe = task("probe", "ip -o -4 addr show | awk '{print $2, $4}' > addrs")
    await framework.launch_group(await framework.offer(), executor, [probe])
    await framework.until_state([tid(probe)], "TASK_FINISHED", 60)
    addrs = dict(
        line.split()
        for line in (task_sandbox(cluster, framework, executor, probe) / "addrs").read_text().splitlines()
    )
    [[pods_ip], [other_ip]] = reported_ips(running_status(framework, tid(probe)))
    assert addrs["eth0"] == f"{pods_ip}/24" and pods_ip.startswith("10.99.0.")
    assert addrs["eth1"] == f"{other_ip}/24" and other_ip.startswith("10.98.0.")
    await await_released(net)


async def test_a_pod_task_with_networks_of_its_own_gets_its_own_namespace(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    executor = networked_pod("pods")
    shared = task("shared", SEEN_INSIDE)
    own = task("own", SEEN_INSIDE, container=on_networks("other"))
    await framework.launch_group(await framework.offer(), executor, [shared, own])
    await framework.until_state([tid(shared), tid(own)], "TASK_FINISHED", 60)
    seen = {t["name"]: (task_sandbox(cluster, framework, executor, t) / "ip").read_text().strip()
            for t in (shared, own)}  # fmt: skip
    assert seen["shared"].startswith("10.99.0.") and seen["own"].startswith("10.98.0.")
    assert reported_ips(running_status(framework, tid(own))) == [[seen["own"]]]
    assert reported_ips(running_status(framework, tid(shared))) == [[seen["shared"]]]
    await await_released(net)


async def test_a_requested_ip_and_mac_reach_the_plugins_as_runtime_config(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    mac = "0a:58:0a:63:00:c8"
    executor = networked_pod(
        "pods", ip_addresses=[{"ip_address": "10.99.0.200"}],
        labels={"labels": [{"key": "mac", "value": mac}]},
    )  # fmt: skip
    probe = task("probe", SEEN_INSIDE + "; cat /sys/class/net/eth0/address > mac")
    await framework.launch_group(await framework.offer(), executor, [probe])
    await framework.until_state([tid(probe)], "TASK_FINISHED", 60)
    sandbox = task_sandbox(cluster, framework, executor, probe)
    assert (sandbox / "ip").read_text().strip() == "10.99.0.200"
    assert (sandbox / "mac").read_text().strip() == mac
    assert reported_ips(running_status(framework, tid(probe))) == [["10.99.0.200"]]
    await await_released(net)


async def test_an_ended_pods_namespace_is_not_held_by_containers_started_meanwhile(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    """Containers on the host view see the runtime directory, so their mount namespaces
    hold copies of a pod's namespace mount: removing the namespace's file detaches those
    copies too (Linux 3.18+), or the namespace would outlive the pod."""
    executor = networked_pod("pods")
    pod_task = task("pod", "until [ -e ../../stop ]; do sleep 0.1; done")
    await framework.launch_group(await framework.offer(), executor, [pod_task])
    await framework.until_state([tid(pod_task)], "TASK_RUNNING", 60)
    bystander = task("bystander", "sleep 3600")
    await framework.launch(await framework.offer(), [bystander])
    await framework.until_state([tid(bystander)], "TASK_RUNNING", 60)
    fw_id = framework.framework_id["value"]  # type: ignore[index]
    containers = cluster.agent_call({"type": "GET_CONTAINERS"})["get_containers"]["containers"]
    [pid] = [c["container_status"]["executor_pid"] for c in containers
             if c["executor_id"]["value"] == tid(bystander)]  # fmt: skip
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")

    def held() -> list[str]:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        return [line for line in lines if " nsfs " in line and "/isolators/network/cni/" in line]

    assert held(), "the bystander's view of the host should show the pod's namespace"
    (executor_sandbox(cluster, fw_id, executor["executor_id"]["value"]) / "stop").touch()
    await framework.until_state([tid(pod_task)], "TASK_FINISHED", 60)
    await await_released(net)
    left = held()
    await framework.kill(tid(bystander))
    await framework.until_state([tid(bystander)], "TASK_KILLED", 60)
    assert left == []


async def test_a_command_task_on_a_network_reaches_its_agent_over_the_domain_socket(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    command = task("cmd", SEEN_INSIDE, container=on_networks("pods"))
    await framework.launch(await framework.offer(), [command])
    await framework.until_state([tid(command)], "TASK_FINISHED", 60)
    fw_id = framework.framework_id["value"]  # type: ignore[index]
    sandbox = executor_sandbox(cluster, fw_id, tid(command))
    ip = (sandbox / "ip").read_text().strip()
    assert ip.startswith("10.99.0.")
    assert (sandbox / "env_ip").read_text().strip() == ip
    assert reported_ips(running_status(framework, tid(command))) == [[ip]]
    await await_released(net)


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ("nowhere", "Unknown CNI network(s) nowhere"),
        ("broken", "the fabric said no"),
        ("stuck", "no answer to ADD within 2s: killed it"),
    ],
)
async def test_a_network_that_cannot_be_set_up_fails_the_launch(
    net: Net, cluster: Cluster, framework: Framework, network: str, message: str
) -> None:
    executor = networked_pod(network)
    sleeper = task("sleeper", "sleep 3600")
    await framework.launch_group(await framework.offer(), executor, [sleeper])
    await framework.until_state([tid(sleeper)], "TERMINAL", 60)
    [ended] = framework.terminal(tid(sleeper))
    assert ended.state == "TASK_FAILED"
    assert ended.reason == "REASON_CONTAINER_LAUNCH_FAILED"
    assert message in ended.status.get("message", ""), ended.status
    # The executor never ran: the FAILURE event still carries a status (-1, as Mesos).
    await framework.until(lambda: any(e.get("type") == "FAILURE" for e in framework.events), 30, "FAILURE")
    failure = next(e["failure"] for e in framework.events if e.get("type") == "FAILURE")
    assert failure["status"] == -1
    await await_released(net)


async def test_a_port_mapping_is_reachable_from_the_host_side_and_refused_after_the_pod(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    host_port = 31007
    executor = networked_pod(
        "pods", port_mappings=[{"host_port": host_port, "container_port": 8080, "protocol": "tcp"}]
    )
    executor["resources"] = [*executor["resources"], ports_resource(host_port)]
    serve = (
        "import socket; t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        "t.bind(('0.0.0.0', 8080)); t.listen(); open('listening', 'w').close(); "
        "c, _ = t.accept(); c.sendall(b'mapped'); c.close()"
    )
    server = task("mapped", f"{shlex.quote(sys.executable)} -c {shlex.quote(serve)}")
    await framework.launch_group(await framework.offer(), executor, [server])
    await framework.until_state([tid(server)], "TASK_RUNNING", 60)
    listening = task_sandbox(cluster, framework, executor, server) / "listening"
    for _ in range(300):
        if listening.exists():
            break
        await asyncio.sleep(0.1)
    assert portmap_rules(), "portmap set up no DNAT rule"
    # The bridge's address is the namespace's own: the connection is DNATed to the pod.
    reader, writer = await asyncio.open_connection("10.99.0.1", host_port)
    assert await reader.read() == b"mapped"
    writer.close()
    await framework.until_state([tid(server)], "TASK_FINISHED", 60)
    await await_released(net)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("10.99.0.1", host_port)


async def test_a_pod_gets_ipv4_and_ipv6_on_a_dual_stack_network(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    executor = networked_pod("dual")
    probe = task(
        "probe",
        "ip -o addr show eth0 scope global | awk '{print $4}' > addrs; echo $MESOS_CONTAINER_IP > env_ip",
    )
    await framework.launch_group(await framework.offer(), executor, [probe])
    await framework.until_state([tid(probe)], "TASK_FINISHED", 60)
    sandbox = task_sandbox(cluster, framework, executor, probe)
    inside = sorted((sandbox / "addrs").read_text().split())
    [reported] = reported_ips(running_status(framework, tid(probe)))
    assert sorted(f"{ip}/{24 if '.' in ip else 64}" for ip in reported) == inside
    [v4] = [ip for ip in reported if ip.startswith("10.97.0.")]
    assert [ip for ip in reported if ip.startswith("fd00:97::")]
    assert (sandbox / "env_ip").read_text().strip() == v4
    status = running_status(framework, tid(probe))
    protocols = [a["protocol"] for a in status["container_status"]["network_infos"][0]["ip_addresses"]]
    assert protocols == ["IPv4", "IPv6"]
    await await_released(net)


async def test_containers_with_an_image_get_the_pods_hosts_hostname_and_resolv_conf(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    executor = networked_pod("pods")
    executor["container"]["hostname"] = "podhost"
    image = {"type": "MESOS", "mesos": {"image": {"type": "DOCKER", "docker": {"name": "netimage"}}}}
    reader = task(
        "reader",
        "hostname > $MESOS_SANDBOX/hostname; cat /etc/hosts > $MESOS_SANDBOX/hosts; "
        "cat /etc/hostname > $MESOS_SANDBOX/etc_hostname; cat /etc/resolv.conf > $MESOS_SANDBOX/resolv",
        container=image,
    )
    await framework.launch_group(await framework.offer(), executor, [reader])
    await framework.until_state([tid(reader)], "TERMINAL", 120)
    assert framework.state(tid(reader)) == "TASK_FINISHED", framework.terminal(tid(reader))[0].status
    [[ip]] = reported_ips(running_status(framework, tid(reader)))
    sandbox = task_sandbox(cluster, framework, executor, reader)
    assert (sandbox / "hostname").read_text().strip() == "podhost"
    assert (sandbox / "etc_hostname").read_text().strip() == "podhost"
    assert (sandbox / "hosts").read_text() == f"127.0.0.1 localhost\n{ip} podhost\n"
    # The plugin gave no DNS: the agent's resolv.conf, as Mesos.
    assert (sandbox / "resolv").read_text() == Path("/etc/resolv.conf").read_text()
    await await_released(net)


LISTEN = (
    "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
    "open('listening', 'w').close(); time.sleep(3600)"
)


async def test_network_ports_kills_a_host_network_task_listening_on_a_port_it_was_not_given(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    allowed = task("allowed", f"{shlex.quote(sys.executable)} -c {shlex.quote(LISTEN.format(port=31050))}",
                   resources=[scalar("cpus", 0.1), scalar("mem", 32), ports_resource(31050)])  # fmt: skip
    rogue = task("rogue", f"{shlex.quote(sys.executable)} -c {shlex.quote(LISTEN.format(port=31061))}",
                 resources=[scalar("cpus", 0.1), scalar("mem", 32), ports_resource(31060)])  # fmt: skip
    await framework.launch(await framework.offer(), [allowed])
    await framework.until_state([tid(allowed)], "TASK_RUNNING", 60)
    fw_id = framework.framework_id["value"]  # type: ignore[index]
    listening = executor_sandbox(cluster, fw_id, tid(allowed)) / "listening"
    for _ in range(300):
        if listening.exists():
            break
        await asyncio.sleep(0.1)
    await framework.launch(await framework.offer(), [rogue])
    await framework.until_state([tid(rogue)], "TERMINAL", 60)
    [ended] = framework.terminal(tid(rogue))
    assert ended.state == "TASK_FAILED"
    assert ended.reason == "REASON_CONTAINER_LIMITATION"
    assert "is listening on unallocated port(s): [31061-31061]" in ended.status["message"]
    # The check that caught the rogue saw the task listening on its own port too: left alone.
    assert listening.exists()
    assert framework.state(tid(allowed)) == "TASK_RUNNING"
    await framework.kill(tid(allowed))
    await framework.until_state([tid(allowed)], "TASK_KILLED", 60)


def ports_resource(port: int) -> Json:
    return {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": port, "end": port}]}}


async def test_http_executor_domain_sockets_serves_host_network_executors_too(net: Net) -> None:
    """--http_executor_domain_sockets, as Mesos: every executor gets MESOS_DOMAIN_SOCKET and
    Mesilla's executors (command and default) talk to the agent over it."""
    other = Cluster(net.root / "sockets", agent_flags=[
        "--launcher=linux", "--isolation=filesystem/linux,posix/cpu,posix/mem",
        "--http_executor_domain_sockets",
    ])  # fmt: skip
    try:
        other.start()
        framework = Framework(other.master_address)
        await framework.subscribe()
        try:
            command = task("cmd", 'echo "$MESOS_DOMAIN_SOCKET" > sock')
            await framework.launch(await framework.offer(), [command])
            executor = pod_executor()
            pod_task = task("pod", 'echo "$MESOS_DOMAIN_SOCKET" > sock')
            await framework.launch_group(await framework.offer(), executor, [pod_task])
            await framework.until_state([tid(command), tid(pod_task)], "TASK_FINISHED", 60)
            fw_id = framework.framework_id["value"]  # type: ignore[index]
            expected = str(other.runtime_dir() / "agent.sock")
            assert (executor_sandbox(other, fw_id, tid(command)) / "sock").read_text().strip() == expected
            assert Path(expected).is_socket()
        finally:
            await framework.close()
        assert await asyncio.to_thread(other.await_no_leftovers) == []
    finally:
        other.cleanup()


def test_the_shared_pymesos_group_check_runs_its_pod_on_the_default_network(net: Net) -> None:
    """The unmodified pymesos framework names no network; with --network_cni_default_network
    its pod lands on one anyway, and every update reports the pod's address there."""
    from tests.acceptance.test_pymesos import ACCEPTANCE, PYMESOS_PYTHON

    if not PYMESOS_PYTHON.exists() or not ACCEPTANCE.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"pymesos acceptance client missing ({PYMESOS_PYTHON}, {ACCEPTANCE})")
        pytest.skip("pymesos acceptance client not installed (scripts/setup.sh installs it)")
    other = Cluster(net.root / "default-network", agent_flags=[
        *net.agent_flags(), "--network_cni_default_network=pods",
    ])  # fmt: skip
    try:
        other.start()
        result = subprocess.run(
            [str(PYMESOS_PYTHON), str(ACCEPTANCE / "pymesos_group.py")],
            env={**os.environ, "MASTER": other.master_address, "TIMEOUT": "90", "STRICT": "1"},
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
        running = [line for line in result.stderr.splitlines() if "state=TASK_RUNNING" in line]
        assert running and all("'ip_address': '10.99.0." in line for line in running), running
        assert other.await_no_leftovers() == []
        assert net.leases() == []
    finally:
        other.cleanup()


# --- agent kill -9 and restart (last: they restart the module's agent) ---------------------


def mapped_pod(host_port: int) -> Json:
    executor = networked_pod(
        "pods", port_mappings=[{"host_port": host_port, "container_port": 80, "protocol": "tcp"}]
    )
    executor["resources"] = [*executor["resources"], ports_resource(host_port)]
    return executor


def restart_killed_agent(cluster: Cluster) -> None:
    killed_at = time.time()
    assert cluster.agents[0].kill() == -9
    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=killed_at)


def agent_log(cluster: Cluster) -> str:
    return (cluster.log_dir / "agent-0.log").read_text(errors="replace")


async def test_after_agent_kill_and_restart_the_pod_keeps_its_network_and_releases_it_at_the_end(
    net: Net, cluster: Cluster, framework: Framework
) -> None:
    executor = mapped_pod(31020)
    sleeper = task("sleeper", "sleep 3600")
    await framework.launch_group(await framework.offer(), executor, [sleeper])
    await framework.until_state([tid(sleeper)], "TASK_RUNNING", 60)
    [[ip]] = reported_ips(running_status(framework, tid(sleeper)))
    mounts_before = cluster.mounts()
    rules_before = portmap_rules()
    assert rules_before

    restart_killed_agent(cluster)
    # Recovered: the same namespace and lease, CHECKed (1.0.0 allows it), the IP still reported.
    assert cluster.mounts() == mounts_before
    assert net.leases() == [ip]
    assert portmap_rules() == rules_before
    assert "CNI CHECK of recovered container" in agent_log(cluster)
    containers = cluster.agent_call({"type": "GET_CONTAINERS"})["get_containers"]["containers"]
    entry = next(c for c in containers if c["executor_id"] == executor["executor_id"])
    assert entry["container_status"]["network_infos"][0]["ip_addresses"] == [
        {"protocol": "IPv4", "ip_address": ip}
    ]
    # The agent's /state shows the executor with its tasks' statuses and their IP.
    state = http_json(f"{cluster.agent_url()}/state")
    [shown] = [
        e for f in state["frameworks"] for e in f["executors"] if e["id"] == executor["executor_id"]["value"]
    ]
    [shown_task] = shown["tasks"]
    infos = shown_task["statuses"][-1]["container_status"]["network_infos"]
    assert [a["ip_address"] for a in infos[0]["ip_addresses"]] == [ip]

    await framework.kill(tid(sleeper))
    await framework.until_state([tid(sleeper)], "TASK_KILLED", 60)
    await await_released(net)


async def test_an_orphan_pods_network_is_released_by_the_restarted_agent(
    net: Net, cluster: Cluster
) -> None:
    # A framework that does not checkpoint: its executors are not recovered, as Mesos.
    framework = Framework(cluster.master_address, checkpoint=False)
    await framework.subscribe()
    try:
        executor = mapped_pod(31021)
        sleeper = task("sleeper", "sleep 3600")
        await framework.launch_group(await framework.offer(), executor, [sleeper])
        await framework.until_state([tid(sleeper)], "TASK_RUNNING", 60)
        assert portmap_rules() and net.leases(), "the pod's network should be there while it runs"
        containers = cluster.agent_call({"type": "GET_CONTAINERS"})["get_containers"]["containers"]
        container_name = next(
            c["container_id"]["value"] for c in containers if c["executor_id"] == executor["executor_id"]
        )
        restart_killed_agent(cluster)
        await await_released(net)
        assert f"Destroying orphan container {container_name}" in agent_log(cluster)
    finally:
        await framework.close()
