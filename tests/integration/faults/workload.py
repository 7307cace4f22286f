"""What the fault tests run: command tasks and pods, and how to find them on the host."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from mesilla.testing.processes import Cluster, container_name, http_json
from mesilla.testing.scheduler import Framework, Json, scalar


def task(name: str, command: str, *, cpus: float = 0.1, mem: float = 32, **extra: Any) -> Json:
    return {
        "name": name,
        "task_id": {"value": f"{name}-{uuid.uuid4().hex[:8]}"},
        "resources": [scalar("cpus", cpus), scalar("mem", mem)],
        "command": {"value": command},
        **extra,
    }


def tid(task_info: Json) -> str:
    return str(task_info["task_id"]["value"])


def pod_executor(name: str = "pod") -> Json:
    return {
        "type": "DEFAULT",
        "executor_id": {"value": f"{name}-{uuid.uuid4().hex[:8]}"},
        "resources": [scalar("cpus", 0.1), scalar("mem", 32), scalar("disk", 10)],
    }


def container(image: str | None = None, shared: str | None = None) -> Json:
    """A MESOS container with a docker `image` and/or a SANDBOX_PATH volume shared in the pod."""
    info: Json = {"type": "MESOS"}
    if image is not None:
        info["mesos"] = {"image": {"type": "DOCKER", "docker": {"name": image}}}
    if shared is not None:
        info["volumes"] = [{
            "container_path": shared, "mode": "RW",
            "source": {"type": "SANDBOX_PATH", "sandbox_path": {"type": "PARENT", "path": shared}},
        }]  # fmt: skip
    return info


def http_health_check(port: int, path: str) -> Json:
    return {
        "type": "HTTP", "http": {"port": port, "path": path},
        "delay_seconds": 0, "interval_seconds": 0.5, "timeout_seconds": 10, "grace_period_seconds": 60,
    }  # fmt: skip


def restart_on_failure(max_restarts: int = 5) -> Json:
    return {
        "type": "ON_FAILURE",
        "max_restarts": max_restarts,
        "min_restart_delay": {"nanoseconds": 100_000_000},
    }


def container_of(framework: Framework, containers: dict[str, Json], task_id: str) -> str:
    """The name (as `Cluster.containers` gives it) of the container a task runs in: a pod
    task's nested container (from its TASK_RUNNING), else its command executor's container."""
    for update in framework.updates:
        if update.task_id == task_id and "container_status" in update.status:
            return container_name(update.status["container_status"]["container_id"])
    for name, entry in containers.items():
        if entry.get("executor_id", {}).get("value") == task_id:
            return name
    raise AssertionError(f"no container of task {task_id} in {sorted(containers)}")


def executor_pid(cluster: Cluster, executor_id: str, i: int = 0) -> int:
    """The pid of an executor's (top-level) container on agent `i`."""
    for entry in cluster.containers(i).values():
        if entry.get("executor_id", {}).get("value") == executor_id:
            pid = entry.get("container_status", {}).get("executor_pid")
            assert pid, entry
            return int(pid)
    raise AssertionError(f"no container of executor {executor_id}")


def executors_in_master(cluster: Cluster) -> list[str]:
    """The ids of the executors the master holds (its /state), sorted."""
    state = http_json(f"{cluster.master_url}/state")
    return sorted(e["executor_id"] for f in state.get("frameworks", []) for e in f.get("executors", []))


def idle_in_master(cluster: Cluster, i: int = 0) -> Json | None:
    """Agent `i`'s /slaves entry once the master holds nothing in use there and no
    executor anywhere, else None (for `Daemon.await_ready`)."""
    agent = cluster.agent_in_master(i)
    used = agent["used_resources"] if agent else None
    idle = used is not None and not used.get("cpus") and not executors_in_master(cluster)
    return agent if idle else None


def executor_sandbox(cluster: Cluster, framework_id: str, executor_id: str, i: int = 0) -> Path:
    """The newest run's sandbox of an executor on agent `i` (the agent's `runs/latest`)."""
    found = list(
        cluster.agent_dir(i).glob(f"slaves/*/frameworks/{framework_id}/executors/{executor_id}/runs/latest")
    )
    assert len(found) == 1, f"no single sandbox of executor {executor_id}: {found}"
    return found[0].resolve()


def marked_processes(cluster: Cluster, marker: str) -> list[int]:
    """Live processes of the cluster whose command line holds `marker` (a unique string in
    a task's command, as `sh -c` keeps it in its argv)."""
    return [pid for pid, cmdline in cluster.processes().items() if marker in cmdline]


def await_gone(cluster: Cluster, marker: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while marked_processes(cluster, marker):
        assert time.monotonic() < deadline, f"processes of {marker} still alive after {timeout}s"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
