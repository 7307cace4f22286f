"""Removes what a benchmark left behind, whatever happened to it.

Every benchmark works under one temporary directory and its own cgroups root
names, so leftovers are found by those, never by process name: OCI runtime
containers listed by their `--root` under the directory, conmon monitors by
the pid files the linux launcher keeps there (confirmed by their command line
naming the directory, as pids get reused), mounts under the directory, and
cgroup directories under the roots. `sweep` returns what it had to remove, so
that a clean run shows an empty list.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from _machine import load_average

CGROUP_MOUNT = "/sys/fs/cgroup"
RUNTIMES = ("runc", "crun")


def runtime_ids(binary: str, root: Path) -> list[str]:
    if not root.is_dir():
        return []
    done = subprocess.run([binary, "--root", str(root), "list", "-q"],
                          check=False, capture_output=True, text=True)  # fmt: skip
    return done.stdout.split()


def monitor_pids(directory: Path) -> list[int]:
    found = []
    for pid_file in directory.glob("**/monitor/pid"):
        try:
            pid = int(pid_file.read_text().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if os.path.basename(argv[0]) == b"conmon" and any(str(directory).encode() in a for a in argv):
            found.append(pid)
    return found


def mounts_under(directory: Path) -> list[str]:
    prefix = str(directory) + "/"
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(prefix)]


def cgroup_dirs(name: str) -> list[str]:
    """The cgroup directories of root `name` in every hierarchy, deepest first."""
    found = []
    for hierarchy in os.listdir(CGROUP_MOUNT):
        base = os.path.join(CGROUP_MOUNT, hierarchy)
        top = os.path.join(base, name)
        if os.path.islink(base) or not os.path.isdir(top):
            continue
        for directory, _, _ in os.walk(top, topdown=False):
            found.append(directory)
    return found


def sweep(
    directory: Path,
    cgroups_roots: list[str],
    runtime_dirs: list[Path],
    raw_runc_roots: tuple[Path, ...] = (),
) -> list[str]:
    """Removes containers, monitors, mounts and cgroups of ours, then `directory`.

    `runtime_dirs` are containerizers' `--runtime_dir`s (the linux launcher
    keeps each runtime's state in `<runtime_dir>/<runtime>`); `raw_runc_roots`
    are `runc --root`s used directly.
    """
    left: list[str] = []
    roots = [(binary, path / binary) for path in runtime_dirs for binary in RUNTIMES]
    roots += [("runc", root) for root in raw_runc_roots]
    for binary, root in roots:
        for rid in runtime_ids(binary, root):
            left.append(f"{binary} container {rid}")
            subprocess.run([binary, "--root", str(root), "delete", "--force", rid],
                           check=False, capture_output=True)  # fmt: skip
    for pid in monitor_pids(directory):
        left.append(f"conmon pid {pid}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for mount in sorted(mounts_under(directory), reverse=True):
        left.append(f"mount {mount}")
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    for name in cgroups_roots:
        for cgroup in cgroup_dirs(name):
            with contextlib.suppress(OSError):
                os.rmdir(cgroup)
            if os.path.isdir(cgroup):
                left.append(f"cgroup {cgroup} (still busy)")
    shutil.rmtree(directory, ignore_errors=True)
    return left


def finish(directory: Path, cgroups_roots: list[str], runtime_dirs: list[Path]) -> None:
    """A run's last words: the load average, then `sweep`, saying what it had to remove."""
    print(f"Load average at the end: {load_average()}")
    left = sweep(directory, cgroups_roots, runtime_dirs)
    if left:
        print(f"cleanup removed {len(left)} leftovers, e.g. {left[:3]}", file=sys.stderr)


def run_then_finish(
    body: Callable[[], object], directory: Path, cgroups_roots: list[str], runtime_dirs: list[Path]
) -> int:
    """Runs `body`, then `finish`, also after Ctrl-C or SIGTERM; the exit code (130 when interrupted)."""
    try:
        body()
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        return 130
    finally:
        finish(directory, cgroups_roots, runtime_dirs)
    return 0
