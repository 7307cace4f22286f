"""avmesos-cli 1.3.0 (PyPI, the maintained Mesos CLI, unmodified) against `mesilla local`:
`mesos task list`, `mesos task inspect` and `mesos task exec`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable

import pytest

from mesilla.testing.cluster import LocalCluster
from mesilla.testing.scheduler import Framework, scalar
from tests.compat import install

pytestmark = [pytest.mark.compat, pytest.mark.integration]


@pytest.fixture(scope="module")
def mesos(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """`mesos ARGS...` configured for the cluster, which runs the tasks `sleeper` and `finished`;
    returns what it printed, once it exited with `status`."""
    with install.locked():
        script = install.install_avmesos_cli()
    config = tmp_path_factory.mktemp("avmesos-cli") / "config.toml"
    config.write_text(f'[master]\naddress = "{cluster.master}"\n')
    # The script runs `python -m avmesos.cli.mesos-cli`: the venv's python first on PATH.
    env = {**os.environ, "MESOS_CLI_CONFIG": str(config), "PATH": f"{script.parent}:{os.environ['PATH']}"}
    asyncio.run(launch(cluster))

    def run(*args: str, stdin: str = "", status: int = 0) -> str:
        result = subprocess.run([str(script), *args], env=env, input=stdin,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == status, (
            f"mesos {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}\n"
            f"--- cluster log ---\n{cluster.log_tail()}"
        )
        return result.stdout

    return run


async def launch(cluster: LocalCluster) -> None:
    # A framework that may fail over leaves its tasks running when it goes; the cluster's stop ends them.
    framework = Framework(cluster.master, "avmesos-cli", failover_timeout=3600)
    await framework.subscribe()
    try:
        offer = await framework.offer()
        tasks = [{"name": name, "task_id": {"value": name}, "agent_id": offer["agent_id"],
                  "resources": [scalar("cpus", 0.1), scalar("mem", 32)], "command": {"value": command}}
                 for name, command in (("sleeper", "sleep 3600"), ("finished", "true"))]  # fmt: skip
        await framework.launch(offer, tasks)
        await framework.until_state(["sleeper"], "TASK_RUNNING")
        await framework.until_state(["finished"], "TASK_FINISHED")
    finally:
        await framework.disconnect()
        await framework.close()


def test_task_list(mesos: Callable[..., str]) -> None:
    rows = [line.split() for line in mesos("task", "list").splitlines()]
    assert rows[0] == ["ID", "State", "Framework", "ID", "Executor", "ID"]
    assert [row[:2] for row in rows[1:]] == [["sleeper", "TASK_RUNNING"]]
    everything = mesos("task", "list", "--all")
    assert "finished" in everything and "TASK_FINISHED" in everything


def test_task_inspect(mesos: Callable[..., str]) -> None:
    task = json.loads(mesos("task", "inspect", "sleeper"))
    assert task["id"] == "sleeper" and task["state"] == "TASK_RUNNING"
    assert task["statuses"][-1]["container_status"]["container_id"]["value"]


@pytest.mark.root
def test_task_exec(mesos: Callable[..., str]) -> None:
    # The session runs in the task's container: it sees the task's sleep as one of its processes.
    out = mesos("task", "exec", "sleeper", "sh", "-c", "echo exec-$((6 * 7)); ps -o args")
    assert out.splitlines()[0] == "exec-42"
    assert "sleep 3600" in out


@pytest.mark.root
def test_task_exec_interactive_and_its_exit_status(mesos: Callable[..., str]) -> None:
    assert mesos("task", "exec", "-i", "sleeper", "cat", stdin="typed in\n") == "typed in\n"
    mesos("task", "exec", "sleeper", "sh", "-c", "exit 3", status=3)
