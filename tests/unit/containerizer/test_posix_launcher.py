"""The posix launcher on its own: held start, gate abort, rlimits, cwd, recovery."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace
from typing import Any

import pytest

from mesilla.containerizer.launcher.base import LaunchError
from mesilla.containerizer.launcher.posix import PosixLauncher
from mesilla.containerizer.types import (
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerRuntimeState,
    ForkRequest,
)
from mesilla.v1.mesos import CommandInfo, ContainerID


@pytest.fixture
async def launcher(tmp_path: Any) -> Any:
    posix = PosixLauncher(SimpleNamespace(runtime_dir=str(tmp_path / "runtime")))
    yield posix
    for container_id in list(posix._containers):
        await posix.destroy(container_id)


def config(tmp_path: Any) -> ContainerConfig:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir(exist_ok=True)
    return ContainerConfig(
        command=CommandInfo(value="unused"),
        sandbox=str(sandbox),
        environment={"PATH": "/usr/bin:/bin"},
    )


async def test_process_is_held_until_start(launcher: PosixLauncher, tmp_path: Any) -> None:
    cid = ContainerID(value="held")
    pid = await launcher.fork(ForkRequest(
        cid, ["sh", "-c", "echo ran > ran"], config(tmp_path), ContainerLaunchInfo()
    ))
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid
    # Held: alive, but its command has not run (it would create `ran` at once).
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert b"posix_nanny.py" in f.read()
    assert not (tmp_path / "sandbox" / "ran").exists()
    await launcher.start(cid)
    assert await launcher.wait(cid) == 0
    assert (tmp_path / "sandbox" / "ran").read_text() == "ran\n"
    assert (tmp_path / "runtime/containers/held/status").read_text() == "0\n"
    assert (tmp_path / "runtime/containers/held/pid").read_text() == f"{pid}\n"


async def test_destroy_before_start_never_runs_the_command(
    launcher: PosixLauncher, tmp_path: Any
) -> None:
    cid = ContainerID(value="aborted")
    await launcher.fork(ForkRequest(
        cid, ["sh", "-c", "echo ran > ran"], config(tmp_path), ContainerLaunchInfo()
    ))
    await launcher.destroy(cid)
    assert not (tmp_path / "sandbox" / "ran").exists()
    assert launcher.pid(cid) is None


async def test_launch_info_working_directory_environment_and_rlimits(
    launcher: PosixLauncher, tmp_path: Any
) -> None:
    cid = ContainerID(value="info")
    workdir = tmp_path / "work"
    workdir.mkdir()
    info = ContainerLaunchInfo(
        environment={"FROM_INFO": "1"},
        working_directory=str(workdir),
        rlimits=[("RLMT_NOFILE", 123, 456), ("RLMT_CORE", None, None)],
    )
    script = 'echo "$PWD $FROM_INFO $(ulimit -Sn) $(ulimit -Hn) $(ulimit -c)"'
    await launcher.fork(ForkRequest(cid, ["sh", "-c", script], config(tmp_path), info))
    await launcher.start(cid)
    assert await launcher.wait(cid) == 0
    # The launcher applies the merged info's environment on top of the config's.
    assert (tmp_path / "sandbox" / "stdout").read_text() == f"{workdir} 1 123 456 unlimited\n"


async def test_exec_failure_is_exit_127(launcher: PosixLauncher, tmp_path: Any) -> None:
    cid = ContainerID(value="noexec")
    await launcher.fork(ForkRequest(cid, ["/no/such/binary"], config(tmp_path), ContainerLaunchInfo()))
    await launcher.start(cid)
    status = await launcher.wait(cid)
    assert status is not None and os.WEXITSTATUS(status) == 127
    assert "/no/such/binary" in (tmp_path / "sandbox" / "stderr").read_text()


async def test_refuses_namespaces_and_rootfs(launcher: PosixLauncher, tmp_path: Any) -> None:
    with pytest.raises(LaunchError, match="--launcher=linux"):
        await launcher.fork(ForkRequest(
            ContainerID(value="ns"), ["true"], config(tmp_path),
            ContainerLaunchInfo(clone_namespaces={"pid"}),))  # fmt: skip


async def test_recover_reports_orphans_and_reattaches(tmp_path: Any) -> None:
    flags = SimpleNamespace(runtime_dir=str(tmp_path / "runtime"))
    first = PosixLauncher(flags)
    known, orphan = ContainerID(value="known"), ContainerID(value="orphan")
    for cid in (known, orphan):
        await first.fork(ForkRequest(cid, ["sleep", "1000"], config(tmp_path), ContainerLaunchInfo()))
        await first.start(cid)
    second = PosixLauncher(flags)
    try:
        orphans = await second.recover([ContainerRuntimeState(known, first.pid(known), None)])
        assert orphans == {orphan}
        assert second.pid(known) == first.pid(known)
        await second.kill(known, signal.SIGTERM)
        status = await second.wait(known)
        assert status is not None and os.WTERMSIG(status) == signal.SIGTERM
    finally:
        for cid in (known, orphan):
            await second.destroy(cid)
            await first.destroy(cid)


async def test_environment_is_exactly_the_containers(
    launcher: PosixLauncher, tmp_path: Any
) -> None:
    cid = ContainerID(value="env")
    cfg = config(tmp_path)
    cfg.environment = {"ONLY": "this"}  # no locale: the supervisor's Python must not add one
    await launcher.fork(ForkRequest(cid, ["/usr/bin/env"], cfg, ContainerLaunchInfo()))
    await launcher.start(cid)
    assert await launcher.wait(cid) == 0
    assert (tmp_path / "sandbox" / "stdout").read_text() == "ONLY=this\n"
