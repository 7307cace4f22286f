"""Forked default executors (`--fork_default_executors`): pods on executors the agent's
zygote forks into their cgroups and namespaces, end to end on separate daemons."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework

from mesilla.common import procfs
from mesilla.containerizer.launcher import monitor
from mesilla.testing.processes import Cluster
from mesilla.testing.scheduler import Framework, Json, scalar

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow]

AGENT_FLAGS = [
    "--launcher=linux",
    "--oci_runtime=runc",
    "--isolation=filesystem/linux,cgroups/cpu,cgroups/mem",
    "--resources=cpus:4;mem:4096;disk:4096",
    "--executor_reregistration_timeout=10secs",
]
MB = 1024 * 1024


@pytest.fixture
def cluster_agent_flags() -> list[str]:
    """`make_cluster`'s agents: no images, so no registry."""
    return AGENT_FLAGS


def task(name: str, command: str, mem: float = 32) -> Json:
    return {
        "name": name,
        "task_id": {"value": f"{name}-{uuid.uuid4().hex[:8]}"},
        "resources": [scalar("cpus", 0.1), scalar("mem", mem)],
        "command": {"value": command},
        "container": {"type": "MESOS", "linux_info": {"share_cgroups": False}},
    }


async def launch_pod(framework: Framework, *tasks: Json) -> str:
    executor_id = f"pod-{uuid.uuid4().hex[:8]}"
    executor = {
        "type": "DEFAULT",
        "executor_id": {"value": executor_id},
        "resources": [scalar("cpus", 0.1), scalar("mem", 32), scalar("disk", 10)],
    }
    await framework.launch_group(await framework.offer(), executor, list(tasks))
    await framework.until_state([t["task_id"]["value"] for t in tasks], "TASK_RUNNING", 60)
    return executor_id


def pod_containers(cluster: Cluster, executor_id: str) -> tuple[str, int, dict[str, int]]:
    """(the executor's runtime id, its pid, each nested container's name -> pid)."""
    entries = cluster.containers()
    top = next(n for n, e in entries.items() if e.get("executor_id", {}).get("value") == executor_id)
    pids = {n: int(e["container_status"]["executor_pid"]) for n, e in entries.items()}
    nested = {n: pid for n, pid in pids.items() if n.startswith(top + ".")}
    return top, pids[top], nested


def namespace(pid: int, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def innermost_pid(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        return next(line.split()[-1] for line in f if line.startswith("NSpid:"))


def await_dead(pid: int, timeout: float = 30.0) -> None:
    """Until `pid` is gone or a zombie."""
    deadline = time.monotonic() + timeout
    while procfs.start_time(pid) is not None:
        assert time.monotonic() < deadline, f"process {pid} still alive after {timeout}s"
        time.sleep(0.05)


async def test_a_pod_runs_on_a_forked_executor_in_its_namespaces_and_limits(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster)
    executor_id = await launch_pod(framework, task("a", "sleep 3600", mem=48), task("b", "sleep 3600"))
    rid, pid, nested = pod_containers(cluster, executor_id)

    assert cluster.forked_containers() == [rid]
    assert [r for _, _, r in cluster.runtime_containers()] == sorted(nested)  # the tasks only
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert b"mesilla.executor.zygote" in f.read()  # forked, never exec'd
    assert innermost_pid(pid) == "1"  # pid 1 of its own pid namespace
    for kind in ("mnt", "pid"):
        assert namespace(pid, kind) != namespace(os.getpid(), kind)
    with open(f"/proc/{pid}/mountinfo") as f:
        top = next(line.split() for line in f if line.split()[4] == "/")
    assert "ro" in top[5].split(",")  # the shared host view, read-only at its top as under runc
    root = f"/sys/fs/cgroup/memory/{cluster.cgroups_root}/{rid}"
    with open(f"/proc/{pid}/cgroup") as f:
        assert any(line.endswith(f"/{cluster.cgroups_root}/{rid}\n") for line in f if ":memory:" in line)
    with open(f"/sys/fs/cgroup/devices/{cluster.cgroups_root}/{rid}/devices.list") as f:
        rules = f.read().split("\n")
    assert "a *:* rwm" not in rules and "c 1:3 rwm" in rules
    limits = []
    for name, task_pid in nested.items():
        # The tasks join the executor's IPC and UTS namespaces; their cgroups are under its.
        for kind in ("ipc", "uts", "net"):
            assert namespace(task_pid, kind) == namespace(pid, kind)
        with open(f"{root}/{name.split('.')[-1]}/memory.limit_in_bytes") as f:
            limits.append(int(f.read()))
    assert sorted(limits) == [32 * MB, 48 * MB]

    await framework.close()  # its teardown destroys the pod
    assert cluster.await_no_leftovers() == []


async def test_a_forked_executor_survives_an_agent_kill_and_its_exit_is_recorded(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster)
    tasks = [task("a", "sleep 3600")]
    executor_id = await launch_pod(framework, *tasks)
    rid, pid, _ = pod_containers(cluster, executor_id)

    agent = cluster.agents[0]
    agent.kill()
    back_at = time.time()
    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=back_at)
    assert pod_containers(cluster, executor_id)[1] == pid  # recovered, the same process
    assert cluster.forked_containers() == [rid]

    # It ends while the agent is down: its monitor records how, the agent reads it back.
    agent.kill()
    monitor_dir = cluster.runtime_dir() / "containers" / rid / "monitor"
    monitor_pid = monitor.read_pid(str(monitor_dir), "pid")
    assert monitor_pid is not None
    os.kill(pid, signal.SIGKILL)
    await_dead(monitor_pid)
    assert monitor.exit_code(str(monitor_dir), rid) == 128 + signal.SIGKILL
    back_at = time.time()
    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=back_at)
    await framework.until_state([t["task_id"]["value"] for t in tasks], "TERMINAL", 60)
    assert len(framework.terminal(tasks[0]["task_id"]["value"])) == 1, framework.summary()
    assert cluster.await_no_leftovers() == []


async def test_without_the_flag_the_executor_is_a_runc_container(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster = make_cluster(agent_flags=["--no-fork_default_executors"])
    framework = await make_framework(cluster)
    executor_id = await launch_pod(framework, task("a", "sleep 3600"))
    rid, _pid, nested = pod_containers(cluster, executor_id)
    assert cluster.forked_containers() == []
    assert sorted(r for _, _, r in cluster.runtime_containers()) == sorted([rid, *nested])
    await framework.close()
    assert cluster.await_no_leftovers() == []
