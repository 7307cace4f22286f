#!/usr/bin/env python3
"""Pod launch latency on `mesilla local` against podman, side by side (issue #4).

For pods of 1, 3 and 10 containers (`--sizes`) of the busybox image, `--pods`
pods each, interleaved:
  - Mesilla: a framework (v1 scheduler API) sends ACCEPT with LAUNCH_GROUP on
    the DEFAULT executor; latency is from sending ACCEPT to the last task's
    TASK_RUNNING read by the framework. Each pod is then killed and its
    executor waited for (not timed) before the next one.
  - podman (when installed; `--install-podman` runs `apt-get install -y podman catatonit`):
    `podman kube play` of an equivalent pod (same image, pulled beforehand from
    the same local registry with `--tls-verify=false`, same command, host
    network as Mesilla's pods here, runc), timed until the command returns;
    then `podman pod rm -f`. Its storage lives under the benchmark's directory.
The ratio Mesilla/podman of the medians is printed per size (target 0.5).

The default executor's cost, two ways:
  - start-up: `python -m mesilla.executor.default` started as the agent starts
    it, timed from spawn to its SUBSCRIBE call reaching a listener on
    127.0.0.1 (which answers nothing more; the process is then killed by its pid);
    its RSS at that moment;
  - in the real pods: VmRSS of each pod's executor process (its pid from the
    agent's GET_CONTAINERS) once all tasks run, and, from /proc, when it started
    relative to ACCEPT.

With `--compare-python` (another checkout's interpreter, e.g. its `.venv/bin/python`),
a second `mesilla local` runs that checkout's code beside this one, and its pods are
interleaved with this checkout's one by one (alternating which goes first): the
before/after of a change, with the host's noise hitting both alike. With
`--compare-flags` the second cluster runs this checkout with extra agent flags instead
(e.g. `--compare-flags=--cgroups_enable_cfs --isolation=... ,cgroups/cpu`): the cost of a
setting, measured the same way.

The image is built from Debian's busybox-static and served by a real
docker-registry on 127.0.0.1. Everything lives under one temporary directory
and is removed at the end, also after an error, Ctrl-C or SIGTERM.

    python benchmarks/pods.py --pods=3 --sizes=1,3     # quick
    python benchmarks/pods.py --install-podman          # defaults: 10 pods of each size
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cleanup import finish
from _framework import TERMINAL, Framework, FrameworkError, scalar
from _machine import (
    Stats,
    interrupt_on_sigterm,
    machine_report,
    process_start_seconds,
    ratio,
    status_kb,
    uptime_seconds,
    verdict,
)

from mesilla.containerizer.launcher.linux import INIT_PATH
from mesilla.testing.cluster import LocalCluster
from mesilla.testing.images import build_image, push_image
from mesilla.testing.registry import Registry, start_registry

Json = dict[str, Any]

COMMAND = "sleep 3600"
TARGET_RATIO = 0.5
TARGET_EXECUTOR_MB = 32
PODMAN_REFERENCE_MS = {1: 200, 3: 320, 10: 790}  # issue #4, this kind of machine


@dataclass
class PodSample:
    latency_ms: float
    executor_rss_kb: int | None = None
    executor_started_ms: float | None = None  # after ACCEPT, from /proc (10 ms ticks)


@dataclass
class RunningPod:
    executor_id: str
    task_ids: list[str]
    agent_id: Json
    sample: PodSample
    executor_pid: int | None  # the executor's own process (past the container's init)


@dataclass
class Results:
    mesilla: dict[int, list[PodSample]] = field(default_factory=dict)
    podman: dict[int, list[float]] = field(default_factory=dict)
    compare: dict[int, list[PodSample]] = field(default_factory=dict)  # --compare-python
    podman_error: str | None = None


# --- Mesilla ---------------------------------------------------------------------


class MesillaPods:
    def __init__(self, cluster: LocalCluster, framework: Framework, image: str) -> None:
        self.cluster = cluster
        self.framework = framework
        self.image = image

    async def launch(self, size: int) -> PodSample:
        """One pod, timed; then killed and its executor waited for."""
        pod = await self.start(size)
        await self.stop(pod)
        return pod.sample

    async def start(self, size: int, *, executor: bool = True) -> RunningPod:
        """Launches a pod of `size` tasks and waits until every task runs; with `executor`,
        finds its executor's process (one GET_CONTAINERS, which grows with the agent's containers)."""
        fw = self.framework
        await fw.decline_pending()
        offer = await fw.offer()
        suffix = uuid.uuid4().hex[:8]
        executor_id = f"pod-{size}-{suffix}"
        container = {"type": "MESOS", "mesos": {"image": {"type": "DOCKER", "docker": {"name": self.image}}}}
        tasks = [
            {
                "name": f"c{i}",
                "task_id": {"value": f"{executor_id}-c{i}"},
                "agent_id": offer["agent_id"],
                "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
                "command": {"value": COMMAND},
                "container": container,
            }
            for i in range(size)
        ]
        executor = {
            "type": "DEFAULT",
            "executor_id": {"value": executor_id},
            "framework_id": fw.framework_id,
            "resources": [scalar("cpus", 0.1), scalar("mem", 32), scalar("disk", 10)],
        }
        ids = [t["task_id"]["value"] for t in tasks]
        accepted_uptime = uptime_seconds()
        sent = await fw.accept(offer, [{"type": "LAUNCH_GROUP",
                                         "launch_group": {"executor": executor, "task_group": {"tasks": tasks}}}])  # fmt: skip
        await fw.until(lambda: all(fw.first(i, "TASK_RUNNING") or fw.states.get(i) in TERMINAL for i in ids), 120)
        running = [fw.first(i, "TASK_RUNNING") for i in ids]
        if any(r is None for r in running):
            raise FrameworkError(f"pod {executor_id} did not run: {[fw.states.get(i) for i in ids]}; "
                                 f"{[u.status.get('message') for u in fw.updates if u.task_id in ids][-1:]}")  # fmt: skip
        sample = PodSample((max(r.at for r in running if r is not None) - sent) * 1000)
        pid = await self.executor_pid(executor_id) if executor else None
        if pid is not None:
            sample.executor_rss_kb = status_kb(pid)
            started = process_start_seconds(pid)
            if started is not None:
                sample.executor_started_ms = (started - accepted_uptime) * 1000
        return RunningPod(executor_id, ids, offer["agent_id"], sample, pid)

    async def stop(self, *pods: RunningPod) -> None:
        """Kills every task of `pods` at once; returns once their executors are gone."""
        fw = self.framework
        ids = [task_id for pod in pods for task_id in pod.task_ids]
        for pod in pods:
            for task_id in pod.task_ids:
                await fw.call("KILL", {"task_id": {"value": task_id}, "agent_id": pod.agent_id})
        await fw.until(lambda: all(fw.states.get(i) in TERMINAL for i in ids), 60 + len(ids))
        await self.executors_gone({pod.executor_id for pod in pods}, 60 + len(pods))

    async def _containers(self) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.cluster.agent_ports[0]}/api/v1"
        async with aiohttp.ClientSession() as session, session.post(
            url, json={"type": "GET_CONTAINERS"}, headers={"Accept": "application/json"}
        ) as response:
            body = await response.json(content_type=None)
        containers: list[dict[str, Any]] = body.get("get_containers", {}).get("containers", [])
        return containers

    async def executor_pid(self, executor_id: str) -> int | None:
        return (await self.executor_pids()).get(executor_id)

    async def executor_pids(self) -> dict[str, int]:
        """Each executor's own process (past its container's init), by executor id."""
        pids = {}
        for entry in await self._containers():
            executor_id = entry.get("executor_id", {}).get("value")
            pid = entry.get("container_status", {}).get("executor_pid")
            if executor_id and pid and "parent" not in entry.get("container_id", {}):
                pids[executor_id] = _past_init(int(pid))
        return pids

    async def executors_gone(self, executor_ids: set[str], timeout: float = 60) -> None:
        """Waits for the pods' executor containers to end, so that pods never overlap."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = {e.get("executor_id", {}).get("value") for e in await self._containers()}
            if not running & executor_ids:
                return
            await asyncio.sleep(0.1)
        print(f"  (executors {sorted(running & executor_ids)[:3]} still there after {timeout}s)")


def _past_init(pid: int) -> int:
    """The executor's own process: the container's first process is the init (tini) when
    the container has its own pid namespace, and the executor is its child."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0")[0]
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
    except OSError:
        return pid
    return int(children[0]) if argv0 == INIT_PATH.encode() and len(children) == 1 else pid


@dataclass
class Startup:
    executor_ms: list[float] = field(default_factory=list)  # spawn to SUBSCRIBE
    executor_rss_kb: list[int] = field(default_factory=list)  # at SUBSCRIBE
    python_ms: list[float] = field(default_factory=list)  # baseline: spawn to exit of a bare interpreter


async def python_baseline() -> float:
    """Spawn to exit of `python -c 'import asyncio, json, http.client'` (ms): the floor of any
    asyncio executor in Python, measured next to the executor so that load hits both alike."""
    start = time.perf_counter()
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", "import asyncio, json, http.client")
    await process.wait()
    return (time.perf_counter() - start) * 1000


async def executor_startup(runs: int, directory: Path) -> Startup:
    """Spawn-to-SUBSCRIBE time (ms) and RSS then (kB) of the default executor on its own."""
    result = Startup()
    times, rss = result.executor_ms, result.executor_rss_kb
    for i in range(runs):
        result.python_ms.append(await python_baseline())
        subscribed: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             done: asyncio.Future[float] = subscribed) -> None:  # fmt: skip
            line = await reader.readline()
            if line.startswith(b"POST") and not done.done():
                done.set_result(time.perf_counter())
            await reader.read()  # unanswered until the executor is killed
            writer.close()

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sandbox = directory / f"executor-{i}"
        sandbox.mkdir(parents=True)
        env = {
            **os.environ,
            "MESOS_FRAMEWORK_ID": "bench", "MESOS_EXECUTOR_ID": f"bench-{i}",
            "MESOS_AGENT_ENDPOINT": f"127.0.0.1:{port}", "MESOS_DIRECTORY": str(sandbox),
            "MESOS_SANDBOX": str(sandbox), "MESOS_CHECKPOINT": "0",
        }  # fmt: skip
        start = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mesilla.executor.default", env=env, cwd=str(sandbox),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            at = await asyncio.wait_for(subscribed, 30)
            times.append((at - start) * 1000)
            kb = status_kb(process.pid)
            if kb is not None:
                rss.append(kb)
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
            server.close()
    return result


# --- podman ------------------------------------------------------------------------


class Podman:
    def __init__(self, directory: Path, image: str) -> None:
        self.directory = directory
        self.image = image
        self.pods: set[str] = set()
        self.base = [
            "podman", "--root", str(directory / "storage"), "--runroot", str(directory / "run"),
            "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
            "--storage-driver", "overlay",
        ]  # fmt: skip

        # podman raises RLIMIT_NOFILE and RLIMIT_NPROC to 1048576 by default, which
        # fails where root lacks CAP_SYS_RESOURCE (as on the CI host): fixed values instead.
        self.conf = directory / "containers.conf"
        directory.mkdir(parents=True, exist_ok=True)
        self.conf.write_text('[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n')
        self.env = {**os.environ, "CONTAINERS_CONF": str(self.conf)}

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*self.base, *args], check=False, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=self.env)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"podman {args[0]} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
        return done

    def pull(self) -> None:
        self._run("pull", "--tls-verify=false", self.image)

    def spec(self, name: str, size: int) -> Path:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "hostNetwork": True,
                "restartPolicy": "Never",
                "containers": [
                    {"name": f"c{i}", "image": self.image, "imagePullPolicy": "IfNotPresent",
                     "command": ["/bin/sh", "-c", COMMAND]}
                    for i in range(size)
                ],
            },
        }
        path = self.directory / f"{name}.yaml"
        path.write_text(json.dumps(pod))  # JSON is YAML
        return path

    def launch(self, size: int) -> float:
        name = f"bench-{size}-{uuid.uuid4().hex[:8]}"
        path = self.spec(name, size)
        self.pods.add(name)
        start = time.perf_counter()
        self._run("kube", "play", "--tls-verify=false", str(path))
        elapsed = time.perf_counter() - start
        self.remove(name)
        return elapsed * 1000

    def remove(self, name: str) -> None:
        self._run("pod", "rm", "--force", "--time", "0", name)
        self.pods.discard(name)

    def cleanup(self) -> None:
        for name in list(self.pods):
            subprocess.run([*self.base, "pod", "rm", "--force", "--time", "0", name],
                           check=False, capture_output=True, env=self.env)  # fmt: skip
        # Unmounts podman's layers under our directory (the sweep catches the rest).
        subprocess.run([*self.base, "system", "reset", "--force"], check=False, capture_output=True, env=self.env)


def install_podman() -> None:
    # `kube play` builds its pause image around catatonit, which Debian's podman only recommends
    # (tini, there already, satisfies the recommendation but is not what podman runs).
    print("Installing podman (apt-get install -y podman catatonit) ...", flush=True)
    subprocess.run(["apt-get", "install", "-y", "podman", "catatonit"], check=True,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip


# --- the run -------------------------------------------------------------------------


def _started_p50(samples: list[PodSample]) -> str:
    started = [s.executor_started_ms for s in samples if s.executor_started_ms is not None]
    return f"{Stats.of(started).p50:.0f}" if started else "-"


def report(results: Results, startup: Startup, compare_flags: str = "") -> None:
    print("\nPod launch latency, ACCEPT to every task TASK_RUNNING (Mesilla) and `podman kube play` (ms):")
    print(f"  {'containers':>10}  {'Mesilla p50':>11}  {'p90':>7}  {'podman p50':>10}  {'p90':>7}  "
          f"{'Mesilla/podman':>14}  {'podman ref.':>11}")  # fmt: skip
    for size, samples in results.mesilla.items():
        mine = Stats.of([s.latency_ms for s in samples])
        theirs = Stats.of(results.podman[size]) if results.podman.get(size) else None
        line = f"  {size:>10}  {mine.p50:>11.0f}  {mine.p90:>7.0f}  "
        if theirs is not None:
            value = mine.p50 / theirs.p50
            line += (f"{theirs.p50:>10.0f}  {theirs.p90:>7.0f}  {ratio(mine.p50, theirs.p50):>14}  "
                     f"{PODMAN_REFERENCE_MS.get(size, '-'):>11}  ({verdict(value, TARGET_RATIO)} {TARGET_RATIO})")  # fmt: skip
        else:
            line += f"{'-':>10}  {'-':>7}  {'-':>14}  {PODMAN_REFERENCE_MS.get(size, '-'):>11}"
        print(line + f"  n={mine.n}")
    if results.podman_error:
        print(f"  podman: {results.podman_error}")
    if any(results.compare.values()):
        other_name = f"--compare-flags={compare_flags}" if compare_flags else "--compare-python's"
        print(f"\nThis run against {other_name}, pods interleaved (ms; the executor's"
              " process start after ACCEPT from /proc, 10 ms ticks):")  # fmt: skip
        print(f"  {'containers':>10}  {'other p50':>9}  {'this p50':>8}  {'this/other':>10}  "
              f"{'executor started, other':>23}  {'this':>5}")  # fmt: skip
        for size, samples in results.compare.items():
            other = Stats.of([s.latency_ms for s in samples]).p50
            this = Stats.of([s.latency_ms for s in results.mesilla[size]]).p50
            print(f"  {size:>10}  {other:>9.0f}  {this:>8.0f}  {this / other:>10.2f}  "
                  f"{_started_p50(samples):>23}  {_started_p50(results.mesilla[size]):>5}  n={len(samples)}")  # fmt: skip

    times, rss = startup.executor_ms, startup.executor_rss_kb
    print("\nThe default executor:")
    if times:
        print(f"  start-up, spawn to SUBSCRIBE (alone, no container): {Stats.of(times).line()}")
        python = Stats.of(startup.python_ms)
        print(f"  baseline, a bare `python -c 'import asyncio, json, http.client'`, spawn to exit: "
              f"{python.line()}; executor/baseline {ratio(Stats.of(times).p50, python.p50)}")  # fmt: skip
    if rss:
        print(f"  RSS at SUBSCRIBE: {Stats.of([r / 1024 for r in rss]).line('MB')}")
    in_pods = [s for samples in results.mesilla.values() for s in samples]
    pod_rss = [s.executor_rss_kb / 1024 for s in in_pods if s.executor_rss_kb]
    if pod_rss:
        worst = max(pod_rss)
        print(f"  RSS in the pods, all tasks running: {Stats.of(pod_rss).line('MB')} "
              f"(target < {TARGET_EXECUTOR_MB} MB -> {verdict(worst, TARGET_EXECUTOR_MB)} at worst)")  # fmt: skip
    for size, samples in results.mesilla.items():
        started = [s.executor_started_ms for s in samples if s.executor_started_ms is not None]
        if started:
            latency = Stats.of([s.latency_ms for s in samples]).p50
            print(f"  {size:>2} containers: executor process started {Stats.of(started).p50:.0f} ms after "
                  f"ACCEPT (p50; /proc has 10 ms ticks), tasks all running {latency:.0f} ms after ACCEPT")  # fmt: skip


async def run(args: argparse.Namespace, root: Path, cgroups_root: str, results: Results,
              podman_ref: list[Podman]) -> Startup:  # fmt: skip
    registry: Registry = start_registry()
    try:
        push_image(registry.url, "library/busybox", "latest", build_image())
        image = f"{registry.host}/library/busybox:latest"
        startup = await executor_startup(args.executor_runs, root / "executor-startup")

        def local_cluster(name: str, cgroups: str, python: str, *extra: str) -> LocalCluster:
            return LocalCluster(root / name, python=python, extra_flags=[
                "--launcher=linux", "--oci_runtime=runc",
                f"--isolation={args.isolation}",
                "--image_providers=docker", f"--docker_registry={registry.url}",
                f"--docker_store_dir={root / name / 'store'}", "--image_provisioner_backend=overlay",
                f"--cgroups_root={cgroups}", "--resources=cpus:16;mem:16384;disk:16384",
                "--logging_level=WARNING", *extra,
            ])  # fmt: skip

        clusters = [local_cluster("cluster", cgroups_root, sys.executable)]
        if args.compare_python or args.compare_flags:
            clusters.append(local_cluster(
                "cluster-compare", f"{cgroups_root}-compare", args.compare_python or sys.executable,
                *args.compare_flags.split(),
            ))  # fmt: skip
        try:
            for cluster in clusters:
                await asyncio.to_thread(cluster.start)
            await measure(args, clusters, image, root, results, podman_ref)
        finally:
            for cluster in clusters:
                await asyncio.to_thread(cluster.stop)
        return startup
    finally:
        registry.stop()


async def measure(args: argparse.Namespace, clusters: list[LocalCluster], image: str, root: Path,
                  results: Results, podman_ref: list[Podman]) -> None:  # fmt: skip
    frameworks = [Framework(cluster.master, "bench-pods") for cluster in clusters]
    try:
        for framework in frameworks:
            await framework.start()
        pods, *compare = [MesillaPods(c, f, image) for c, f in zip(clusters, frameworks, strict=True)]
        print("Warm-up: one Mesilla pod (pulls the image into the agent's store) ...", flush=True)
        for each in (pods, *compare):
            await each.launch(1)
        podman = None
        if shutil.which("podman") and not args.no_podman:
            podman = Podman(root / "podman", image)
            podman_ref.append(podman)
            try:
                print("Warm-up: podman pull and one podman pod ...", flush=True)
                await asyncio.to_thread(podman.pull)
                await asyncio.to_thread(podman.launch, 1)
            except RuntimeError as exc:
                results.podman_error = f"not measured: {exc}"
                podman = None
        elif not args.no_podman:
            results.podman_error = "not installed (run with --install-podman)"
        for size in args.sizes:
            results.mesilla[size], results.podman[size], results.compare[size] = [], [], []
            for i in range(args.pods):
                if compare and i % 2:
                    results.compare[size].append(await compare[0].launch(size))
                results.mesilla[size].append(await pods.launch(size))
                if compare and not i % 2:
                    results.compare[size].append(await compare[0].launch(size))
                if podman is not None:
                    results.podman[size].append(await asyncio.to_thread(podman.launch, size))
                print(f"  {size} containers: pod {i + 1}/{args.pods}", end="\r", flush=True)
            print()
    finally:
        for framework in frameworks:
            await framework.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 3, 10],
                        help="containers per pod, comma-separated")  # fmt: skip
    parser.add_argument("--pods", type=int, default=10, help="pods of each size")
    parser.add_argument("--executor-runs", type=int, default=10, help="stand-alone executor start-ups")
    parser.add_argument("--isolation", default="filesystem/linux,docker/runtime,posix/cpu,posix/mem")
    parser.add_argument("--install-podman", action="store_true", help="apt-get install -y podman first")
    parser.add_argument("--no-podman", action="store_true", help="measure Mesilla only")
    parser.add_argument("--compare-python", metavar="PYTHON",
                        help="another checkout's interpreter: its cluster's pods interleaved with these")  # fmt: skip
    parser.add_argument("--compare-flags", default="", metavar="FLAGS",
                        help="a second cluster of this checkout with these extra agent flags, interleaved")  # fmt: skip
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("pods.py needs root (the linux launcher)", file=sys.stderr)
        return 2
    if args.install_podman and not (shutil.which("podman") and shutil.which("catatonit")):
        install_podman()
    print(machine_report())
    interrupt_on_sigterm()
    root = Path(tempfile.mkdtemp(prefix="mesilla-bench-pods-"))
    cgroups_root = f"mesilla-bench-{uuid.uuid4().hex[:8]}"
    results = Results()
    podman: list[Podman] = []
    code = 0
    try:
        startup = asyncio.run(run(args, root, cgroups_root, results, podman))
        report(results, startup, args.compare_flags)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        code = 130
    finally:
        for p in podman:
            p.cleanup()
        finish(root, [cgroups_root, f"{cgroups_root}-compare"],
               [root / name / "agent-0" / "run" for name in ("cluster", "cluster-compare")])  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
