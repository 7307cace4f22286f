"""Applies a schedule's faults to a `processes.Cluster`, each at its offset.

Daemons are signalled by the pids the cluster started; executors and task
processes by the pids the agent reports (GET_CONTAINERS; under a container's
tini, its child), a command task's process as a child of its executor's,
conmon monitors by their pid files (confirmed by their command line), the
registry by the process the harness started: never by name. Network faults
act on the agent's `network.Link`. Faults on different
daemons overlap; one daemon's faults wait for its recovery from the last one.
After each fault the injector waits (generously: the checker judges outcomes,
not timings) for the daemon to be back: restarted or resumed, and the agent
active in the master again. A daemon that exits on its own is a violation.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from mesilla.common import files, procfs
from mesilla.containerizer.launcher.linux import INIT_PATH
from mesilla.containerizer.launcher.monitor import is_monitor
from mesilla.testing.chaos.history import History
from mesilla.testing.chaos.network import Link, Network
from mesilla.testing.chaos.schedule import Fault, delay, loss
from mesilla.testing.processes import (
    Cluster,
    Daemon,
    DaemonError,
    answers,
)
from mesilla.testing.registry import Registry

RECOVERY_TIMEOUT = 180.0
EXECUTOR_REREGISTRATION_TIMEOUT = 10.0  # LINUX_AGENT_FLAGS's --executor_reregistration_timeout
PULL_WAIT = 10.0  # how long registry_down waits for a pull to cut short
DISK_SIZE = "64m"
FILL = ".chaos-fill"


def children(pid: int) -> list[int]:
    return sorted(process.pid for process in procfs.processes() if process.ppid == pid)


def executor_process(pid: int) -> int:
    """The executor's own process of a top-level container whose pid is `pid`: its child
    if `pid` is the container's init (tini, pid 1 of the container's pid namespace)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0]
    except OSError:
        return pid
    if argv0 != INIT_PATH.encode():
        return pid
    below = children(pid)
    return below[0] if below else pid


def monitors(runtime_dir: Path) -> list[tuple[str, int]]:
    """(runtime id, pid) of every live conmon monitor under `runtime_dir/containers`, from
    their pid files (`<id>[/containers/<child>...]/monitor/pid`), sorted by id."""
    base = runtime_dir / "containers"
    found = []
    # os.walk, not Path.rglob: containers come and go during the walk, and os.walk
    # skips a directory that vanished instead of raising.
    for directory, _, names in os.walk(base):
        pidfile = Path(directory) / "pid"
        if pidfile.parent.name != "monitor" or "pid" not in names:
            continue
        runtime_id = ".".join(pidfile.parent.parent.relative_to(base).parts[::2])
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            continue
        if is_monitor(pid, runtime_id):
            found.append((runtime_id, pid))
    return sorted(found)


def sandbox_root(cluster: Cluster, i: int) -> Path:
    """Where agent `i` keeps its sandboxes (`<work_dir>/slaves`)."""
    return cluster.agent_dir(i) / "slaves"


def mount_disks(cluster: Cluster) -> list[Path]:
    """A small tmpfs over each agent's sandbox root, before the agents start: the disk
    the disk_full fault fills. The checker leaves these mounts out of the leftovers."""
    disks = []
    for i in range(len(cluster.agents)):
        path = sandbox_root(cluster, i)
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE},mode=0755", "chaos-disk", str(path)],
                       check=True, capture_output=True)  # fmt: skip
        disks.append(path)
    return disks


def fill(path: Path) -> int:
    """Writes `path/FILL` until the file system is full; returns the bytes written."""
    written = 0
    chunk = b"\0" * (1 << 20)
    with open(path / FILL, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return written


class Injector:
    def __init__(self, cluster: Cluster, history: History, disks: list[Path], *,
                 network: Network | None = None, registry: Registry | None = None) -> None:  # fmt: skip
        self.cluster = cluster
        self.history = history
        self.disks = disks
        self.network = network
        self.registry = registry
        self.counts: Counter[str] = Counter()  # injected, by kind
        self.skipped: Counter[str] = Counter()  # nothing to hit at the time (no container, agent down)
        self.violations: list[str] = []
        self.down: set[str] = set()  # daemons under a fault now: "master", "agent 0", ...
        self._locks: dict[str, asyncio.Lock] = {}
        self._pending: set[asyncio.Task[None]] = set()

    def daemons(self) -> dict[str, Daemon]:
        return {"master": self.cluster.master, **{f"agent {i}": a for i, a in enumerate(self.cluster.agents)}}

    async def run(self, schedule: list[Fault]) -> None:
        """Injects every fault at its offset; returns once all were injected and recovered."""
        for fault in schedule:
            delay = fault.at - self.history.now()
            if delay > 0:
                await asyncio.sleep(delay)
            self.check_alive()
            task = asyncio.create_task(self._apply(fault))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        await asyncio.gather(*list(self._pending))

    def check_alive(self) -> None:
        """A daemon not under a fault must be running; one that exited on its own is restarted."""
        for name, daemon in self.daemons().items():
            if name in self.down or daemon.running or daemon.process is None:
                continue
            code = daemon.process.returncode
            self.violations.append(f"{name} exited on its own with {code} at +{self.history.now():.1f}s")
            self.history.add("chaos", "note", text=f"{name} exited on its own with {code}; restarted")
            daemon.start()

    async def _apply(self, fault: Fault) -> None:
        # A daemon's faults one at a time; an agent's network, and the registry, have their own.
        name = {"master_kill": "master", "registry_down": "registry"}.get(fault.kind, f"agent {fault.target}")
        if fault.kind.startswith("net_"):
            name = f"network {fault.target}"
        async with self._locks.setdefault(name, asyncio.Lock()):
            self.history.add("chaos", "fault", kind=fault.kind, target=name, duration=fault.duration,
                             pick=fault.pick, scheduled=fault.at)  # fmt: skip
            try:
                done = await getattr(self, fault.kind)(fault)
            except Exception as exc:
                self.violations.append(f"{fault.line()}: the harness failed to apply it: {exc!r}")
                return
            (self.counts if done else self.skipped)[fault.kind] += 1

    async def _recovered(self, fault: Fault, what: str, ready: Callable[[], object]) -> None:
        try:
            await asyncio.to_thread(ready)
        except DaemonError as exc:
            self.violations.append(f"{fault.line()}: {what} did not recover: {exc}")
        else:
            self.history.add("chaos", "recovered", fault=fault.kind, what=what)

    # --- the faults (each returns whether it hit something) -----------------------------

    async def agent_kill(self, fault: Fault) -> bool:
        i, name = fault.target, f"agent {fault.target}"
        daemon = self.cluster.agents[i]
        self.down.add(name)
        try:
            killed_at = time.time()
            await asyncio.to_thread(daemon.kill)
            await asyncio.sleep(fault.duration)
            daemon.start()
        finally:
            self.down.discard(name)
        await self._recovered(
            fault, name, lambda: self.cluster.await_agent_active(i, RECOVERY_TIMEOUT, after=killed_at)
        )
        return True

    async def master_kill(self, fault: Fault) -> bool:
        self.down.add("master")
        try:
            killed_at = time.time()
            await asyncio.to_thread(self.cluster.master.kill)
            await asyncio.sleep(fault.duration)
            self.cluster.master.start()
        finally:
            self.down.discard("master")
        master = self.cluster.master
        health = f"{self.cluster.master_url}/health"
        await self._recovered(fault, "master", lambda: master.await_ready(
            lambda: answers(health), "HTTP endpoint", RECOVERY_TIMEOUT))  # fmt: skip
        await self._recovered(fault, "agents re-registered", lambda: self._agents_back(killed_at))
        return True

    def _agents_back(self, after: float) -> None:
        """Every agent not under a fault of its own re-registered with the new master."""
        deadline = time.monotonic() + RECOVERY_TIMEOUT
        waiting = set(range(len(self.cluster.agents)))
        while waiting:
            for i in list(waiting):
                if f"agent {i}" in self.down:
                    waiting.discard(i)  # its own fault's recovery checks it
                    continue
                with contextlib.suppress(OSError, ValueError):
                    agent = self.cluster.agent_in_master(i)
                    if agent and agent.get("active"):
                        since = max(agent.get("reregistered_time") or 0, agent.get("registered_time") or 0)
                        if since >= after:
                            waiting.discard(i)
            if waiting and time.monotonic() > deadline:
                raise DaemonError(f"agents {sorted(waiting)} not re-registered within {RECOVERY_TIMEOUT}s")
            time.sleep(0.2)

    async def agent_stop(self, fault: Fault) -> bool:
        i, name = fault.target, f"agent {fault.target}"
        daemon = self.cluster.agents[i]
        if daemon.pid is None or not daemon.running:
            return False
        self.down.add(name)
        try:
            os.kill(daemon.pid, signal.SIGSTOP)
            await asyncio.sleep(fault.duration)
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
            self.down.discard(name)
        await self._recovered(fault, name, lambda: self.cluster.await_agent_active(i, RECOVERY_TIMEOUT))
        return True

    async def _containers(self, i: int) -> list[tuple[str, int, bool]]:
        """(name, pid, nested) of agent `i`'s containers with a pid, sorted by name."""
        try:
            pids = await asyncio.to_thread(self.cluster.container_pids, i)
        except (OSError, ValueError):
            return []
        return sorted((name, pid, "." in name) for name, pid in pids.items() if pid)

    async def executor_kill(self, fault: Fault) -> bool:
        found = [(n, p) for n, p, nested in await self._containers(fault.target) if not nested]
        return self._kill_one(fault, found)

    async def task_kill(self, fault: Fault) -> bool:
        containers = await self._containers(fault.target)
        nested_parents = {n.split(".", 1)[0] for n, _, nested in containers if nested}
        found = [(n, p) for n, p, nested in containers if nested and "check-" not in n]
        # A command task: its process is the command executor's child.
        for name, pid, nested in containers:
            if not nested and name not in nested_parents:
                found += [(f"{name} child", child) for child in children(executor_process(pid))]
        return self._kill_one(fault, found)

    def _kill_one(self, fault: Fault, found: list[tuple[str, int]]) -> bool:
        return self._signal_one(fault, found, signal.SIGKILL, "killed") is not None

    def _signal_one(self, fault: Fault, found: list[tuple[str, int]], signum: int, done: str) -> int | None:
        """Signals the one of `found` the fault picks; its pid, or None if none was there."""
        if not found:
            return None
        name, pid = found[int(fault.pick * len(found))]
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return None
        self.history.add("chaos", "note", text=f"{fault.kind}: {done} pid {pid} ({name})")
        return pid

    async def disk_full(self, fault: Fault) -> bool:
        if not self.disks:
            return False
        disk = self.disks[fault.target]
        try:
            written = await asyncio.to_thread(fill, disk)
            self.history.add("chaos", "note", text=f"disk_full: {disk} filled with {written} bytes")
            await asyncio.sleep(fault.duration)
        finally:
            with contextlib.suppress(FileNotFoundError):
                files.remove_file(str(disk), str(disk / FILL))
        return True

    async def conmon_kill(self, fault: Fault) -> bool:
        found = await asyncio.to_thread(monitors, self.cluster.runtime_dir(fault.target))
        return self._kill_one(fault, [(f"conmon of {rid}", pid) for rid, pid in found])

    async def conmon_stop(self, fault: Fault) -> bool:
        found = await asyncio.to_thread(monitors, self.cluster.runtime_dir(fault.target))
        return await self._stop_one(fault, [(f"conmon of {rid}", pid) for rid, pid in found])

    async def executor_stop(self, fault: Fault) -> bool:
        containers = await self._containers(fault.target)
        found = [(n, executor_process(p)) for n, p, nested in containers if not nested]
        return await self._stop_one(fault, found)

    async def _stop_one(self, fault: Fault, found: list[tuple[str, int]]) -> bool:
        """SIGSTOP of one of `found` for the fault's duration, then SIGCONT (if it still is)."""
        pid = self._signal_one(fault, found, signal.SIGSTOP, "stopped")
        if pid is None:
            return False
        try:
            await asyncio.sleep(fault.duration)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        return True

    async def net_partition(self, fault: Fault) -> bool:
        return await self._network_fault(fault, lambda link: link.drop())

    async def net_loss(self, fault: Fault) -> bool:
        return await self._network_fault(fault, lambda link: link.drop(loss(fault)))

    async def net_slow(self, fault: Fault) -> bool:
        async def slow(link: Link) -> None:
            link.delay = delay(fault)

        return await self._network_fault(fault, slow)

    async def _network_fault(self, fault: Fault, apply: Callable[[Link], Awaitable[None]]) -> bool:
        """`apply` to the agent's link for the fault's duration, then healed; the agent must
        be active in the master again (re-registered, if the fault cost it its connection)."""
        if self.network is None:
            return False
        i = fault.target
        link = self.network.links[i]
        try:
            await apply(link)
            await asyncio.sleep(fault.duration)
        finally:
            link.delay = 0.0
            await link.heal()
        active = self.cluster.await_agent_active
        await self._recovered(fault, f"agent {i}", lambda: active(i, RECOVERY_TIMEOUT))
        return True

    async def registry_down(self, fault: Fault) -> bool:
        """The registry killed as soon as an agent asks it for an image's manifest (the layers
        follow: a pull cut short), or after PULL_WAIT if none does; restarted after the
        fault's duration."""
        if self.registry is None:
            return False
        registry = self.registry
        mark = os.path.getsize(registry.log_path)
        deadline = time.monotonic() + PULL_WAIT
        while True:
            pulling = self._manifest_asked(mark)
            if pulling or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
        try:
            await asyncio.to_thread(registry.kill)
            when = "mid-pull" if pulling else "with no pull going"
            self.history.add("chaos", "note", text=f"registry_down: killed {when}")
            await asyncio.sleep(fault.duration)
        finally:
            await asyncio.to_thread(registry.restart)
        self.history.add("chaos", "recovered", fault=fault.kind, what="registry")
        return True

    def _manifest_asked(self, mark: int) -> bool:
        assert self.registry is not None
        with open(self.registry.log_path, "rb") as f:
            f.seek(mark)
            return b"/manifests/" in f.read()

    async def executor_hang(self, fault: Fault) -> bool:
        """A top-level container's executor stopped, its agent killed and restarted; once the
        agent is back and its executor_reregistration_timeout (and the fault's duration) has
        passed, the executor must be gone: destroyed by the agent. (Its tasks' ends are the
        checker's: `check.check_hung`.)"""
        i, name = fault.target, f"agent {fault.target}"
        try:
            entries = await asyncio.to_thread(self.cluster.containers, i)
        except (OSError, ValueError):
            return False
        found = sorted((n, e) for n, e in entries.items()
                       if "." not in n and e.get("container_status", {}).get("executor_pid"))  # fmt: skip
        if not found:
            return False
        container, entry = found[int(fault.pick * len(found))]
        pid = executor_process(entry["container_status"]["executor_pid"])
        started = procfs.start_time(pid)
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        text = f"executor_hang: stopped pid {pid} ({container}), then its agent killed"
        self.history.add("chaos", "hung", executor_id=entry["executor_id"]["value"], agent=name, text=text)
        try:
            self.down.add(name)
            try:
                killed_at = time.time()
                await asyncio.to_thread(self.cluster.agents[i].kill)
                self.cluster.agents[i].start()
            finally:
                self.down.discard(name)
            active = self.cluster.await_agent_active
            await self._recovered(fault, name, lambda: active(i, RECOVERY_TIMEOUT, after=killed_at))
            await asyncio.sleep(EXECUTOR_REREGISTRATION_TIMEOUT + fault.duration)
            survived = not await asyncio.to_thread(_gone, pid, started)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.history.add("chaos", "unhung", executor_id=entry["executor_id"]["value"],
                         text=f"executor_hang: pid {pid} continued (if still there)")  # fmt: skip
        if survived:
            self.violations.append(f"{fault.line()}: the hung executor {container} (pid {pid}) was still "
                                   f"there {EXECUTOR_REREGISTRATION_TIMEOUT + fault.duration:.0f}s "
                                   "after its agent came back")  # fmt: skip
        return True


def _gone(pid: int, started: int | None, timeout: float = 5.0) -> bool:
    """Whether process `pid` (started at `started`) is gone, or a zombie, within `timeout`
    (a destroy may be under way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = procfs.start_time(pid)
        if now is None or now != started:
            return True  # gone, a zombie, or another process by now
        time.sleep(0.1)
    return False
