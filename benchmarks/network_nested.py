#!/usr/bin/env python3
"""Nested networking (seed 002): pod network attach latency with and without port pools, and
pod-to-pod TCP throughput across two hosts against a plain veth pair (issue #11).

Everything runs in network namespaces of its own (`mesilla.testing.nested`: a fabric with
the master, its network service and the fabric's Open vSwitch; two hosts, each with its
agent, its Open vSwitch on the userspace datapath and a trunk NIC), deleted at the end:
  - attach: CNI ADD of `mesilla-nested` (the plugin process, which forwards it to its
    agent: the agent's subport, then the veth, the OVS access port, the pod's address and
    route) until it printed its result, on host 0, into a fresh pod namespace,
    `--attaches` times without a pool and as many times from a pool
    (`--network_nested_pool_size`, refilled and plumbed ahead between two ADDs so that each
    finds a ready subport); the agent's own share (the plugin's request sent from this
    process, no plugin started) is timed the same way, and so is the interpreter's bare
    start (`python -I -S -c pass`), the floor of any Python plugin. Target: under 20 ms
    from a pool.
  - throughput: one TCP stream for `--seconds` between a pod of network A on host 0 and
    one on host 1 (pod veth, host OVS, 802.1Q trunk, the fabric's OVS, the other host),
    and between two namespaces joined by a plain veth pair, in the same run.
    Target: at least 0.5x the veth pair.

    python benchmarks/network_nested.py                     # 20 attaches each way, 5 s streams
    python benchmarks/network_nested.py --attaches=5 --seconds=2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _machine import Stats, interrupt_on_sigterm, load_average, machine_report, ratio, verdict
from pyroute2 import IPRoute

from mesilla.network.nested import plugin
from mesilla.network.nested.plumbing import host_name, pod_end_name
from mesilla.testing.nested import NestedSite, nested_site, veth
from mesilla.testing.netns import entered, network_namespace

PLUGIN = str(Path(sys.executable).parent / "mesilla-nested")
ATTACH_TARGET_MS = 20.0
THROUGHPUT_TARGET = 0.5

SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5201)); s.listen(); print("ready", flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
print(n, flush=True)
"""

CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5201), timeout=10)
chunk = b"x" * (1 << 16); n = 0; t0 = time.perf_counter(); end = t0 + float(sys.argv[2])
while time.perf_counter() < end:
    c.sendall(chunk); n += len(chunk)
c.shutdown(socket.SHUT_WR); c.recv(1); print(n, time.perf_counter() - t0)
"""


def cni(site: NestedSite, command: str, host: int, container: str, netns: str) -> tuple[int, Any]:
    env = {"PATH": os.environ["PATH"], "CNI_COMMAND": command, "CNI_CONTAINERID": container,
           "CNI_NETNS": netns, "CNI_IFNAME": "eth0", "CNI_PATH": str(Path(PLUGIN).parent)}  # fmt: skip
    with entered(site.hosts[host]):  # the plugin runs in the host's namespace, as the agent runs it
        done = subprocess.run([PLUGIN], input=json.dumps(site.cni_config(host, "a")), capture_output=True,
                              text=True, env=env, timeout=60)  # fmt: skip
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None


def pooled(site: NestedSite, host: int) -> list[str]:
    """Port ids of host's pooled subports."""
    files = (site.cluster.agent_dir(host) / "network/nested").glob("pool%2F*.json")
    return [json.loads(f.read_text())["port_id"] for f in files]


def await_pool(site: NestedSite, size: int) -> None:
    """Until host 0's pool holds `size` subports, each plumbed ahead (its veth is there, its
    host end on the switch)."""
    deadline = time.monotonic() + 60
    while True:
        ports = pooled(site, 0)
        with entered(site.hosts[0]):
            with IPRoute() as ipr:
                veths = [p for p in ports if ipr.link_lookup(ifname=pod_end_name(p))]
            switched = set(site.ovs(0).ports("br-trunk"))
        if len([p for p in veths if host_name(p) in switched]) >= size:
            time.sleep(0.05)  # the agent's last step of a preparation, after the switch's
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the pool did not fill within 60 s")
        time.sleep(0.01)


def forwarded(site: NestedSite, command: str, container: str, netns: str) -> None:
    """The plugin's request, sent from this process: the agent's own share of a CNI call."""
    env = {"CNI_CONTAINERID": container, "CNI_NETNS": netns, "CNI_IFNAME": "eth0"}
    conf = site.cni_config(0, "a")
    status, answer = plugin.forward(*plugin.request(command, conf, json.dumps(conf), env))
    if status != 200:
        raise RuntimeError(f"the agent answered {command} with {status}: {answer!r}")



def interpreter_start(runs: int) -> Stats:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
        times.append((time.perf_counter() - started) * 1000)
    return Stats.of(times)


def attach_latency(site: NestedSite, runs: int, pool: int) -> dict[str, Stats]:
    add, agent = [], []
    for i in range(runs):
        if pool:
            await_pool(site, pool)
        with network_namespace("mesilla-bpod") as name:
            started = time.perf_counter()
            rc, result = cni(site, "ADD", 0, f"bench-{pool}-{i}", f"/run/netns/{name}")
            add.append((time.perf_counter() - started) * 1000)
            if rc != 0:
                raise RuntimeError(f"ADD failed: {result}")
            cni(site, "DEL", 0, f"bench-{pool}-{i}", f"/run/netns/{name}")
        if pool:
            await_pool(site, pool)
        with network_namespace("mesilla-bpod") as name:
            started = time.perf_counter()
            forwarded(site, "ADD", f"agent-{pool}-{i}", f"/run/netns/{name}")
            agent.append((time.perf_counter() - started) * 1000)
            forwarded(site, "DEL", f"agent-{pool}-{i}", f"/run/netns/{name}")
        print(f"  attach {i + 1}/{runs} (pool {pool})", end="\r", flush=True)
    print()
    return {"add": Stats.of(add), "agent": Stats.of(agent)}


def stream(server_ns: str, client_ns: str, ip: str, seconds: float) -> float:
    """Gbit/s of one TCP stream from `client_ns` to `server_ns`."""
    server = subprocess.Popen(["nsenter", f"--net={server_ns}", sys.executable, "-c", SERVER],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None
        server.stdout.readline()
        client = ["nsenter", f"--net={client_ns}", sys.executable, "-c", CLIENT, ip, str(seconds)]
        done = subprocess.run(client, capture_output=True, text=True, check=True, timeout=seconds + 60)
        sent, elapsed = done.stdout.split()
        server.wait(30)
        return int(sent) * 8 / float(elapsed) / 1e9
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@contextmanager
def veth_pair() -> Iterator[tuple[str, str]]:
    with network_namespace("mesilla-bva") as a, network_namespace("mesilla-bvb") as b:
        veth(a, "eth0", b, "eth0")
        for ns, ip in ((a, "10.77.0.1"), (b, "10.77.0.2")):
            with IPRoute(netns=ns, flags=0) as ipr:
                index = ipr.link_lookup(ifname="eth0")[0]
                ipr.addr("add", index=index, address=ip, prefixlen=24)
                ipr.link("set", index=index, state="up")
        yield f"/run/netns/{a}", f"/run/netns/{b}"


def throughput(site: NestedSite, seconds: float) -> tuple[float, float]:
    with network_namespace("mesilla-bp0") as p0, network_namespace("mesilla-bp1") as p1:
        pods = [f"/run/netns/{p0}", f"/run/netns/{p1}"]
        results = [cni(site, "ADD", host, f"stream-{host}", pods[host]) for host in range(2)]
        try:
            for rc, result in results:
                if rc != 0:
                    raise RuntimeError(f"ADD failed: {result}")
            server_ip = results[0][1]["ips"][0]["address"].split("/")[0]
            nested = stream(pods[0], pods[1], server_ip, seconds)
        finally:
            for host in range(2):
                cni(site, "DEL", host, f"stream-{host}", pods[host])
    with veth_pair() as (a, b):
        plain = stream(a, b, "10.77.0.1", seconds)
    return nested, plain


def run(root: Path, attaches: int, pool: int, seconds: float) -> None:
    with nested_site(root) as site:
        without = attach_latency(site, attaches, 0)
        site.restart_agent(0, f"--network_nested_pool_size={pool}")
        cni(site, "ADD", 0, "warm-up", "/nonexistent")  # fails to plumb, but starts the network's pool
        with_pool = attach_latency(site, attaches, pool)
        site.restart_agent(0)  # drains the pool
        nested, plain = throughput(site, seconds)
    start = interpreter_start(attaches)
    print("\nPod network attach, CNI ADD of mesilla-nested until its result (the plugin process):")
    print(f"  without a pool  {without['add'].line()}")
    print(f"  from a pool     {with_pool['add'].line()}  -> "
          f"{verdict(with_pool['add'].p50, ATTACH_TARGET_MS)} (< {ATTACH_TARGET_MS:g} ms)")  # fmt: skip
    print("  of which the agent's answer (the plugin's request sent from this process):")
    print(f"    without a pool  {without['agent'].line()}")
    print(f"    from a pool     {with_pool['agent'].line()}")
    print(f"  the interpreter's bare start (python -I -S -c pass)  {start.line()}")
    print(f"Pod-to-pod TCP, one stream for {seconds:g} s:")
    print(f"  across hosts (OVS userspace datapath, 802.1Q trunks, fabric)  {nested:.2f} Gbit/s")
    print(f"  plain veth pair                                               {plain:.2f} Gbit/s")
    reached = verdict(nested / plain, THROUGHPUT_TARGET, lower_is_better=False)
    print(f"  ratio {ratio(nested, plain)} -> {reached} (>= {THROUGHPUT_TARGET}x)")


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--attaches", type=int, default=20)
    parser.add_argument("--pool", type=int, default=2, help="--network_nested_pool_size for the pooled runs")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("ovs-vswitchd") is None or not Path(PLUGIN).exists():
        print("network_nested.py needs root, openvswitch-switch and the installed package", file=sys.stderr)
        return 1
    print(machine_report())
    interrupt_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="mesilla-bench-nested-") as tmp:
        try:
            run(Path(tmp), args.attaches, args.pool, args.seconds)
        except KeyboardInterrupt:
            print("\ninterrupted: cleaning up", file=sys.stderr)
            return 130
        finally:
            print(f"Load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
