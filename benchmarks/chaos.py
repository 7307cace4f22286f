#!/usr/bin/env python3
"""Chaos soak (issue #15): a real cluster under load while seeded random faults hit it.

Runs rounds of `--round_minutes` each until `--minutes` have passed. Each
round is one `mesilla.testing.chaos` run on a fresh cluster (`mesilla
master`, two agents, the linux launcher on runc, pods pulling busybox and its
variants from a local docker-registry, command tasks): two checkpointing
frameworks launch and kill tasks while the round's schedule (seed `--seed` +
round number) kills agents and the master (`kill -9`, restarted), hangs agents
(SIGSTOP/SIGCONT), kills executors, task processes and conmon monitors, stops
executors and monitors, hangs an executor across its agent's restart, fills
an agent's sandbox disk (a tmpfs), cuts, drops packets of or slows an agent's
link to the master (network namespaces of the harness) and kills the registry
mid-pull. Then the history checker judges the round:
one terminal update per task, acknowledged, nothing after it, a reason on
the agent's and master's ends, RECONCILE in agreement, every image variant
pulling and running once the registry is back, the master's used resources
equal to the live tasks', nothing left on the host, every daemon back on its
own.

Prints the machine, then per round and in total: faults injected by kind,
tasks launched, violations (each with the round's seed and schedule).

    python benchmarks/chaos.py --minutes=30 --seed=1
    python benchmarks/chaos.py --minutes=2 --round_minutes=1 --seed=7
    python benchmarks/chaos.py --seed=7 --round_minutes=1 --shrink   # smallest failing schedule
    python benchmarks/chaos.py --schedule='[{"at": 3.2, "kind": "agent_kill", "target": 1, "duration": 2}]'

Needs root, runc, conmon and docker-registry (scripts/setup.sh). Everything
lives under one temporary directory and its own cgroups root, removed at the
end, also after an error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _machine import interrupt_on_sigterm, load_average, machine_report

from mesilla.testing.chaos import schedule as schedules
from mesilla.testing.chaos.run import Report, chaos_cluster, push_images, run_chaos
from mesilla.testing.processes import Cluster, DaemonError
from mesilla.testing.registry import Registry, start_registry

ROUNDS = itertools.count(1)
# The round's cluster, cleaned up by `__main__` too: Ctrl-C or SIGTERM stop the event
# loop where they land, and a coroutine's `finally` need not run then.
RUNNING: list[Cluster] = []


def clean(cluster: Cluster) -> None:
    RUNNING.remove(cluster)
    removed = [item for item in cluster.cleanup() if "/slaves" not in item]  # but the harness's disks
    if removed:
        print(f"  cleanup removed: {removed}", flush=True)


async def one_round(
    registry: Registry, images: tuple[str, list[str]], root: Path, seed: int | None,
    faults: list[schedules.Fault], seconds: float, *, retry: bool = True,
) -> Report:  # fmt: skip
    """The round, on a fresh cluster; once more on another if its daemons could not bind
    their ports (picked free, but the host is shared: another process may take one first)."""
    cluster = chaos_cluster(root / f"round-{next(ROUNDS)}", registry.url)
    RUNNING.append(cluster)
    try:
        return await run_chaos(cluster, images[0], faults, seed=seed, seconds=seconds,
                               registry=registry, variants=images[1])  # fmt: skip
    except DaemonError as exc:
        if not retry or "address already in use" not in str(exc):
            raise
        print("  the round's cluster could not bind its ports; again on another", flush=True)
    finally:
        clean(cluster)
    return await one_round(registry, images, root, seed, faults, seconds, retry=False)


async def main(args: argparse.Namespace) -> int:
    print(machine_report(), flush=True)
    registry = start_registry()
    root = Path(tempfile.mkdtemp(prefix="mesilla-chaos-"))
    keep: list[Report] = []  # failed rounds: their daemons' logs stay for a post-mortem
    try:
        images = push_images(registry)
        seconds = args.round_minutes * 60

        async def run(seed: int | None, faults: list[schedules.Fault]) -> Report:
            report = await one_round(registry, images, root, seed, faults, seconds)
            print(report.text(), flush=True)
            if report.violations or args.keep:
                keep.append(report)
            return report

        if args.schedule is not None:
            report = await run(None, schedules.loads(args.schedule))
            return 1 if report.violations else 0
        if args.shrink:
            faults = schedules.make_schedule(args.seed, seconds, agents=2)
            if not (await run(args.seed, faults)).violations:
                print("the run passed: nothing to shrink")
                return 0

            def fails(candidate: list[schedules.Fault]) -> bool:
                print(f"trying {len(candidate)} faults", flush=True)
                return bool(asyncio.run_coroutine_threadsafe(run(None, candidate), loop).result().violations)

            loop = asyncio.get_running_loop()
            smallest = await asyncio.to_thread(schedules.shrink, faults, fails)
            print(schedules.describe(None, smallest))
            print(f"rerun: python benchmarks/chaos.py --round_minutes={args.round_minutes} "
                  f"--schedule='{schedules.dumps(smallest)}'")  # fmt: skip
            return 1

        deadline = time.monotonic() + args.minutes * 60
        injected: Counter[str] = Counter()
        skipped: Counter[str] = Counter()
        tasks = rounds = 0
        failed: list[Report] = []
        started = time.monotonic()
        seed = args.seed
        while rounds == 0 or time.monotonic() + seconds < deadline:
            print(f"\n== round {rounds + 1}: seed {seed}, {seconds:.0f}s of load; "
                  f"load average {load_average()}", flush=True)  # fmt: skip
            report = await run(seed, schedules.make_schedule(seed, seconds, agents=2))
            injected.update(report.injected)
            skipped.update(report.skipped)
            tasks += report.tasks
            rounds += 1
            if report.violations:
                failed.append(report)
            seed += 1
        minutes = (time.monotonic() - started) / 60
        print(f"\n== soak: {rounds} rounds, {minutes:.1f} min, seeds {args.seed}..{seed - 1}")
        print(f"faults injected: {sum(injected.values())} {dict(sorted(injected.items()))}")
        print(f"faults with nothing to hit: {dict(sorted(skipped.items()))}")
        print(f"tasks launched: {tasks}")
        print(f"violations: {sum(len(r.violations) for r in failed)} in {len(failed)} rounds"
              + "".join(f" (seed {r.seed})" for r in failed))  # fmt: skip
        print(f"load average at the end: {load_average()}")
        return 1 if failed else 0
    finally:
        registry.stop()
        if keep:
            print(f"daemon logs of every round kept under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the soak")
    parser.add_argument("--round_minutes", type=float, default=5.0,
                        help="load per round (a fresh cluster each)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first round; round k has seed + k")
    parser.add_argument("--shrink", action="store_true",
                        help="run one round of --seed; if it fails, shrink it")
    parser.add_argument("--keep", action="store_true", help="keep every round's logs and history")
    parser.add_argument("--schedule", help="run one round with this schedule (JSON, as --shrink prints)")
    interrupt_on_sigterm()
    try:
        code = asyncio.run(main(parser.parse_args()))
    finally:
        for leftover in list(RUNNING):
            clean(leftover)
    sys.exit(code)
