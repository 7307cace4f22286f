"""Nested networking across two simulated hosts: trunks, VLAN subports, the fabric (seed 002).

Everything lives in network namespaces the module creates:

* the fabric: the master with its network service and the fabric's Open
  vSwitch (bridge ``br-fab``, the cloud side of the trunks), and the
  management bridge (10.251.0.0/24) the agents reach the master over;
* two hosts, each with its `mesilla agent`, its own Open vSwitch (the agent
  starts it) and a trunk NIC ``eth0``, a veth whose other end is a port of
  ``br-fab``.

Networks A and B share the CIDR 10.30.0.0/24. Pods are task groups on the
default executor whose `network_infos` name `nested-a` or `nested-b`, CNI
networks of type `mesilla-nested`. The test's own thread runs in the fabric's
namespace; the pods' namespaces are entered by path (`mesilla.testing.nested` builds the site).
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from tests.integration.faults.workload import executor_sandbox, marked_processes, pod_executor, task, tid

from mesilla.containerizer.launcher.linux import LinuxLauncher
from mesilla.testing.nested import NestedSite, nested_site
from mesilla.testing.netns import entered, run_in
from mesilla.testing.processes import http_json
from mesilla.testing.scheduler import Framework, Json

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("ovs-vswitchd") is None or shutil.which("tcpdump") is None,
                       reason="needs openvswitch-switch and tcpdump"),
]

SUBPORT = "trunk:subport"
# Until the file `stop` appears in the pod's (the executor's) sandbox.
UNTIL_STOPPED = "until [ -e ../../stop ]; do sleep 0.2; done"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NestedSite]:
    if not LinuxLauncher.available():
        pytest.skip("needs conmon and an OCI runtime that runs containers here")
    with nested_site(tmp_path_factory.mktemp("nested")) as made:
        yield made


@pytest.fixture
async def framework(site: NestedSite) -> AsyncIterator[Framework]:
    with entered(site.fabric):
        framework = Framework(site.cluster.master_address)
        await framework.subscribe()
        try:
            yield framework
        finally:
            await framework.close()


# --- pods ----------------------------------------------------------------------------


class Pod:
    def __init__(self, host: int, network: str, executor: Json, task_info: Json) -> None:
        self.host = host
        self.network = network
        self.executor = executor
        self.task = task_info
        self.ip = ""
        self.netns = ""

    @property
    def task_id(self) -> str:
        return tid(self.task)


async def offer_of(framework: Framework, site: NestedSite, host: int) -> Json:
    """An offer of agent `host`'s resources (the others are kept for later)."""
    wanted = site.cluster.agent_in_master(host)
    assert wanted is not None
    aside = []
    try:
        while True:
            offer = await framework.offer(60)
            if offer["agent_id"]["value"] == wanted["id"]:
                return offer
            aside.append(offer)
    finally:
        framework.offers[:0] = aside


async def launch(framework: Framework, site: NestedSite, host: int, network: str) -> Pod:
    executor = {**pod_executor(f"pod-{network}{host}"),
                "container": {"type": "MESOS", "network_infos": [{"name": f"nested-{network}"}]}}  # fmt: skip
    pod = Pod(host, network, executor, task(f"{network}{host}", f"{UNTIL_STOPPED} # pod {network}{host}"))
    await framework.launch_group(await offer_of(framework, site, host), executor, [pod.task])
    await framework.until_state([pod.task_id], "TASK_RUNNING", 90)
    running = next(
        u.status for u in framework.updates if u.task_id == pod.task_id and u.state == "TASK_RUNNING"
    )
    [info] = running["container_status"]["network_infos"]
    pod.ip = info["ip_addresses"][0]["ip_address"]
    pod.netns = pod_netns(site, pod)
    return pod


def pod_netns(site: NestedSite, pod: Pod) -> str:
    """The pod's namespace file, bound under its agent's CNI root by the executor's container id."""
    root = site.cluster.runtime_dir(pod.host) / "isolators/network/cni"
    [found] = [p / "ns" for p in root.iterdir()
               if (p / f"nested-{pod.network}").is_dir() and _container_of(site, pod) == p.name]  # fmt: skip
    return str(found)


def _container_of(site: NestedSite, pod: Pod) -> str:
    for entry in site.cluster.agent_call({"type": "GET_CONTAINERS"}, pod.host)["get_containers"][
        "containers"
    ]:
        if entry["executor_id"]["value"] == pod.executor["executor_id"]["value"]:
            return str(entry["container_id"]["value"])
    raise AssertionError(f"no container of {pod.executor['executor_id']}")


def ping(site: NestedSite, source: Pod, ip: str, *extra: str) -> bool:
    done = run_in(source.netns, "busybox", "ping", "-c", "2", "-W", "2", *extra, ip, check=False)
    return done.returncode == 0


def subports(site: NestedSite, i: int) -> list[Json]:
    subs: list[Json] = http_json(f"{site.service_url}v2.0/trunks/{site.trunks[i]}/get_subports")["sub_ports"]
    return subs


def pod_ports(site: NestedSite) -> list[Json]:
    ports: list[Json] = http_json(f"{site.service_url}v2.0/ports?device_owner={SUBPORT}")["ports"]
    return ports


def leftovers(site: NestedSite) -> list[str]:
    """What a pod's network leaves if it is not released (the cluster's own leftovers too)."""
    left = [f"subport {s['port_id']} of trunk {i}" for i in range(2) for s in subports(site, i)]
    left += [f"port {p['id']} ({p['fixed_ips']})" for p in pod_ports(site)]
    for i in range(2):
        left += [f"ovs port {p} on host {i}" for p in site.ovs(i).ports("br-trunk") if p != "eth0"]
        links = run_in(site.hosts[i], "ip", "-br", "link").stdout.split("\n")
        left += [f"link {line.split()[0]} on host {i}" for line in links if line.startswith("mn")]
        bindings = site.cluster.agent_dir(i) / "network/nested"
        left += [f"binding {b.name}" for b in bindings.iterdir()] if bindings.is_dir() else []
        cni = site.cluster.runtime_dir(i) / "isolators/network/cni"
        left += [f"cni dir {p.name}" for p in cni.iterdir()] if cni.is_dir() else []
    ovs_pids = {pid for ovs in (site.ovs(0), site.ovs(1), site.fabric_ovs()) for pid in ovs.pids().values()}
    left += [x for x in site.cluster.leftovers()
             if not any(x.startswith(f"process {pid}:") for pid in ovs_pids)]  # fmt: skip
    return left


async def await_released(site: NestedSite) -> None:
    for _ in range(300):
        if not leftovers(site):
            return
        await asyncio.sleep(0.1)
    assert leftovers(site) == []


# --- the test --------------------------------------------------------------------------


async def test_pods_on_nested_networks_across_two_hosts(site: NestedSite, framework: Framework) -> None:
    # B first on host 1: VLAN 1 carries A on trunk 0 and B on trunk 1.
    a0 = await launch(framework, site, 0, "a")
    b1 = await launch(framework, site, 1, "b")
    a1 = await launch(framework, site, 1, "a")
    vlans = {(i, s["port_id"]): s["segmentation_id"] for i in range(2) for s in subports(site, i)}
    assert sorted(vlans.values()) == [1, 1, 2]
    ports = {p["id"]: p for p in pod_ports(site)}
    by_vlan = {(i, v): ports[p]["network_id"] for (i, p), v in vlans.items()}
    assert by_vlan[(0, 1)] == site.networks["a"] and by_vlan[(1, 1)] == site.networks["b"]
    # Same CIDR, separate IPAM: B's pod has A's first pod's address.
    assert a0.ip == b1.ip == "10.30.0.2" and a1.ip == "10.30.0.3"

    # A reaches A across hosts (ICMP), B does not reach A, either way.
    assert ping(site, a1, a0.ip) and ping(site, a0, a1.ip)
    assert not ping(site, b1, a1.ip)  # same host, same CIDR, other network
    assert not ping(site, a0, "10.30.0.4")
    # TCP with busybox nc, across the userspace datapaths.
    server = subprocess.Popen(["nsenter", f"--net={a0.netns}", "busybox", "nc", "-l", "-p", "7777"],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        sent = False
        for _ in range(50):
            done = run_in(a1.netns, "sh", "-c", f"echo nested-hello | busybox nc -w 5 {a0.ip} 7777",
                          check=False)  # fmt: skip
            if done.returncode == 0:
                sent = True
                break
            time.sleep(0.1)
        assert sent, done.stderr
        out, _ = server.communicate(timeout=30)
        assert out.strip() == "nested-hello"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()

    # Frames on host 1's trunk NIC carry 802.1Q tags (A is VLAN 2 there).
    capture = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{site.hosts[1]}", "tcpdump", "-i", "eth0", "-e", "-nn", "-c", "2",
         "-l", "vlan and icmp"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        for _ in range(20):
            ping(site, a1, a0.ip)
            if capture.poll() is not None:
                break
        out, _ = capture.communicate(timeout=30)
    finally:
        if capture.poll() is None:
            capture.kill()
            capture.wait()
    assert "ethertype 802.1Q" in out and "vlan 2," in out and f"{a1.ip} > {a0.ip}" in out, out

    # Anti-spoofing: another source IP, then another source MAC, are dropped by the fabric.
    ns = a1.netns
    run_in(ns, "ip", "addr", "add", "10.30.0.99/24", "dev", "eth0")
    try:
        assert not ping(site, a1, a0.ip, "-I", "10.30.0.99")
        assert ping(site, a1, a0.ip)  # its own address still passes
    finally:
        run_in(ns, "ip", "addr", "del", "10.30.0.99/24", "dev", "eth0")
    [mac] = [p["mac_address"] for p in pod_ports(site) if p["fixed_ips"][0]["ip_address"] == a1.ip
             and p["network_id"] == site.networks["a"]]  # fmt: skip
    assert f"link/ether {mac}" in run_in(ns, "ip", "-o", "link", "show", "eth0").stdout
    run_in(ns, "ip", "link", "set", "eth0", "address", "fa:16:3e:99:99:99")
    try:
        run_in(a0.netns, "ip", "neigh", "flush", "all")
        assert not ping(site, a1, a0.ip)
    finally:
        run_in(ns, "ip", "link", "set", "eth0", "address", mac)
        run_in(a0.netns, "ip", "neigh", "flush", "all")
    assert ping(site, a1, a0.ip)

    # kill -9 of host 1's agent: its pods keep their network; one ends while it is down,
    # and the restarted agent releases that one's subport, the other's once it ends.
    site.cluster.agents[1].kill(signal.SIGKILL)
    assert ping(site, a1, a0.ip)
    assert marked_processes(site.cluster, "# pod b1")
    stop(site, framework, b1)
    for _ in range(300):  # b1's task ends while its agent is down
        if not marked_processes(site.cluster, "# pod b1"):
            break
        await asyncio.sleep(0.1)
    assert not marked_processes(site.cluster, "# pod b1")
    site.start_agent(1)
    await framework.until_state([b1.task_id], "TASK_FINISHED", 60)
    assert ping(site, a1, a0.ip)
    for _ in range(300):
        if len(subports(site, 1)) == 1:
            break
        await asyncio.sleep(0.1)
    assert [s["segmentation_id"] for s in subports(site, 1)] == [2]  # a1's; b1's VLAN 1 is free again
    for pod in (a0, a1):
        stop(site, framework, pod)
    await framework.until_state([a0.task_id, a1.task_id], "TASK_FINISHED", 60)
    await await_released(site)


def stop(site: NestedSite, framework: Framework, pod: Pod) -> None:
    fw_id = framework.framework_id["value"]  # type: ignore[index]
    (executor_sandbox(site.cluster, fw_id, pod.executor["executor_id"]["value"], pod.host) / "stop").touch()
