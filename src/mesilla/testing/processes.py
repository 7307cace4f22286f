"""A master and agents as separate `mesilla` processes, for fault-injection tests.

Unlike `cluster.LocalCluster` (one `mesilla local` process tree), every daemon
here is its own process started by us, so a test can `kill -9` one of them by
the pid it started, restart it with the same flags and watch what survives.

Everything a `Cluster` runs lives under one directory (work dirs, runtime
dirs, image store; the daemons' logs go beside it) and one cgroups root, which is how its leftovers are
found without ever looking processes up by name:

* processes whose cgroup is under the cgroups root (containers, as the linux
  launcher puts them there), or whose command line or environment names the
  directory (executors, conmon monitors, the daemons themselves);
* the OCI runtime's containers under each agent's `<runtime_dir>/<runtime>`;
* mounts under the directory; cgroups under the cgroups root.

`Cluster.leftovers` lists them (a test asserts it is empty once its workload
ended) and `Cluster.cleanup` removes them, whatever state a failed test left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mesilla.common import files, procfs
from mesilla.containerizer.launcher import monitor, zygote
from mesilla.testing.cluster import free_port

Json = dict[str, Any]

CGROUP_MOUNT = "/sys/fs/cgroup"
RUNTIMES = ("runc", "crun")


class DaemonError(RuntimeError):
    """A daemon exited or did not get ready in time; the message ends with its log."""


class Daemon:
    """One `mesilla master|agent` process with fixed flags; signalled only by its own pid."""

    def __init__(self, kind: str, flags: list[str], log_path: Path) -> None:
        self.kind = kind
        self.flags = flags
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, *extra: str) -> None:
        """Spawns the daemon (again, after a kill) with its flags and `extra` ones."""
        if self.running:
            raise DaemonError(f"{self.kind} is already running as pid {self.pid}")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"==== start {self.starts} of {self.kind} ====\n".encode())
            log.flush()
            # Its own session: a signal to the test's process group never reaches it.
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mesilla", self.kind, *self.flags, *extra],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            )  # fmt: skip

    def kill(self, signum: int = signal.SIGKILL) -> int:
        """Sends `signum` to the pid we started and reaps it; returns its exit code."""
        process = self._require()
        if process.poll() is None:
            process.send_signal(signum)
        return process.wait()

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM (a clean stop), then SIGKILL if it does not exit within `timeout`;
        False if it took SIGKILL."""
        if not self.running:
            return True
        process = self._require()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            # SIGABRT first: the fault handler writes where it hangs into its log.
            process.send_signal(signal.SIGABRT)
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            return False
        return True

    def wait_exit(self, timeout: float) -> int:
        try:
            return self._require().wait(timeout)
        except subprocess.TimeoutExpired:
            raise DaemonError(f"{self.kind} still running after {timeout}s:\n{self.log_tail()}") from None

    def await_ready(self, ready: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        """Polls `ready()` (OSError/ValueError count as not yet) until it is truthy."""
        deadline = time.monotonic() + timeout
        while True:
            process = self._require()
            if process.poll() is not None:
                raise DaemonError(
                    f"{self.kind} exited with {process.returncode} before {what}:\n{self.log_tail()}"
                )
            try:
                result = ready()
                if result:
                    return result
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise DaemonError(f"{self.kind}: no {what} within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _require(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            raise DaemonError(f"{self.kind} was never started")
        return self.process


def http_json(url: str, body: Json | None = None, timeout: float = 10.0) -> Any:
    """GET (or POST `body` as JSON) and decode the JSON answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", "Accept": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def answers(url: str) -> bool:
    """True once `url` answers 2xx (an HTTP error or a refused connection raise OSError)."""
    with urllib.request.urlopen(url, timeout=2):
        return True


def container_name(container_id: Json) -> str:
    """A ContainerID as `parent.child` (the OCI runtime id's form)."""
    parent = container_id.get("parent")
    value: str = container_id["value"]
    return (f"{container_name(parent)}." if parent else "") + value


# Agents on the linux launcher with images from a registry (the caller adds
# --docker_registry); short timeouts, so that fault tests stay quick.
LINUX_AGENT_FLAGS = [
    "--launcher=linux",
    "--oci_runtime=runc",
    "--isolation=filesystem/linux,docker/runtime,posix/cpu,posix/mem",
    "--image_providers=docker",
    "--resources=cpus:8;mem:8192;disk:8192;ports:[31000-32000]",
    "--executor_reregistration_timeout=10secs",
]

class Cluster:
    """One master and `num_agents` agents on 127.0.0.1 under `root`, as separate processes."""

    def __init__(
        self,
        root: Path,
        *,
        num_agents: int = 1,
        master_flags: list[str] | None = None,
        agent_flags: list[str] | None = None,
        master_ip: str = "127.0.0.1",
        agent_ips: list[str] | None = None,
    ) -> None:
        """`master_ip` and `agent_ips` (one per agent) are where each listens, for agents
        started in network namespaces of their own (default: all on 127.0.0.1)."""
        self.root = root
        self.master_ip = master_ip
        self.agent_ips = agent_ips or ["127.0.0.1"] * num_agents
        self.cgroups_root = f"mesilla-faults-{uuid.uuid4().hex[:8]}"
        root.mkdir(parents=True, exist_ok=True)
        # Beside `root`, so that the logs outlive `cleanup` for a post-mortem.
        self.log_dir = root.parent / f"{root.name}-logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.master_port = free_port()
        self.master = Daemon("master", [
            f"--ip={master_ip}", f"--port={self.master_port}", f"--work_dir={root / 'master'}",
            "--allocation_interval=50ms", *(master_flags or []),
        ], self.log_dir / "master.log")  # fmt: skip
        self.agents: list[Daemon] = []
        self.agent_ports: list[int] = []
        for i in range(num_agents):
            port = free_port()
            self.agent_ports.append(port)
            self.agents.append(Daemon("agent", [
                f"--ip={self.agent_ips[i]}", f"--port={port}", f"--master={self.master_address}",
                f"--work_dir={self.agent_dir(i)}", f"--runtime_dir={self.runtime_dir(i)}",
                # Each agent's own store: a store's recovery clears its staging area, which
                # holds the pulls in progress of every agent using it.
                f"--cgroups_root={self.cgroups_root}", f"--docker_store_dir={root / f'store-{i}' / 'docker'}",
                "--registration_backoff_factor=100ms", *(agent_flags or []),
            ], self.log_dir / f"agent-{i}.log"))  # fmt: skip

    # --- addresses and layout ---------------------------------------------------------

    @property
    def master_url(self) -> str:
        return f"http://{self.master_address}"

    @property
    def master_address(self) -> str:
        return f"{self.master_ip}:{self.master_port}"

    def agent_url(self, i: int = 0) -> str:
        return f"http://{self.agent_ips[i]}:{self.agent_ports[i]}"

    def agent_dir(self, i: int = 0) -> Path:
        return self.root / f"agent-{i}"

    def runtime_dir(self, i: int = 0) -> Path:
        return self.root / f"agent-{i}" / "run"

    # --- starting and waiting ---------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        self.start_master(timeout)
        for i in range(len(self.agents)):
            self.start_agent(i, timeout)

    def start_master(self, timeout: float = 60.0) -> None:
        self.master.start()
        self.master.await_ready(lambda: answers(f"{self.master_url}/health"), "HTTP endpoint", timeout)

    def start_agent(self, i: int = 0, timeout: float = 60.0, *, registered: bool = True) -> None:
        """Starts agent `i`; waits until the master lists it active (when `registered`)."""
        self.agents[i].start()
        if registered:
            self.await_agent_active(i, timeout)

    def agent_in_master(self, i: int = 0) -> Json | None:
        """The master's /slaves entry of agent `i` (matched by port), or None."""
        agents = http_json(f"{self.master_url}/slaves", timeout=5).get("slaves", [])
        return next((a for a in agents if a.get("port") == self.agent_ports[i]), None)

    def await_agent_active(self, i: int = 0, timeout: float = 60.0, *, after: float = 0.0) -> Json:
        """Waits until the master shows agent `i` active (and re-registered after `after`, wall time)."""

        def ready() -> Json | None:
            agent = self.agent_in_master(i)
            if not agent or not agent.get("active"):
                return None
            if after and max(agent.get("reregistered_time") or 0, agent.get("registered_time") or 0) < after:
                return None
            return agent

        result: Json = self.agents[i].await_ready(ready, "active agent in the master", timeout)
        return result

    def agent_metrics(self, i: int = 0) -> dict[str, float]:
        result: dict[str, float] = http_json(f"{self.agent_url(i)}/metrics/snapshot", timeout=5)
        return result

    def agent_call(self, body: Json, i: int = 0, timeout: float = 30.0) -> Any:
        """A call of the agent's v1 operator API (`/api/v1`), answered in JSON."""
        return http_json(f"{self.agent_url(i)}/api/v1", body, timeout)

    def containers(self, i: int = 0) -> dict[str, Json]:
        """GET_CONTAINERS (nested too) of agent `i`: container name -> its entry."""
        body = self.agent_call({"type": "GET_CONTAINERS", "get_containers": {"show_nested": True}}, i)
        entries = body["get_containers"].get("containers", [])
        return {container_name(e["container_id"]): e for e in entries}

    def container_pids(self, i: int = 0) -> dict[str, int | None]:
        return {
            name: e.get("container_status", {}).get("executor_pid") for name, e in self.containers(i).items()
        }

    # --- what the cluster left --------------------------------------------------------

    def daemon_pids(self) -> set[int]:
        return {d.pid for d in (self.master, *self.agents) if d.running and d.pid is not None}

    def processes(self) -> dict[int, str]:
        """Live processes of this cluster, daemons excepted: pid -> command line."""
        mine = os.getpid()
        daemons = self.daemon_pids()
        marker = str(self.root).encode()
        cgroup_marker = f"/{self.cgroups_root}".encode()
        found: dict[int, str] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in daemons or int(entry) == mine:
                continue
            process = procfs.stat(entry)
            if process is None or process.state == "Z":
                continue  # a zombie holds nothing; its parent reaps it
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
                with open(f"/proc/{entry}/cgroup", "rb") as f:
                    cgroups = f.read()
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            paths = [line.split(b":", 2)[-1] for line in cgroups.splitlines()]
            in_cgroup = any(p == cgroup_marker or p.startswith(cgroup_marker + b"/") for p in paths)
            if in_cgroup or marker in cmdline or marker in environ:
                found[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        return found

    def runtime_containers(self) -> list[tuple[str, Path, str]]:
        """(runtime binary, its --root, container id) of every OCI container of our agents."""
        found = []
        for i in range(len(self.agents)):
            for binary in RUNTIMES:
                root = self.runtime_dir(i) / binary
                if not root.is_dir() or shutil.which(binary) is None:
                    continue
                done = subprocess.run([binary, "--root", str(root), "list", "-q"],
                                      check=False, capture_output=True, text=True)  # fmt: skip
                found += [(binary, root, rid) for rid in done.stdout.split()]
        return found

    def forked_containers(self) -> list[str]:
        """Runtime ids of the live executors our agents forked from their zygotes, which
        no OCI runtime lists: a `monitor/forked` marker and a live `init.identity`."""
        found = []
        for i in range(len(self.agents)):
            for directory in sorted(self.runtime_dir(i).glob("containers/*/monitor")):
                pid = monitor.read_pid(str(directory), "init.pid")
                if (
                    zygote.is_forked(str(directory))
                    and pid is not None
                    and (monitor.identified(pid, str(directory), "init.identity"))
                ):
                    found.append(directory.parent.name)
        return found

    def mounts(self) -> list[str]:
        prefix = str(self.root) + "/"
        with open("/proc/self/mountinfo") as f:
            return [line.split()[4] for line in f if line.split()[4].startswith(prefix)]

    def cgroups(self, *, with_root: bool = False) -> list[str]:
        """Cgroup directories under the cgroups root in every hierarchy, deepest first."""
        found = []
        for hierarchy in sorted(os.listdir(CGROUP_MOUNT)):
            base = os.path.join(CGROUP_MOUNT, hierarchy)
            top = os.path.join(base, self.cgroups_root)
            if os.path.islink(base) or not os.path.isdir(top):
                continue
            for directory, _, _ in os.walk(top, topdown=False):
                if with_root or directory != top:
                    found.append(directory)
        return found

    def leftovers(self) -> list[str]:
        """Containers, processes, mounts and container cgroups still there (daemons excepted)."""
        left = [f"{binary} container {rid}" for binary, _, rid in self.runtime_containers()]
        left += [f"forked executor {rid}" for rid in self.forked_containers()]
        left += [f"process {pid}: {cmdline}" for pid, cmdline in sorted(self.processes().items())]
        left += [f"mount {m}" for m in self.mounts()]
        left += [f"cgroup {c}" for c in self.cgroups()]
        return left

    def await_no_leftovers(self, timeout: float = 30.0) -> list[str]:
        """Waits (bounded) for the leftovers to go away, as containers end asynchronously;
        returns what is still there at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.leftovers()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def cleanup(self) -> list[str]:
        """Stops the daemons, then removes everything of the cluster; returns what it removed
        besides daemons that stopped on SIGTERM (empty after a test that cleaned up after itself)."""
        removed = []
        for daemon in (*self.agents, self.master):
            if not daemon.stop():
                removed.append(f"{daemon.kind} pid {daemon.pid}: no exit within 10s of SIGTERM")
        for binary, root, rid in self.runtime_containers():
            removed.append(f"{binary} container {rid}")
            subprocess.run([binary, "--root", str(root), "delete", "--force", rid],
                           check=False, capture_output=True)  # fmt: skip
        for pid, cmdline in self.processes().items():
            removed.append(f"process {pid}: {cmdline}")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for mount in sorted(self.mounts(), reverse=True):
            removed.append(f"mount {mount}")
            with contextlib.suppress(OSError):
                files.unmount(str(self.root), mount, detach=True)
        deadline = time.monotonic() + 10
        for cgroup in self.cgroups(with_root=True):
            # A killed process leaves its cgroup a moment after SIGKILL.
            while os.path.isdir(cgroup):
                with contextlib.suppress(OSError):
                    files.remove_dir(CGROUP_MOUNT, cgroup)
                if time.monotonic() > deadline:
                    removed.append(f"cgroup {cgroup} (still busy)")
                    break
                if os.path.isdir(cgroup):
                    time.sleep(0.05)
        files.remove_tree(str(self.root.parent), str(self.root), ignore_errors=True)
        return removed
