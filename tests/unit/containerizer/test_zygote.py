"""The forked executors' request and monitor-file logic (no zygote process started here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mesilla.common.flags import parse
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.launcher import monitor, zygote
from mesilla.containerizer.launcher.base import LaunchError
from mesilla.containerizer.launcher.linux import MONITOR_DIR, _Container, _signal_init
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo, ForkRequest
from mesilla.executor import zygote as process
from mesilla.v1.mesos import CommandInfo, ContainerID

EXECUTOR_ARGV = [sys.executable, "-m", "mesilla.executor.default"]


def request(tmp_path: Path, argv: list[str] = EXECUTOR_ARGV, **config: Any) -> ForkRequest:
    config.setdefault("executor_as_root", True)
    return ForkRequest(
        ContainerID(value="pod"),
        argv,
        ContainerConfig(command=CommandInfo(value=argv[0]), sandbox=str(tmp_path), **config),
        ContainerLaunchInfo(),
    )


def spec(*namespaces: dict[str, str], uid: int = 0) -> dict[str, Any]:
    kinds = namespaces or ({"type": "mount"}, {"type": "pid"})
    return {"linux": {"namespaces": list(kinds)}, "process": {"user": {"uid": uid}}}


def test_a_default_executor_without_image_network_or_tty_is_forked(tmp_path: Path) -> None:
    assert zygote.Zygote.eligible(request(tmp_path), spec())
    own = spec({"type": "mount"}, {"type": "pid"}, {"type": "ipc"}, {"type": "uts"})
    assert zygote.Zygote.eligible(request(tmp_path), own)


@pytest.mark.parametrize(
    "why",
    ["command executor", "not as root", "network namespace", "joins a namespace", "tty", "user", "nested"],
)
def test_everything_else_keeps_the_oci_runtime(tmp_path: Path, why: str) -> None:
    forked, namespaces = request(tmp_path), spec()
    if why == "command executor":
        forked = request(tmp_path, [sys.executable, "-m", "mesilla.executor.command"])
    elif why == "not as root":
        forked = request(tmp_path, executor_as_root=False)
    elif why == "network namespace":
        namespaces = spec({"type": "mount"}, {"type": "network"})
    elif why == "joins a namespace":
        namespaces = spec({"type": "network", "path": "/proc/1/ns/net"})
    elif why == "tty":
        forked = request(tmp_path, console_socket=str(tmp_path / "console"))
    elif why == "user":
        namespaces = spec(uid=1000)
    else:
        forked = ForkRequest(
            ContainerID(value="task", parent=ContainerID(value="pod")), forked.argv, forked.config,
            forked.launch_info,
        )
    assert not zygote.Zygote.eligible(forked, namespaces)


def test_an_image_keeps_the_oci_runtime(tmp_path: Path) -> None:
    base = request(tmp_path)
    with_image = ForkRequest(base.container_id, base.argv, base.config, ContainerLaunchInfo(rootfs="/img"))
    assert not zygote.Zygote.eligible(with_image, spec())


def test_the_flag_is_on_by_default_and_turns_off(tmp_path: Path) -> None:
    def flags(*extra: str) -> Any:
        return parse(CONTAINERIZER_FLAGS, [f"--runtime_dir={tmp_path}", *extra], environ={})

    assert flags().fork_default_executors is True
    assert flags("--no-fork_default_executors").fork_default_executors is False
    assert flags("--fork_default_executors=false").fork_default_executors is False
    assert zygote.Zygote.create(flags("--no-fork_default_executors")) is None


def test_a_recorded_identity_names_one_live_process(tmp_path: Path) -> None:
    process._record(str(tmp_path), "pid", os.getpid())
    assert monitor.read_pid(str(tmp_path), "pid") == os.getpid()
    assert monitor.identified(os.getpid(), str(tmp_path), "identity")
    # conmon's cmdline check is not what decides for a monitor with an identity.
    assert monitor.is_monitor(os.getpid(), "any", str(tmp_path))
    (tmp_path / "identity").write_text(f"{os.getpid()} 1\n")  # a reused pid: another start time
    assert not monitor.is_monitor(os.getpid(), "any", str(tmp_path))
    assert not monitor.identified(os.getpid(), str(tmp_path / "none"), "identity")


def test_an_exit_record_reads_back_as_a_wait_status(tmp_path: Path) -> None:
    (tmp_path / "exit").mkdir()
    assert monitor.exit_code(str(tmp_path), "pod") is None
    process.write_atomically(str(tmp_path / "exit" / "pod"), b"%d\n" % (128 + signal.SIGKILL), durable=False)
    code = monitor.exit_code(str(tmp_path), "pod")
    assert code is not None
    status = monitor.wait_status(code)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert os.listdir(tmp_path / "exit") == ["pod"]  # no temporary left


def test_start_lets_the_held_executor_run(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="gone"):
        zygote.start(str(tmp_path))  # no FIFO: the executor never got that far, or died
    os.mkfifo(tmp_path / "start")
    held = os.open(tmp_path / "start", os.O_RDWR | os.O_NONBLOCK)  # as the executor holds it
    try:
        zygote.start(str(tmp_path))
        assert os.read(held, 1) == b"1"
    finally:
        os.close(held)


def test_the_forked_marker_is_what_recovery_reads(tmp_path: Path) -> None:
    assert not zygote.is_forked(str(tmp_path))
    zygote._mark(str(tmp_path))
    assert zygote.is_forked(str(tmp_path))


async def test_a_forked_executor_whose_monitor_died_is_still_signalled_by_its_identity(
    tmp_path: Path,
) -> None:
    orphan = subprocess.Popen(["sleep", "60"])  # the executor, its monitor gone
    try:
        (tmp_path / MONITOR_DIR).mkdir()
        container = _Container(
            id=ContainerID(value="pod"), directory=str(tmp_path), pid=orphan.pid,
            monitor_pid=None, forked=True,
        )  # fmt: skip
        # No identity recorded: not known to be that process, so not signalled.
        assert not _signal_init(container, signal.SIGTERM)
        process._record(str(tmp_path / MONITOR_DIR), "init.pid", orphan.pid)
        assert _signal_init(container, signal.SIGTERM)
        assert orphan.wait(timeout=10) == -signal.SIGTERM
    finally:
        orphan.kill()
        orphan.wait()
