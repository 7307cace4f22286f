"""Shared by the container, pod and recovery benchmarks: the machine's details,
timing statistics, and per-process memory read from /proc.

Every benchmark prints `machine_report()` first, so that a figure is never read
without the hardware and software it was measured on.
"""

from __future__ import annotations

import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType


def _first_line(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else f"exit {done.returncode}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_total() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def cgroup_version() -> str:
    """v2 (unified), v1 hybrid (v1 controllers plus a v2 hierarchy) or v1."""
    root = "/sys/fs/cgroup"
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        return "v2 (unified)"
    if os.path.isdir(os.path.join(root, "unified")):
        return "v1 (hybrid: v1 controllers, v2 hierarchy at /sys/fs/cgroup/unified)"
    return "v1"


def machine_details() -> dict[str, str]:
    return {
        "CPU": _cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": _memory_total(),
        "kernel": platform.release(),
        "OS": _os_release(),
        "Python": sys.version.split()[0],
        "runc": _first_line(["runc", "--version"]),
        "crun": _first_line(["crun", "--version"]),
        "conmon": _first_line(["conmon", "--version"]),
        "podman": _first_line(["podman", "--version"]),
        "cgroups": cgroup_version(),
        # Other work on the host skews every figure: shown so that a reader can tell.
        "load average": load_average(),
    }


def _os_release() -> str:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "unknown"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1, 5, 15 min)"


def machine_report() -> str:
    details = machine_details()
    width = max(len(k) for k in details)
    return "Machine:\n" + "\n".join(f"  {k:<{width}}  {v}" for k, v in details.items())


@dataclass(frozen=True)
class Stats:
    """Order statistics of a sample, in the sample's unit."""

    n: int
    min: float
    p50: float
    p90: float
    p99: float
    max: float
    mean: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        if not samples:
            raise ValueError("no samples: the benchmark measured nothing")
        ordered = sorted(samples)
        return cls(
            n=len(ordered),
            min=ordered[0],
            p50=statistics.median(ordered),
            p90=percentile(ordered, 90),
            p99=percentile(ordered, 99),
            max=ordered[-1],
            mean=statistics.fmean(ordered),
        )

    def line(self, unit: str = "ms", digits: int = 1) -> str:
        f = f"{{:.{digits}f}}"
        return (
            f"p50 {f.format(self.p50)} {unit}, p90 {f.format(self.p90)}, "
            f"p99 {f.format(self.p99)}, min {f.format(self.min)}, max {f.format(self.max)} "
            f"(n={self.n})"
        )


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks, on an already sorted sample."""
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline > 0 else "n/a"


def verdict(value: float, target: float, lower_is_better: bool = True) -> str:
    """`meets` or `misses` the target; a benchmark measures, it never fails."""
    met = value <= target if lower_is_better else value >= target
    return "meets target" if met else "misses target"


def _kb_field(path: str, name: str) -> int | None:
    """The `kB` value on the `name:` line of a /proc file; None once its process is gone."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def status_kb(pid: int, field: str = "VmRSS") -> int | None:
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM, ...); None once gone."""
    return _kb_field(f"/proc/{pid}/status", field)


def pss_kb(pid: int) -> int | None:
    """Proportional set size: shared pages split between their users."""
    return _kb_field(f"/proc/{pid}/smaps_rollup", "Pss")


def process_start_seconds(pid: int) -> float | None:
    """When `pid` started, in seconds since boot (field 22 of /proc/<pid>/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def uptime_seconds() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so that the benchmarks' cleanup runs for both.

    Only in this process: a forked child (pyroute2 forks one to open a socket in
    another network namespace, and ends it with SIGTERM) must not run our cleanup.
    """
    benchmark = os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != benchmark:
            os._exit(128 + signum)
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def start(script: str, needs: str, directory: str, *, ready: bool = True) -> Path:
    """The opening of a benchmark that runs as root: the machine's details, SIGTERM made
    Ctrl-C, and a fresh temporary directory `mesilla-bench-<directory>-*` to run in.

    Exits 2, once it has said what `script` `needs`, when not root or not `ready`.
    """
    if os.geteuid() != 0 or not ready:
        print(f"{script} needs {needs}", file=sys.stderr)
        sys.exit(2)
    print(machine_report())
    interrupt_on_sigterm()
    return Path(tempfile.mkdtemp(prefix=f"mesilla-bench-{directory}-"))
