"""Runs `mesilla local` as a real process tree for tests, benchmarks and examples."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ClusterError(RuntimeError):
    """The cluster did not come up; the message includes the end of its log."""


class LocalCluster:
    """A master and agents on 127.0.0.1 in their own process group, logging to a file."""

    def __init__(self, work_dir: Path, *, num_agents: int = 1, extra_flags: list[str] | None = None,
                 python: str = sys.executable) -> None:  # fmt: skip
        self.work_dir = work_dir
        self.python = python  # another checkout's interpreter runs that checkout's code
        self.num_agents = num_agents
        self.extra_flags = extra_flags or []
        self.master_port = free_port()
        self.agent_ports = [free_port() for _ in range(num_agents)]
        self.log_path = work_dir / "cluster.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def master(self) -> str:
        return f"127.0.0.1:{self.master_port}"

    def start(self, timeout: float = 60.0) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # Agents get consecutive ports from --agent_port; with one agent the
        # free port found above is used as is.
        args = [
            self.python, "-m", "mesilla", "local",
            f"--work_dir={self.work_dir}",
            f"--port={self.master_port}",
            f"--agent_port={self.agent_ports[0]}",
            f"--num_agents={self.num_agents}",
            *self.extra_flags,
        ]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ClusterError(
                    f"mesilla local exited with {self._process.returncode}:\n{self.log_tail()}"
                )
            try:
                agents = self.get_json("/slaves").get("slaves", [])
                if len([a for a in agents if a.get("active")]) >= self.num_agents:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise ClusterError(f"cluster not up within {timeout}s:\n{self.log_tail()}")

    def get_json(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.master}{path}", timeout=5) as resp:
            state: dict[str, Any] = json.loads(resp.read())
            return state

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> None:
        """Stops the cluster (agents shut their executors down), then anything left in its group."""
        process = self._process
        if process is None:
            return
        self._process = None
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if process.poll() is None:
            process.wait()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
