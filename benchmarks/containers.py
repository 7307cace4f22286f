#!/usr/bin/env python3
"""Container launch latency and density of the Mesilla containerizer (issue #3).

Part 1, side by side in one run, launch-to-running latency (median, p90 over
`--runs` launches of each kind, interleaved so that noise hits all alike):
  (a) Mesilla's Containerizer, linux launcher, no image (host view + sandbox);
  (b) the same with the busybox image (pulled from a local docker-registry
      beforehand, overlay backend: each launch mounts a fresh overlay);
  (c) raw `runc run -d` of an equivalent bundle: the very config.json Mesilla
      generated for (a) and (b) (same mounts, namespaces, cgroup layout, argv),
      with the busybox rootfs extracted once for the image case;
  plus raw `runc create` + `runc start` (what Mesilla does through conmon).
"Running" is when the launch call returns: the runtime has started the user
process (`runc start` / `runc run -d` returned), for Mesilla and runc alike.

Part 2: `--count` containers of `sleep 3600` launched on one containerizer with
at most `--concurrency` launches in flight, then all destroyed: time up, time
down, and the supervision's memory per container (RSS and PSS of each
container's conmon monitor). The baseline, right after: `--baseline-count`
raw `runc run -d` of the same bundle with as many in flight, then `runc delete
--force` of each; the ratios compare the time per container.

Needs root, runc, conmon and docker-registry. Everything lives under a fresh
temporary directory and its own cgroups root, and is removed at the end, also
after an error, Ctrl-C or SIGTERM (containers by id, monitors by the pid they
recorded, mounts under our directory, our cgroups).

    python benchmarks/containers.py --runs=5 --count=50      # quick
    python benchmarks/containers.py                           # defaults: 20 runs, 1,000 containers
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cleanup import sweep
from _machine import (
    Stats,
    load_average,
    pss_kb,
    ratio,
    start,
    status_kb,
    verdict,
)

from mesilla.common.flags import parse
from mesilla.containerizer.containerizer import (
    Containerizer,
    ContainerLaunchError,
    LaunchResult,
)
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.types import ContainerConfig, ContainerState
from mesilla.testing.images import build_image, push_image
from mesilla.testing.registry import Registry, start_registry
from mesilla.v1.mesos import (
    CommandInfo,
    ContainerID,
    ContainerInfo,
    Image,
    ImageDocker,
    MesosInfo,
)

COMMAND = "sleep 3600"
TARGET_RATIO = 1.5
TARGET_UP_S = 20.0
TARGET_DOWN_S = 10.0
TARGET_MONITOR_MB = 3.0


@dataclass
class Workspace:
    """Everything the benchmark creates, so that `sweep` can remove it whatever happened."""

    root: Path
    cgroups_root: str  # Mesilla's containers
    raw_cgroups_root: str  # raw runc's containers
    registry: Registry | None = None

    @property
    def runtime_dir(self) -> Path:
        return self.root / "run"

    @property
    def raw_root(self) -> Path:
        """runc's state directory (`--root`) for the raw baseline."""
        return self.root / "raw" / "state"

    def sandbox(self, name: str) -> str:
        path = self.root / "sandboxes" / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def sweep(self) -> list[str]:
        """Removes whatever is left; returns what it had to remove (empty after a clean run)."""
        if self.registry is not None:
            self.registry.stop()
            self.registry = None
        return sweep(self.root, [self.cgroups_root, self.raw_cgroups_root], [self.runtime_dir],
                     (self.raw_root,))  # fmt: skip


# --- part 1: launch latency -------------------------------------------------------


def image_info(name: str) -> ContainerInfo:
    return ContainerInfo(type="MESOS", mesos=MesosInfo(image=Image(type="DOCKER", docker=ImageDocker(name=name))))


class MesillaKind:
    """Launches through the Containerizer; (a) without image, (b) with one."""

    def __init__(self, containerizer: Containerizer, ws: Workspace, image: str | None) -> None:
        self.containerizer = containerizer
        self.ws = ws
        self.image = image

    def config(self, name: str) -> ContainerConfig:
        return ContainerConfig(
            command=CommandInfo(value=COMMAND),
            sandbox=self.ws.sandbox(name),
            container_info=image_info(self.image) if self.image else None,
        )

    async def launch(self, name: str) -> float:
        container_id = ContainerID(value=name)
        config = self.config(name)
        start = time.perf_counter()
        result = await self.containerizer.launch(container_id, config)
        elapsed = time.perf_counter() - start
        if result != LaunchResult.SUCCESS or self.containerizer.state(container_id) != ContainerState.RUNNING:
            raise RuntimeError(f"container {name}: launch answered {result}, state "
                               f"{self.containerizer.state(container_id)}")  # fmt: skip
        return elapsed

    def bundle_config(self, name: str) -> dict[str, Any]:
        """The OCI config Mesilla generated for a running container (the raw baseline's model)."""
        directory = self.containerizer.launcher.directory(ContainerID(value=name))  # type: ignore[attr-defined]
        with open(os.path.join(directory, "bundle", "config.json")) as f:
            config: dict[str, Any] = json.load(f)
        return config

    async def destroy(self, name: str) -> None:
        await self.containerizer.destroy(ContainerID(value=name))


class RawRuncKind:
    """`runc run -d` (or create + start) of a bundle made from Mesilla's own config."""

    def __init__(self, ws: Workspace, model: dict[str, Any], model_sandbox: str, rootfs: str,
                 create_start: bool = False) -> None:  # fmt: skip
        self.ws = ws
        self.model = model
        self.model_sandbox = model_sandbox
        self.rootfs = rootfs
        self.create_start = create_start

    def _bundle(self, name: str) -> tuple[str, str]:
        sandbox = self.ws.sandbox(name)
        bundle = self.ws.root / "raw" / "bundles" / name
        bundle.mkdir(parents=True)
        text = json.dumps(self.model).replace(self.model_sandbox, sandbox)
        config = json.loads(text)
        config["root"]["path"] = self.rootfs
        config["linux"]["cgroupsPath"] = f"/{self.ws.raw_cgroups_root}/{name}"
        (bundle / "config.json").write_text(json.dumps(config))
        return str(bundle), sandbox

    def _runc(self, *args: str, stdout: Any = subprocess.DEVNULL, stderr: Any = subprocess.PIPE) -> str:
        done = subprocess.run(["runc", "--root", str(self.ws.raw_root), *args], check=False,
                              stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)  # fmt: skip
        if done.returncode != 0:
            error = done.stderr.decode(errors="replace").strip() if isinstance(done.stderr, bytes) else ""
            raise RuntimeError(f"runc {args[0]} failed ({done.returncode}): {error}")
        return done.stdout.decode() if isinstance(done.stdout, bytes) else ""

    async def launch(self, name: str) -> float:
        # In a thread: plain blocking calls are the least overhead the baseline can have.
        return await asyncio.to_thread(self._launch, name)

    def _launch(self, name: str) -> float:
        bundle, sandbox = self._bundle(name)
        with open(os.path.join(sandbox, "stdout"), "wb") as out, open(os.path.join(sandbox, "stderr"), "wb") as err:
            start = time.perf_counter()
            if self.create_start:
                self._runc("create", "--bundle", bundle, name, stdout=out, stderr=err)
                self._runc("start", name)
            else:
                self._runc("run", "-d", "--bundle", bundle, name, stdout=out, stderr=err)
            elapsed = time.perf_counter() - start
        status = json.loads(self._runc("state", name, stdout=subprocess.PIPE)).get("status")
        if status != "running":
            raise RuntimeError(f"raw runc container {name} is not running: {status}; "
                               f"stderr: {Path(sandbox, 'stderr').read_text()[-500:]}")  # fmt: skip
        return elapsed

    async def destroy(self, name: str) -> None:
        await asyncio.to_thread(self._runc, "delete", "--force", name)
        shutil.rmtree(self.ws.root / "raw" / "bundles" / name, ignore_errors=True)


def extract_rootfs(image: Any, directory: Path) -> str:
    """The image's layers unpacked in order, as a prepared bundle's rootfs (whiteouts not needed:
    the benchmark image has a single layer)."""
    directory.mkdir(parents=True)
    for layer in image.layers:
        with tarfile.open(fileobj=io.BytesIO(layer.tar)) as tar:
            tar.extractall(directory, filter="tar")
    return str(directory)


def copy_host_view(rootfs: str, directory: Path) -> str:
    """The no-image rootfs Mesilla made (top-level symlinks; the rest is bind mounts in config)."""
    shutil.copytree(rootfs, directory, symlinks=True)
    return str(directory)


@dataclass
class Baselines:
    """Raw runc kinds built from the configs Mesilla generated for one container of each kind."""

    no_image: RawRuncKind
    no_image_create_start: RawRuncKind
    busybox: RawRuncKind


async def prepare_baselines(containerizer: Containerizer, ws: Workspace, image_name: str, image: Any) -> Baselines:
    # Also the warm-up: pulls the image and loads Mesilla's code paths.
    models = {}
    for kind, name in ((MesillaKind(containerizer, ws, None), "warm-a"),
                       (MesillaKind(containerizer, ws, image_name), "warm-b")):  # fmt: skip
        await kind.launch(name)
        models[name] = (kind.bundle_config(name), ws.sandbox(name))
        if name == "warm-a":
            host_view = copy_host_view(models[name][0]["root"]["path"], ws.root / "raw" / "rootfs-host")
        await kind.destroy(name)
    busybox = extract_rootfs(image, ws.root / "raw" / "rootfs-busybox")
    baselines = Baselines(
        RawRuncKind(ws, *models["warm-a"], host_view),
        RawRuncKind(ws, *models["warm-a"], host_view, create_start=True),
        RawRuncKind(ws, *models["warm-b"], busybox),
    )
    for raw in (baselines.no_image, baselines.no_image_create_start, baselines.busybox):
        name = f"warm-{uuid.uuid4().hex[:6]}"
        await raw.launch(name)
        await raw.destroy(name)
    return baselines


async def latency(containerizer: Containerizer, ws: Workspace, image_name: str, baselines: Baselines,
                  runs: int) -> dict[str, list[float]]:  # fmt: skip
    kinds: dict[str, MesillaKind | RawRuncKind] = {
        "(a) mesilla, no image": MesillaKind(containerizer, ws, None),
        "(c) runc run -d, no image": baselines.no_image,
        "(c') runc create+start, no image": baselines.no_image_create_start,
        "(b) mesilla, busybox/overlay": MesillaKind(containerizer, ws, image_name),
        "(c) runc run -d, busybox": baselines.busybox,
    }
    samples: dict[str, list[float]] = {label: [] for label in kinds}
    for i in range(runs):
        for n, (label, kind) in enumerate(kinds.items()):
            name = f"lat-{n}-{i}"
            samples[label].append(await kind.launch(name) * 1000)
            await kind.destroy(name)
        print(f"  run {i + 1}/{runs}", end="\r", flush=True)
    print()
    return samples


def report_latency(samples: dict[str, list[float]]) -> None:
    stats = {label: Stats.of(values) for label, values in samples.items()}
    print(f"\nLaunch-to-running latency, {next(iter(stats.values())).n} launches each (ms):")
    width = max(len(label) for label in stats)
    for label, s in stats.items():
        print(f"  {label:<{width}}  p50 {s.p50:7.1f}  p90 {s.p90:7.1f}  p99 {s.p99:7.1f}  "
              f"min {s.min:7.1f}  max {s.max:7.1f}")  # fmt: skip
    pairs = [
        ("(a) mesilla, no image", "(c) runc run -d, no image"),
        ("(a) mesilla, no image", "(c') runc create+start, no image"),
        ("(b) mesilla, busybox/overlay", "(c) runc run -d, busybox"),
    ]
    print(f"\nRatios (median / median; target <= {TARGET_RATIO}x raw runc):")
    for mine, raw in pairs:
        value = stats[mine].p50 / stats[raw].p50
        print(f"  {mine} vs {raw}: {ratio(stats[mine].p50, stats[raw].p50)} "
              f"(p90 {ratio(stats[mine].p90, stats[raw].p90)}) -> {verdict(value, TARGET_RATIO)}")  # fmt: skip


# --- part 2: many containers ------------------------------------------------------


@dataclass
class UpDown:
    launched: list[str]
    failures: list[str]
    latencies_ms: list[float]
    up_s: float
    down_s: float = 0.0


async def bring_up(kind: MesillaKind | RawRuncKind, names: list[str], concurrency: int, label: str) -> UpDown:
    gate = asyncio.Semaphore(concurrency)
    result = UpDown([], [], [], 0.0)

    async def up(name: str) -> None:
        async with gate:
            try:
                result.latencies_ms.append(await kind.launch(name) * 1000)
                result.launched.append(name)
            except (ContainerLaunchError, RuntimeError, OSError) as exc:  # measured, not asserted: counted
                result.failures.append(f"{name}: {exc}")
            if len(result.launched) % 50 == 0:
                print(f"  {label}: up {len(result.launched)}/{len(names)}", end="\r", flush=True)

    start = time.perf_counter()
    await asyncio.gather(*(up(name) for name in names))
    result.up_s = time.perf_counter() - start
    print()
    return result


async def bring_down(kind: MesillaKind | RawRuncKind, result: UpDown, concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def down(name: str) -> None:
        async with gate:
            await kind.destroy(name)

    start = time.perf_counter()
    await asyncio.gather(*(down(name) for name in result.launched))
    result.down_s = time.perf_counter() - start


async def many(containerizer: Containerizer, ws: Workspace, raw: RawRuncKind, count: int, baseline_count: int,
               concurrency: int) -> None:  # fmt: skip
    kind = MesillaKind(containerizer, ws, None)
    print(f"\n{count} containers of `{COMMAND}` (no image), at most {concurrency} launches in flight:")
    own_before = status_kb(os.getpid()) or 0
    mine = await bring_up(kind, [f"many-{i:05d}" for i in range(count)], concurrency, "mesilla")
    rss, pss, monitors = memory_of_monitors(containerizer, mine.launched)
    own_after = status_kb(os.getpid()) or 0
    await bring_down(kind, mine, concurrency)

    # The baseline: raw `runc run -d` of the same bundle, as many in flight, then `runc delete --force`.
    theirs = await bring_up(raw, [f"raw-{i:05d}" for i in range(baseline_count)], concurrency, "runc")
    await bring_down(raw, theirs, concurrency)

    n, m = len(mine.launched), len(theirs.launched)
    print(f"  mesilla up:   {n} running in {mine.up_s:.2f} s ({n / mine.up_s:.1f}/s){per_thousand(mine.up_s, n)}; "
          f"target < {TARGET_UP_S:.0f} s for 1,000 -> {verdict(mine.up_s * 1000 / max(n, 1), TARGET_UP_S)}")  # fmt: skip
    print(f"  mesilla down: {n} destroyed in {mine.down_s:.2f} s ({n / mine.down_s:.1f}/s)"
          f"{per_thousand(mine.down_s, n)}; target < {TARGET_DOWN_S:.0f} s for 1,000 -> "
          f"{verdict(mine.down_s * 1000 / max(n, 1), TARGET_DOWN_S)}")  # fmt: skip
    if m:
        print(f"  runc up:      {m} running in {theirs.up_s:.2f} s ({m / theirs.up_s:.1f}/s)"
              f"{per_thousand(theirs.up_s, m)}; mesilla/runc per container "
              f"{ratio(mine.up_s / max(n, 1), theirs.up_s / m)}")  # fmt: skip
        print(f"  runc down:    {m} deleted in {theirs.down_s:.2f} s ({m / theirs.down_s:.1f}/s)"
              f"{per_thousand(theirs.down_s, m)}; mesilla/runc per container "
              f"{ratio(mine.down_s / max(n, 1), theirs.down_s / m)}")  # fmt: skip
    for label, result in (("mesilla", mine), ("runc", theirs)):
        if result.failures:
            print(f"  {label}: {len(result.failures)} launches failed, first: {result.failures[0]}")
        if result.latencies_ms:
            print(f"  {label}: per launch with {concurrency} in flight: {Stats.of(result.latencies_ms).line()}")
    if monitors:
        per_rss = rss / monitors / 1024
        print(f"  supervision: {monitors} conmon monitors, RSS {rss / 1024:.0f} MB in all, "
              f"{per_rss:.2f} MB per container (target < {TARGET_MONITOR_MB:.0f} MB -> "
              f"{verdict(per_rss, TARGET_MONITOR_MB)}); PSS {pss / monitors / 1024:.2f} MB per container")  # fmt: skip
    if n:
        print(f"  the containerizer's own process grew by {(own_after - own_before) / 1024:.0f} MB "
              f"({(own_after - own_before) / n:.0f} kB per container)")  # fmt: skip


def per_thousand(seconds: float, count: int) -> str:
    """Linear extrapolation to 1,000 containers, shown only for other counts."""
    return "" if count == 1000 or count == 0 else f" (linearly {seconds * 1000 / count:.1f} s for 1,000)"


def memory_of_monitors(containerizer: Containerizer, names: list[str]) -> tuple[int, int, int]:
    """Sum of VmRSS and PSS (kB) of each container's conmon, and how many were read."""
    rss = pss = counted = 0
    launcher: Any = containerizer.launcher
    for name in names:
        pid_file = os.path.join(launcher.directory(ContainerID(value=name)), "monitor", "pid")
        try:
            pid = int(Path(pid_file).read_text().strip())
        except (OSError, ValueError):
            continue
        r, p = status_kb(pid), pss_kb(pid)
        if r is not None and p is not None:
            rss, pss, counted = rss + r, pss + p, counted + 1
    return rss, pss, counted


# --- the run ------------------------------------------------------------------------


async def run(args: argparse.Namespace, ws: Workspace) -> None:
    ws.registry = start_registry()
    image = build_image()
    push_image(ws.registry.url, "library/busybox", "latest", image)
    image_name = f"{ws.registry.host}/library/busybox:latest"
    flags = parse(
        CONTAINERIZER_FLAGS,
        [
            f"--runtime_dir={ws.runtime_dir}",
            "--launcher=linux",
            "--oci_runtime=runc",
            f"--isolation={args.isolation}",
            "--image_providers=docker",
            f"--docker_store_dir={ws.root / 'store'}",
            f"--docker_registry={ws.registry.url}",
            f"--image_provisioner_backend={args.backend}",
            f"--cgroups_root={ws.cgroups_root}",
        ],
        environ={},
    )
    containerizer = await Containerizer.create(flags)
    await containerizer.recover(set())
    print(f"Containerizer: launcher linux (runc + conmon), isolation {args.isolation}, "
          f"backend {args.backend}, registry {ws.registry.url}")  # fmt: skip
    try:
        # Threads for the raw runc baseline's blocking calls, as many as launches in flight.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=args.concurrency + 4))
        baselines = await prepare_baselines(containerizer, ws, image_name, image)
        if args.runs > 0:
            report_latency(await latency(containerizer, ws, image_name, baselines, args.runs))
        if args.count > 0:
            baseline_count = min(args.count, args.baseline_count) if args.baseline_count else args.count
            await many(containerizer, ws, baselines.no_image, args.count, baseline_count, args.concurrency)
    finally:
        await asyncio.gather(*(containerizer.destroy(c) for c in containerizer.containers()),
                             return_exceptions=True)  # fmt: skip
        await containerizer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="launches per kind for the latency table (0 skips)")
    parser.add_argument("--count", type=int, default=1000, help="containers launched at once (0 skips)")
    parser.add_argument("--baseline-count", type=int, default=250,
                        help="raw runc containers for the up/down baseline (0: as many as --count)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=16, help="launches (and destroys) in flight")
    parser.add_argument("--isolation", default="filesystem/linux,docker/runtime",
                        help="Mesilla isolators (Mesos names)")  # fmt: skip
    parser.add_argument("--backend", default="overlay", help="image provisioner backend")
    args = parser.parse_args()
    root = start("containers.py", "root (runc, cgroups, mounts)", "containers")
    tag = uuid.uuid4().hex[:8]
    ws = Workspace(root, f"mesilla-bench-{tag}", f"mesilla-bench-raw-{tag}")
    try:
        asyncio.run(run(args, ws))
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        return 130
    finally:
        print(f"Load average at the end: {load_average()}")
        left = ws.sweep()
        if left:
            print(f"cleanup removed {len(left)} leftovers, e.g. {left[:3]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
