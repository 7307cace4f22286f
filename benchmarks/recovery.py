#!/usr/bin/env python3
"""Agent recovery time with running containers (issue #5).

Starts `mesilla master` and `mesilla agent` as separate processes (linux
launcher, real runc/conmon/cgroups), launches `--containers` long-running
command tasks and `--pods` pods of `--pod-size` tasks through the v1 scheduler API with a
checkpointing framework, waits for every task to run, then `--restarts` times:
`kill -9` of the agent (the pid this script started), restart with the same
flags, and measure from the restart (the new process spawned) to:
  - the agent's HTTP endpoint answering (`/health`),
  - every executor re-subscribed (`slave/executors_running` of the agent's
    /metrics/snapshot back to the number before the kill),
  - re-registered (`slave/registered` of the new agent is 1, and the master's
    /slaves shows the agent active with a `reregistered_time` after the kill),
and then verifies, through GET_CONTAINERS, that every container (nested ones
too) is there with the same pid, still the same process (its start time in
/proc unchanged), and that the framework got no status update but the ones
of running tasks. The agent's own `slave/recovery_time_secs` is shown too.
Polling is every `--poll` seconds; the figures are on `time.perf_counter`.

Before/after a change: `--compare-python=<other checkout>/.venv/bin/python` runs
the whole scenario (its own master, agent, executors and workload) once with
each checkout's code per `--rounds`, alternating which goes first, and prints
both checkouts' figures and their ratio: on a shared host only runs
interleaved in time compare.

Everything lives under one temporary directory with its own cgroups root and
is removed at the end, also after an error, Ctrl-C or SIGTERM.

    python benchmarks/recovery.py --containers=10 --restarts=1     # quick
    python benchmarks/recovery.py                                  # 100 containers, 3 restarts
    python benchmarks/recovery.py --containers=0 --pods=100 --pod-size=10   # 1,100 containers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cleanup import finish
from _framework import Framework, FrameworkError, Json, scalar
from _machine import (
    Stats,
    process_start_seconds,
    start,
    verdict,
)

from mesilla.testing.cluster import free_port

TARGET_S = 2.0
COMMAND = "sleep 3600"


class BenchmarkError(RuntimeError):
    """A daemon did not come up or the cluster did not reach the state measured from."""


def http_json(url: str, body: Json | None = None, timeout: float = 5) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json",
                                                              "Accept": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


@dataclass
class Daemons:
    """The master and agent processes, started by this script and ended by their pids."""

    root: Path
    cgroups_root: str
    master_port: int
    agent_port: int
    isolation: str
    python: str = sys.executable  # the checkout whose code the daemons (and so the executors) run
    master: subprocess.Popen[bytes] | None = None
    agent: subprocess.Popen[bytes] | None = None

    @property
    def master_url(self) -> str:
        return f"http://127.0.0.1:{self.master_port}"

    @property
    def agent_url(self) -> str:
        return f"http://127.0.0.1:{self.agent_port}"

    @property
    def runtime_dir(self) -> Path:
        return self.root / "agent" / "run"

    def _spawn(self, kind: str, flags: list[str]) -> subprocess.Popen[bytes]:
        with open(self.root / f"{kind}.log", "ab") as log:
            return subprocess.Popen([self.python, "-m", "mesilla", kind, *flags], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def start_master(self) -> None:
        self.master = self._spawn("master", [
            "--ip=127.0.0.1", f"--port={self.master_port}", f"--work_dir={self.root / 'master'}",
            "--logging_level=WARNING",
        ])  # fmt: skip
        self._await(lambda: http_json(f"{self.master_url}/slaves") is not None, "master", self.master)

    def start_agent(self) -> float:
        """Spawns the agent; returns perf_counter just before the spawn."""
        flags = [
            "--ip=127.0.0.1", f"--port={self.agent_port}", f"--master=127.0.0.1:{self.master_port}",
            f"--work_dir={self.root / 'agent'}", f"--runtime_dir={self.runtime_dir}",
            "--launcher=linux", "--oci_runtime=runc", f"--isolation={self.isolation}",
            f"--cgroups_root={self.cgroups_root}", "--resources=cpus:1024;mem:1048576;disk:1048576",
        ]  # fmt: skip
        started = time.perf_counter()
        self.agent = self._spawn("agent", flags)
        return started

    def kill_agent(self) -> None:
        assert self.agent is not None
        self.agent.send_signal(signal.SIGKILL)
        self.agent.wait()

    def await_agent(self) -> None:
        assert self.agent is not None
        self._await(lambda: (agent_in_master(self) or {}).get("active"), "agent", self.agent)

    def _await(self, ready: Any, name: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise BenchmarkError(f"{name} exited with {process.returncode}: {self.log_tail(name)}")
            try:
                if ready():
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise BenchmarkError(f"{name} not ready within {timeout}s: {self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join((self.root / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM (clean shutdown), then SIGKILL; by the pids we started."""
        for process in (self.agent, self.master):
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# --- the agent's and master's views -------------------------------------------------


def metrics(daemons: Daemons) -> dict[str, float]:
    result: dict[str, float] = http_json(f"{daemons.agent_url}/metrics/snapshot", timeout=2)
    return result


def containers(daemons: Daemons) -> dict[str, int | None]:
    """Every container (nested ones as `parent.child`) -> its pid, from GET_CONTAINERS."""
    call = {"type": "GET_CONTAINERS", "get_containers": {"show_nested": True}}
    body = http_json(f"{daemons.agent_url}/api/v1", call, timeout=120)
    out: dict[str, int | None] = {}
    for entry in body["get_containers"].get("containers", []):
        out[_container_name(entry["container_id"])] = entry.get("container_status", {}).get("executor_pid")
    return out


def _container_name(container_id: Json) -> str:
    parent = container_id.get("parent")
    return (f"{_container_name(parent)}." if parent else "") + container_id["value"]


def agent_in_master(daemons: Daemons) -> Json | None:
    agents = http_json(f"{daemons.master_url}/slaves", timeout=2).get("slaves", [])
    return agents[0] if agents else None


@dataclass
class Recovery:
    http_s: float | None = None
    executors_s: float | None = None
    registered_s: float | None = None
    master_s: float | None = None
    agent_metric_s: float | None = None  # the agent's own slave/recovery_time_secs
    same_pids: int = 0
    changed: list[str] | None = None
    other_updates: list[str] | None = None


async def restart_and_measure(daemons: Daemons, framework: Framework, expected: dict[str, int | None],
                              executors: int, poll: float, timeout: float) -> Recovery:  # fmt: skip
    """kill -9, restart, and time the milestones; the framework keeps reading meanwhile."""
    starts = {name: process_start_seconds(pid) for name, pid in expected.items() if pid}
    updates_before = len(framework.updates)
    killed_wall = time.time()
    daemons.kill_agent()
    started = daemons.start_agent()
    result = await asyncio.to_thread(poll_milestones, daemons, executors, started, killed_wall, poll, timeout)
    after = await asyncio.to_thread(containers, daemons)
    result.changed = []
    for name, pid in expected.items():
        now_pid = after.get(name)
        if now_pid != pid or (pid and process_start_seconds(pid) != starts.get(name)):
            result.changed.append(f"{name}: pid {pid} -> {now_pid}")
        else:
            result.same_pids += 1
    result.other_updates = [f"{u.task_id}: {u.state}" for u in framework.updates[updates_before:]
                            if u.state != "TASK_RUNNING"]  # fmt: skip
    return result


def poll_milestones(daemons: Daemons, executors: int, started: float, killed_wall: float, poll: float,
                    timeout: float) -> Recovery:  # fmt: skip
    result = Recovery()
    deadline = started + timeout
    while time.perf_counter() < deadline and None in (result.executors_s, result.registered_s, result.master_s):
        assert daemons.agent is not None
        if daemons.agent.poll() is not None:
            raise BenchmarkError(f"the restarted agent exited: {daemons.log_tail('agent')}")
        now = time.perf_counter() - started
        try:
            if result.http_s is None:
                urllib.request.urlopen(f"{daemons.agent_url}/health", timeout=1).close()
                result.http_s = now
            m = metrics(daemons)
            if result.executors_s is None and m.get("slave/executors_running", 0) >= executors:
                result.executors_s = now
            if result.registered_s is None and m.get("slave/registered") == 1.0:
                result.registered_s = now
                result.agent_metric_s = m.get("slave/recovery_time_secs")
            if result.master_s is None:
                agent = agent_in_master(daemons)
                if agent and agent.get("active") and (agent.get("reregistered_time") or 0) > killed_wall:
                    result.master_s = now
        except (OSError, ValueError):
            pass
        time.sleep(poll)
    if result.executors_s is None:
        print(f"  executors running after {timeout}s: "
              f"{metrics(daemons).get('slave/executors_running')} of {executors}")  # fmt: skip
    return result


# --- launching the workload ----------------------------------------------------------


async def launch_workload(framework: Framework, count: int, pods: int, pod_size: int, batch: int) -> list[str]:
    """The command tasks in one ACCEPT, then the pods `batch` to an ACCEPT, each batch running
    before the next: a hundred executors started at once on a loaded 2-core host could not
    all subscribe within --executor_registration_timeout."""
    offer = await framework.offer()
    agent_id = offer["agent_id"]
    tasks = [
        {"name": f"t{i}", "task_id": {"value": f"cmd-{i}-{uuid.uuid4().hex[:6]}"}, "agent_id": agent_id,
         "resources": [scalar("cpus", 0.1), scalar("mem", 32)], "command": {"value": COMMAND}}
        for i in range(count)
    ]  # fmt: skip
    batches: list[tuple[list[Json], list[str]]] = []
    if tasks:
        batches.append(([{"type": "LAUNCH", "launch": {"task_infos": tasks}}], [t["task_id"]["value"] for t in tasks]))
    for p in range(pods):
        executor_id = f"pod-{p}-{uuid.uuid4().hex[:6]}"
        group = [
            {"name": f"p{p}c{i}", "task_id": {"value": f"{executor_id}-c{i}"}, "agent_id": agent_id,
             "resources": [scalar("cpus", 0.1), scalar("mem", 32)], "command": {"value": COMMAND}}
            for i in range(pod_size)
        ]  # fmt: skip
        executor = {"type": "DEFAULT", "executor_id": {"value": executor_id}, "framework_id": framework.framework_id,
                    "resources": [scalar("cpus", 0.1), scalar("mem", 32), scalar("disk", 10)]}  # fmt: skip
        operation = {"type": "LAUNCH_GROUP", "launch_group": {"executor": executor, "task_group": {"tasks": group}}}
        if p % batch == 0 or not batches:
            batches.append(([], []))
        batches[-1][0].append(operation)
        batches[-1][1].extend(t["task_id"]["value"] for t in group)
    ids: list[str] = []
    for i, (operations, batch_ids) in enumerate(batches):
        await framework.accept(offer if i == 0 else await framework.offer(), operations)
        await _await_running(framework, batch_ids)
        ids += batch_ids
    return ids


async def _await_running(framework: Framework, ids: list[str]) -> None:
    def running() -> bool:
        return all(framework.states.get(i) == "TASK_RUNNING" for i in ids)

    def ended() -> list[str]:
        return [i for i in ids if framework.states.get(i) not in (None, "TASK_STAGING", "TASK_STARTING",
                                                                  "TASK_RUNNING")]  # fmt: skip

    # A task that ended never runs: say so at once rather than wait out the timeout.
    await framework.until(lambda: running() or bool(ended()), 600)
    if not running():
        first = ended()[0]
        raise BenchmarkError(f"{len(ended())} tasks ended before all ran, e.g. {first}: {framework.states[first]}")


# --- the run -------------------------------------------------------------------------


def report(results: list[Recovery], containers_count: int, executors: int) -> None:
    print(f"\nAgent recovery with {containers_count} containers ({executors} executors), "
          f"{len(results)} restarts (s after the restarted agent was spawned):")  # fmt: skip
    rows = [
        ("HTTP endpoint answering", [r.http_s for r in results]),
        ("every executor re-subscribed", [r.executors_s for r in results]),
        ("re-registered (agent: slave/registered)", [r.registered_s for r in results]),
        ("re-registered (master: /slaves active)", [r.master_s for r in results]),
        ("agent's own slave/recovery_time_secs", [r.agent_metric_s for r in results]),
    ]
    for label, values in rows:
        known = [v for v in values if v is not None]
        missing = len(values) - len(known)
        text = Stats.of(known).line("s", 3) if known else "never reached"
        print(f"  {label:<42} {text}" + (f" ({missing} never reached)" if missing and known else ""))
    registered = [r.master_s for r in results if r.master_s is not None]
    if registered:
        worst = max(registered)
        print(f"  restart to re-registered, worst: {worst:.3f} s (target < {TARGET_S} s -> {verdict(worst, TARGET_S)})")
    for i, r in enumerate(results, 1):
        print(f"  restart {i}: {r.same_pids}/{containers_count} containers with the same pid and process"
              + (f"; changed: {r.changed[:3]}" if r.changed else "")
              + (f"; updates other than TASK_RUNNING: {r.other_updates[:3]}" if r.other_updates else ""))  # fmt: skip


def report_log(path: Path) -> None:
    """What the agents wrote at WARNING or above: recovery trouble (e.g. an executor destroyed
    for re-subscribing late) shows there before it shows in the figures."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    flagged = [line for line in lines if " WARNING " in line or " ERROR " in line]
    print(f"  agent log: {len(flagged)} lines at WARNING or above" + (":" if flagged else ""))
    for line in flagged[:5]:
        print(f"    {line[:200]}")


@dataclass
class Outcome:
    """One run of the scenario: its restarts' figures and what they were measured on."""

    results: list[Recovery]
    containers: int
    executors: int


async def run(args: argparse.Namespace, daemons: Daemons) -> Outcome:
    await asyncio.to_thread(daemons.start_master)
    daemons.start_agent()
    await asyncio.to_thread(daemons.await_agent)
    framework = Framework(f"127.0.0.1:{daemons.master_port}", "bench-recovery", failover_timeout=3600)
    await framework.start()
    try:
        print(f"Launching {args.containers} command tasks and {args.pods} pods of {args.pod_size} tasks ...",
              flush=True)  # fmt: skip
        started = time.perf_counter()
        await launch_workload(framework, args.containers, args.pods, args.pod_size, args.launch_batch)
        print(f"  all running after {time.perf_counter() - started:.1f} s")
        expected = await asyncio.to_thread(containers, daemons)
        executors = int(metrics(daemons).get("slave/executors_running", 0))
        print(f"  {len(expected)} containers, {executors} executors")
        results = []
        for i in range(args.restarts):
            print(f"  kill -9 and restart {i + 1}/{args.restarts} ...", flush=True)
            results.append(await restart_and_measure(daemons, framework, expected, executors, args.poll,
                                                     args.timeout))  # fmt: skip
            await asyncio.sleep(args.settle)
        report_log(daemons.root / "agent.log")
        return Outcome(results, len(expected), executors)
    finally:
        await framework.close()
        await asyncio.to_thread(await_no_containers, daemons)


def await_no_containers(daemons: Daemons, timeout: float = 60) -> None:
    """After TEARDOWN the agent destroys the framework's containers; stopping it sooner would leave them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemons.agent is None or daemons.agent.poll() is not None:
            return
        try:
            if not containers(daemons):
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    print(f"  containers still there {timeout}s after TEARDOWN", file=sys.stderr)


def one_run(args: argparse.Namespace, python: str, base: Path) -> Outcome | None:
    """The scenario with `python`'s checkout, under a directory of `base` and a cgroups root
    of its own, removed at the end; None when it failed (the reason printed)."""
    root = Path(tempfile.mkdtemp(dir=base))
    daemons = Daemons(root, f"mesilla-bench-{uuid.uuid4().hex[:8]}", free_port(), free_port(), args.isolation,
                      python)  # fmt: skip
    try:
        return asyncio.run(run(args, daemons))
    except (BenchmarkError, FrameworkError) as exc:
        print(f"\nbenchmark failed: {exc}", file=sys.stderr)
        return None
    finally:
        daemons.stop()
        finish(root, [daemons.cgroups_root], [daemons.runtime_dir])


MILESTONES = (
    ("/health answering", lambda r: r.http_s),
    ("every executor re-subscribed", lambda r: r.executors_s),
    ("re-registered (master)", lambda r: r.master_s),
    ("slave/recovery_time_secs", lambda r: r.agent_metric_s),
)


def compare(outcomes: dict[str, list[Recovery]]) -> None:
    """p50 of each milestone per checkout, and this checkout's over the other's."""
    (this, mine), (other, theirs) = outcomes.items()
    print(f"\nThis checkout ({this}) against {other}, p50 over {len(mine)} and {len(theirs)} restarts:")
    for label, value in MILESTONES:
        a = [v for v in map(value, mine) if v is not None]
        b = [v for v in map(value, theirs) if v is not None]
        if not a or not b:
            print(f"  {label:<32} never reached by one of them")
            continue
        pa, pb = Stats.of(a).p50, Stats.of(b).p50
        print(f"  {label:<32} {pa:.3f} s vs {pb:.3f} s: ratio {pa / pb:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=100, help="long-running command tasks")
    parser.add_argument("--pods", type=int, default=2, help="pods on the default executor, besides")
    parser.add_argument("--pod-size", type=int, default=3, help="tasks in each pod")
    parser.add_argument("--launch-batch", type=int, default=10, help="pods launched per ACCEPT, one batch at a time")
    parser.add_argument("--restarts", type=int, default=3, help="kill -9 and restart cycles")
    parser.add_argument("--poll", type=float, default=0.02, help="seconds between polls of the milestones")
    parser.add_argument("--timeout", type=float, default=60, help="seconds a recovery may take before giving up")
    parser.add_argument("--settle", type=float, default=2, help="seconds between restarts")
    parser.add_argument("--isolation", default="filesystem/linux,posix/cpu,posix/mem")
    parser.add_argument("--compare-python", help="another checkout's python, run interleaved with this one")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each checkout with --compare-python")
    args = parser.parse_args()
    base = start("recovery.py", "root (the linux launcher)", "recovery")
    pythons = [sys.executable] + ([args.compare_python] if args.compare_python else [])
    outcomes: dict[str, list[Recovery]] = {python: [] for python in pythons}
    try:
        for round_ in range(args.rounds if args.compare_python else 1):
            for python in pythons[::-1] if round_ % 2 else pythons:
                if args.compare_python:
                    print(f"\nRound {round_ + 1}/{args.rounds}: {python}", flush=True)
                outcome = one_run(args, python, base)
                if outcome is None:
                    return 1
                report(outcome.results, outcome.containers, outcome.executors)
                outcomes[python] += outcome.results
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        return 130
    finally:
        os.rmdir(base)  # each run removed its own directory
    if args.compare_python:
        compare(outcomes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
