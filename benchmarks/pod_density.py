#!/usr/bin/env python3
"""Memory per pod on a dense agent (issue #14, item 5).

`--pods` (100) pods of one task (`sleep 3600`, the busybox image) are launched
one after the other on one `mesilla local` agent (linux launcher, as
`pods.py`) and left running. With all of them up, the benchmark reads
`/proc/<pid>/smaps_rollup` of every pod's executor process (the child of its
container's tini, the pid from the agent's GET_CONTAINERS), of every conmon
monitor (the `monitor/pid` files under the agent's runtime directory), and of
the containers' inits (tini). PSS counts a page shared by n processes as 1/n
in each, so the sum over the executors divided by their number is what one
more pod costs in executor memory; RSS and the private part are printed
beside it. Targets: under 10 MB PSS per executor, conmon under 2 MB each.
Then every pod is killed and the cluster stopped; everything lives under one
temporary directory, removed at the end also after an error, Ctrl-C or SIGTERM.

    python benchmarks/pod_density.py               # 100 pods
    python benchmarks/pod_density.py --pods=20     # quick
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cleanup import monitor_pids, run_then_finish
from _framework import Framework
from _machine import Stats, start, verdict
from pods import MesillaPods, RunningPod

from mesilla.testing.cluster import LocalCluster
from mesilla.testing.images import build_image, push_image
from mesilla.testing.registry import start_registry

TARGET_EXECUTOR_PSS_MB = 10
TARGET_CONMON_MB = 2
FIELDS = ("Rss", "Pss", "Private_Clean", "Private_Dirty")


def rollup(pid: int) -> dict[str, int] | None:
    """The kB fields of /proc/<pid>/smaps_rollup; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            lines = [line.split() for line in f]
    except OSError:
        return None
    return {p[0][:-1]: int(p[1]) for p in lines if len(p) == 3 and p[0][:-1] in FIELDS}


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def is_forked_monitor(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"mesilla.executor.zygote" in f.read()
    except OSError:
        return False


@dataclass
class Group:
    """The memory of one kind of process, one rollup each."""

    name: str
    rollups: list[dict[str, int]] = field(default_factory=list)

    def add(self, pid: int) -> None:
        found = rollup(pid)
        if found is not None:
            self.rollups.append(found)

    def report(self, target_mb: float | None = None, figure: str = "Pss") -> str:
        n = len(self.rollups)
        if not n:
            return f"  {self.name}: none found"

        def mb(key: str) -> float:
            return sum(r.get(key, 0) for r in self.rollups) / n / 1024

        private = mb("Private_Clean") + mb("Private_Dirty")
        line = (f"  {self.name} (n={n}): PSS {mb('Pss'):.2f} MB, RSS {mb('Rss'):.2f} MB, "
                f"private {private:.2f} MB per process (mean)")  # fmt: skip
        if target_mb is not None:
            value = mb(figure)
            line += f" (target {figure} < {target_mb} MB -> {verdict(value, target_mb)})"
        return line


async def run(args: argparse.Namespace, root: Path, cgroups_root: str) -> None:
    registry = start_registry()
    try:
        push_image(registry.url, "library/busybox", "latest", build_image())
        image = f"{registry.host}/library/busybox:latest"
        cluster = LocalCluster(root / "cluster", extra_flags=[
            "--launcher=linux", "--oci_runtime=runc", f"--isolation={args.isolation}",
            "--image_providers=docker", f"--docker_registry={registry.url}",
            f"--docker_store_dir={root / 'cluster' / 'store'}", "--image_provisioner_backend=overlay",
            f"--cgroups_root={cgroups_root}",
            f"--resources=cpus:{args.pods};mem:{64 * args.pods + 1024};disk:{16 * args.pods + 1024}",
            "--logging_level=WARNING",
        ])  # fmt: skip
        await asyncio.to_thread(cluster.start)
        try:
            await measure(args, cluster, image, root)
        finally:
            await asyncio.to_thread(cluster.stop)
    finally:
        registry.stop()


async def measure(args: argparse.Namespace, cluster: LocalCluster, image: str, root: Path) -> None:
    framework = Framework(cluster.master, "bench-pod-density")
    running: list[RunningPod] = []
    pods = MesillaPods(cluster, framework, image)
    try:
        await framework.start()
        print("Warm-up: one pod (pulls the image into the agent's store) ...", flush=True)
        await pods.launch(1)
        for i in range(args.pods):
            running.append(await pods.start(1, executor=False))
            print(f"  pod {i + 1}/{args.pods} running", end="\r", flush=True)
        print()
        await asyncio.sleep(args.settle)  # the last executors' start-up garbage collected
        executors, inits, conmons = Group("executors"), Group("containers' inits (tini)"), Group("conmon")
        # A forked executor (--fork_default_executors) has the zygote's monitor for parent.
        forked = Group("zygote monitors (forked executors' parents)")
        pids = await pods.executor_pids()
        for pod in running:
            pid = pids.get(pod.executor_id)
            if pid is None:
                continue
            executors.add(pid)
            init = parent_of(pid)
            if init is not None and init != pid:
                (forked if is_forked_monitor(init) else inits).add(init)
        for pid in monitor_pids(root / "cluster" / "agent-0" / "run"):
            conmons.add(pid)
        latency = Stats.of([p.sample.latency_ms for p in running])
        print(f"\n{len(running)} pods of one task running on one agent:")
        print(executors.report(TARGET_EXECUTOR_PSS_MB))
        print(inits.report())
        print(forked.report())
        print(conmons.report(TARGET_CONMON_MB, "Rss"))
        print(f"  launch latency while the agent filled up: {latency.line()}")
        print("Stopping the pods (all at once) ...", flush=True)
    finally:
        try:
            if running:
                await pods.stop(*running)
        finally:
            await framework.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100, help="pods of one task left running together")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between the last launch and reading")
    parser.add_argument("--isolation", default="filesystem/linux,docker/runtime,posix/cpu,posix/mem")
    args = parser.parse_args()
    root = start("pod_density.py", "root (the linux launcher)", "density")
    cgroups_root = f"mesilla-bench-{uuid.uuid4().hex[:8]}"
    return run_then_finish(
        lambda: asyncio.run(run(args, root, cgroups_root)),
        root, [cgroups_root], [root / "cluster" / "agent-0" / "run"],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
