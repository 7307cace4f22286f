"""avmesos-cli 1.3.0 (PyPI, the maintained Mesos CLI, unmodified) against `mesilla local`:
`mesos task list`, `mesos task inspect` and `mesos task exec` (also `-t`, on a terminal)."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import subprocess
import time
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

    def run(*args: str, stdin: str = "", status: int = 0, terminal: bool = False) -> str:
        if terminal:
            code, out, err = on_terminal([str(script), *args], env)
        else:
            result = subprocess.run([str(script), *args], env=env, input=stdin,
                                    capture_output=True, text=True, timeout=120)  # fmt: skip
            code, out, err = result.returncode, result.stdout, result.stderr
        assert code == status, (
            f"mesos {' '.join(args)} failed ({code}):\n{out}\n{err}\n"
            f"--- cluster log ---\n{cluster.log_tail()}"
        )
        return out

    return run


def on_terminal(argv: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, str, str]:
    """Runs `argv` with a pseudo-terminal as its stdin, stdout and stderr, as a user's shell
    would (`task exec -t` insists on one); (exit status, what it wrote, "")."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            argv, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
    finally:
        os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=10), out.decode(errors="replace"), ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


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


@pytest.mark.root
def test_task_exec_on_a_terminal(mesos: Callable[..., str]) -> None:
    # The session's terminal is a device of the task's filesystem: `tty` names it (ttyname).
    out = mesos(
        "task", "exec", "-t", "sleeper", "sh", "-c", "tty; test -t 0 && echo on-a-tty", terminal=True
    )
    lines = [line.strip() for line in out.replace("\r", "").splitlines() if line.strip()]
    assert lines[0].startswith("/dev/pts/") and "on-a-tty" in lines, out
