#!/usr/bin/env python3
"""Pod networking cost: CNI set-up per pod, and pod launch with and without a network (issue #10).

Everything runs inside a network namespace of its own (`mesilla-test-<random>`,
deleted at the end), on a bridge + host-local network on 10.99.0.0/24 run by
Debian's containernetworking-plugins:
  - set-up per pod, in the network/cni isolator itself: `prepare` of a
    container on the network (bind a new network namespace, CNI ADD of the
    bridge plugin, which runs host-local, the result and /etc files written)
    until the launch info is ready, and `cleanup` (CNI DEL, unbind), `--setups`
    times; the namespace bind alone is timed too. Target: under 30 ms p50.
  - pod launch on `mesilla local` (linux launcher, runc, network/cni): a pod
    of one task without an image, ACCEPT to its TASK_RUNNING, pods on the
    network and on the host network interleaved one by one (`--pods` each), so
    the difference is the network's share of a launch.

    python benchmarks/network.py                  # defaults: 200 set-ups, 10 pods each way
    python benchmarks/network.py --setups=50 --pods=3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cleanup import run_then_finish
from _framework import TERMINAL, Framework, FrameworkError, scalar
from _machine import Stats, start

from mesilla.containerizer.isolators.network import netns
from mesilla.containerizer.isolators.network.cni import NetworkCniIsolator
from mesilla.containerizer.types import ContainerConfig
from mesilla.testing.cluster import LocalCluster
from mesilla.testing.netns import entered, network_namespace, release_namespace_mounts
from mesilla.v1.mesos import CommandInfo, ContainerID, ContainerInfo, NetworkInfo

PLUGINS = "/usr/lib/cni"
TARGET_MS = 30.0


class _Flags(dict[str, Any]):
    """The agent flags the isolator reads."""

    def __getattr__(self, name: str) -> Any:
        return self[name]


def write_config(directory: Path, ipam: Path) -> None:
    directory.mkdir(parents=True)
    network = {
        "cniVersion": "1.0.0", "name": "bench", "type": "bridge", "bridge": "mbench0", "isGateway": True,
        "ipam": {"type": "host-local", "dataDir": str(ipam),
                 "ranges": [[{"subnet": "10.99.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]},
    }  # fmt: skip
    (directory / "bench.conf").write_text(json.dumps(network))


async def setup_cost(root: Path, config_dir: Path, runs: int) -> dict[str, Stats]:
    flags = _Flags(
        network_cni_config_dir=str(config_dir), network_cni_plugins_dir=PLUGINS,
        network_cni_plugin_timeout=60.0, runtime_dir=str(root / "isolator-run"),
        work_dir=str(root / "isolator-work"),
    )  # fmt: skip
    isolator = NetworkCniIsolator(flags)
    container_info = ContainerInfo(type="MESOS", network_infos=[NetworkInfo(name="bench")])
    prepare, cleanup, bind = [], [], []
    for i in range(runs + 1):  # the first (VERSION asked, caches cold) is not counted
        container_id = ContainerID(value=f"bench-{i}")
        sandbox = root / "sandboxes" / container_id.value
        sandbox.mkdir(parents=True)
        config = ContainerConfig(command=CommandInfo(value="true"), sandbox=str(sandbox),
                                 container_info=container_info)  # fmt: skip
        started = time.perf_counter()
        await isolator.prepare(container_id, config)
        prepared = time.perf_counter()
        await isolator.cleanup(container_id)
        done = time.perf_counter()
        if i:
            prepare.append((prepared - started) * 1000)
            cleanup.append((done - prepared) * 1000)
        path = str(root / f"ns-{i}")
        started = time.perf_counter()
        netns.create(path)
        bind.append((time.perf_counter() - started) * 1000)
        netns.remove(str(root), path)
        print(f"  set-up {i}/{runs}", end="\r", flush=True)
    print()
    return {"prepare": Stats.of(prepare), "cleanup": Stats.of(cleanup), "bind": Stats.of(bind)}


async def launch_pod(fw: Framework, cluster: LocalCluster, network: bool) -> float:
    await fw.decline_pending()
    offer = await fw.offer()
    executor_id = f"pod-{'net' if network else 'host'}-{uuid.uuid4().hex[:8]}"
    task_id = f"{executor_id}-t"
    executor: dict[str, Any] = {
        "type": "DEFAULT", "executor_id": {"value": executor_id}, "framework_id": fw.framework_id,
        "resources": [scalar("cpus", 0.1), scalar("mem", 32), scalar("disk", 10)],
    }  # fmt: skip
    if network:
        executor["container"] = {"type": "MESOS", "network_infos": [{"name": "bench"}]}
    task = {
        "name": "t", "task_id": {"value": task_id}, "agent_id": offer["agent_id"],
        "resources": [scalar("cpus", 0.1), scalar("mem", 32)], "command": {"value": "sleep 3600"},
    }  # fmt: skip
    sent = await fw.accept(offer, [{"type": "LAUNCH_GROUP",
                                     "launch_group": {"executor": executor, "task_group": {"tasks": [task]}}}])  # fmt: skip
    await fw.until(lambda: fw.first(task_id, "TASK_RUNNING") is not None or fw.states.get(task_id) in TERMINAL, 120)
    running = fw.first(task_id, "TASK_RUNNING")
    if running is None:
        raise FrameworkError(f"pod {executor_id} did not run: {fw.states.get(task_id)}")
    latency = (running.at - sent) * 1000
    await fw.call("KILL", {"task_id": {"value": task_id}, "agent_id": offer["agent_id"]})
    await fw.until(lambda: fw.states.get(task_id) in TERMINAL, 60)
    await asyncio.sleep(0.2)  # the executor's teardown is not part of the next launch
    return latency


async def launches(root: Path, config_dir: Path, cgroups_root: str, pods: int) -> dict[str, Stats]:
    cluster = LocalCluster(root / "cluster", extra_flags=[
        "--launcher=linux", "--oci_runtime=runc",
        "--isolation=filesystem/linux,posix/cpu,posix/mem,network/cni",
        f"--network_cni_config_dir={config_dir}", f"--network_cni_plugins_dir={PLUGINS}",
        f"--cgroups_root={cgroups_root}", "--resources=cpus:16;mem:16384;disk:16384",
        "--logging_level=WARNING",
    ])  # fmt: skip
    await asyncio.to_thread(cluster.start)
    fw = Framework(cluster.master, "bench-network")
    samples: dict[str, list[float]] = {"network": [], "host": []}
    try:
        await fw.start()
        await launch_pod(fw, cluster, True)  # warm-up
        await launch_pod(fw, cluster, False)
        for i in range(pods):
            order = (True, False) if i % 2 else (False, True)
            for network in order:
                samples["network" if network else "host"].append(await launch_pod(fw, cluster, network))
            print(f"  pods {i + 1}/{pods}", end="\r", flush=True)
        print()
    finally:
        await fw.close()
        await asyncio.to_thread(cluster.stop)
    return {kind: Stats.of(values) for kind, values in samples.items()}


def report(setup: dict[str, Stats], launch: dict[str, Stats]) -> None:
    print("\nCNI set-up per pod (network/cni prepare: netns bind + ADD bridge/host-local + files):")
    print(f"  prepare   {setup['prepare'].line()}  -> {'meets' if setup['prepare'].p50 < TARGET_MS else 'misses'} "
          f"target (< {TARGET_MS:g} ms)")  # fmt: skip
    print(f"  of which namespace bind  {setup['bind'].line(digits=2)}")
    print(f"  cleanup   {setup['cleanup'].line()}  (DEL + unbind)")
    print("Pod launch, ACCEPT to TASK_RUNNING (1 task, no image), interleaved:")
    print(f"  on the CNI network  {launch['network'].line()}")
    print(f"  on the host network {launch['host'].line()}")
    print(f"  network's share (p50 difference): {launch['network'].p50 - launch['host'].p50:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", type=int, default=200, help="isolator set-ups measured")
    parser.add_argument("--pods", type=int, default=10, help="pods launched each way")
    args = parser.parse_args()
    root = start(
        "network.py", "root and containernetworking-plugins", "net", ready=os.path.exists(f"{PLUGINS}/bridge")
    )
    cgroups_root = f"mesilla-bench-{uuid.uuid4().hex[:8]}"

    def body() -> None:
        with network_namespace("mesilla-test") as name, entered(name):
            config_dir, ipam = root / "cni", root / "ipam"
            write_config(config_dir, ipam)
            try:
                setup = asyncio.run(setup_cost(root, config_dir, args.setups))
                launch = asyncio.run(launches(root, config_dir, cgroups_root, args.pods))
                report(setup, launch)
            finally:
                release_namespace_mounts(str(root))

    return run_then_finish(body, root, [cgroups_root], [root / "cluster" / "agent-0" / "run"])


if __name__ == "__main__":
    sys.exit(main())
