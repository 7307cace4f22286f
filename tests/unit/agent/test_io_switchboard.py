"""The agent's side of the TTY switchboard servers, on a bare agent (flags only)."""

from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mesilla.agent import io_switchboard
from mesilla.agent import io_switchboard_server as server
from mesilla.v1.mesos import ContainerID


def _servers(tmp_path: Path) -> io_switchboard.Servers:
    agent: Any = SimpleNamespace(flags=SimpleNamespace(runtime_dir=str(tmp_path / "run")))
    return io_switchboard.Servers(agent)


def _consoles() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "mesilla-console-*")))


async def test_a_server_that_fails_to_start_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = tmp_path / "failing.py"
    pid_file = tmp_path / "pid"
    failing.write_text(
        f"import os, sys; open({str(pid_file)!r}, 'w').write(str(os.getpid())); sys.exit(3)\n"
    )
    monkeypatch.setattr(io_switchboard, "SERVER_SCRIPT", str(failing))
    servers = _servers(tmp_path)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    consoles = _consoles()
    container_id = ContainerID(value="child", parent=ContainerID(value="parent"))
    with pytest.raises(OSError, match="failed to start"):
        await servers.start(container_id, str(sandbox))
    assert not os.path.exists(servers.directory(container_id))
    assert _consoles() == consoles
    with pytest.raises(ChildProcessError):
        os.waitpid(int(pid_file.read_text()), os.WNOHANG)  # reaped


async def test_a_running_server_is_found_by_its_container_and_stopped(tmp_path: Path) -> None:
    servers = _servers(tmp_path)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    container_id = ContainerID(value="x" * 242, parent=ContainerID(value="y" * 242))
    console_path = await servers.start(container_id, str(sandbox))
    pid = int(Path(servers.directory(container_id), server.PID_FILE).read_text())
    try:
        assert len(console_path) < 108
        with pytest.raises(FileExistsError):
            await servers.start(container_id, str(sandbox))
        # Its socket's path is too long to connect to by name; the agent gets there anyway.
        _, writer = await servers.connect(container_id, server.INPUT)
        with pytest.raises(io_switchboard.InputBusy):
            await servers.connect(container_id, server.INPUT)
        writer.close()
        with pytest.raises(io_switchboard.NoServer):
            await servers.connect(ContainerID(value="other"), server.OUTPUT)
    finally:
        await servers.stop(container_id)  # no terminal ever came: SIGTERM ends it
    assert not os.path.exists(servers.directory(container_id))
    assert not os.path.exists(os.path.dirname(console_path))
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped
