"""The posix launcher: a container is a plain process in its own session.

As Mesos's `SubprocessLauncher`, for hosts without root: no namespaces, no
image, only environment, working directory, user and rlimits. Each container
gets a small supervisor (`posix_nanny.py`) that forks the first process held
before exec, reaps it and checkpoints its raw wait status, so that a restarted
agent learns how a container ended while it was down. The launcher watches the
supervisor through a pidfd, which works whether or not the supervisor is its
child (a recovered one is not).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field

from mesilla.common.fds import read_all
from mesilla.containerizer import console
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolators.posix.procfs import session_processes
from mesilla.containerizer.launcher.base import Launcher, LaunchError, wait_exited
from mesilla.containerizer.runtime_paths import (
    PID_FILE,
    STATUS_FILE,
    RuntimeDir,
    read_int,
)
from mesilla.containerizer.types import (
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerRuntimeState,
    ForkRequest,
)
from mesilla.v1.mesos import ContainerID

NANNY_SCRIPT = os.path.join(os.path.dirname(__file__), "posix_nanny.py")
NANNY_PID_FILE = "nanny.pid"  # written by the nanny itself


@dataclass
class _Container:
    pid: int
    nanny_pid: int
    gate: int | None  # write end of the start gate; None once started or recovered
    exited: asyncio.Future[int | None] = field(default_factory=asyncio.Future)


def _rlimit_spec(rlimits: list[tuple[str, int | None, int | None]]) -> str:
    """`NOFILE:1024:4096,CORE:inf:inf` from Mesos RLimit types (`RLMT_NOFILE`)."""
    items = []
    for name, soft, hard in rlimits:
        short = name.removeprefix("RLMT_").removeprefix("RLIMIT_")
        items.append(f"{short}:{'inf' if soft is None else soft}:{'inf' if hard is None else hard}")
    return ",".join(items) or "-"


def _is_nanny_of(nanny_pid: int, status_path: str) -> bool:
    """Guards against pid reuse: the process must be the nanny writing that status."""
    try:
        with open(f"/proc/{nanny_pid}/cmdline", "rb") as f:
            return status_path.encode() in f.read().split(b"\0")
    except OSError:
        return False


class PosixLauncher(Launcher):
    name = "posix"

    def __init__(self, flags: ContainerizerFlags) -> None:
        self._runtime = RuntimeDir(flags.runtime_dir)
        self._containers: dict[ContainerID, _Container] = {}

    async def recover(self, states: list[ContainerRuntimeState]) -> set[ContainerID]:
        known = {state.container_id for state in states}
        orphans: set[ContainerID] = set()
        for container_id in self._runtime.containers():
            pid = self._runtime.read_pid(container_id)
            nanny_pid = read_int(self._runtime.path(container_id, NANNY_PID_FILE))
            if pid is None or nanny_pid is None or container_id in self._containers:
                continue
            container = _Container(pid=pid, nanny_pid=nanny_pid, gate=None)
            self._containers[container_id] = container
            status_path = self._runtime.path(container_id, STATUS_FILE)
            if _is_nanny_of(nanny_pid, status_path):
                self._watch(container_id, container)
            else:
                container.exited.set_result(self._runtime.read_status(container_id))
            if container_id not in known and not container.exited.done():
                orphans.add(container_id)
        return orphans

    async def fork(self, request: ForkRequest) -> int:
        container_id, argv = request.container_id, request.argv
        config, launch_info = request.config, request.launch_info
        if container_id in self._containers:
            raise LaunchError(f"Container {container_id} has already been forked")
        if launch_info.rootfs or launch_info.clone_namespaces or launch_info.enter_namespaces:
            raise LaunchError(
                f"Container {container_id} needs a rootfs or namespaces, which the posix "
                "launcher cannot provide: use --launcher=linux (as root)"
            )
        directory = self._runtime.path(container_id)
        os.makedirs(directory, exist_ok=True)
        stdout = config.stdout or os.path.join(config.sandbox, "stdout")
        stderr = config.stderr or os.path.join(config.sandbox, "stderr")
        terminal, terminal_path = None, None
        if config.console_socket is not None:
            terminal, terminal_path = _allocate_terminal(config)
        env = {**config.environment, **launch_info.environment}
        nanny_argv = _nanny_argv(
            directory, argv, config, launch_info, (stdout, stderr), terminal_path, "LC_CTYPE" in env
        )
        gate_r, gate_w = os.pipe()
        report_r, report_w = os.pipe()
        try:
            # Returns once the nanny exists: it waits for nothing the nanny does.
            nanny_pid = os.posix_spawn(  # noqa: ASYNC221
                sys.executable,
                nanny_argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, gate_r, 0),
                    (os.POSIX_SPAWN_DUP2, report_w, 1),
                    (os.POSIX_SPAWN_OPEN, 2, stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
                ],
                setsid=True,
            )
        except OSError as exc:
            os.close(gate_w)
            if terminal is not None:
                os.close(terminal)
            raise LaunchError(f"Failed to start the supervisor of {container_id}: {exc}") from exc
        finally:
            os.close(gate_r)
            os.close(report_w)
        container = _Container(pid=0, nanny_pid=nanny_pid, gate=gate_w)
        if terminal is not None:
            # Our end of the terminal's slave, held until the container ends: the
            # master would read end-of-file before the container opened it.
            container.exited.add_done_callback(lambda _: os.close(terminal))
        self._containers[container_id] = container
        self._watch(container_id, container)
        try:
            line = await read_all(report_r)
        finally:
            os.close(report_r)
        if not line.strip().isdigit():
            await self.destroy(container_id)
            raise LaunchError(
                f"The supervisor of {container_id} failed before forking (see {stderr})"
            )
        container.pid = int(line)
        return container.pid

    async def start(self, container_id: ContainerID) -> None:
        container = self._containers.get(container_id)
        if container is None or container.gate is None:
            raise LaunchError(f"Container {container_id} is not waiting to start")
        try:
            os.write(container.gate, b"1")
        except BrokenPipeError:
            raise LaunchError(f"Container {container_id} ended before it could start") from None
        finally:
            os.close(container.gate)
            container.gate = None

    async def wait(self, container_id: ContainerID) -> int | None:
        return await wait_exited(self._containers.get(container_id))

    async def kill(self, container_id: ContainerID, sig: int) -> None:
        container = self._containers.get(container_id)
        if container is None or container.pid <= 0 or container.exited.done():
            return
        try:
            os.killpg(container.pid, sig)
        except ProcessLookupError:
            pass

    async def destroy(self, container_id: ContainerID) -> None:
        container = self._containers.get(container_id)
        if container is None:
            return
        if container.gate is not None:
            os.close(container.gate)  # a held process then exits without exec
            container.gate = None
        if container.pid > 0:
            _kill_session(container.pid)
        await asyncio.shield(container.exited)
        if container.pid > 0:
            _kill_session(container.pid)  # stragglers forked while we killed
        self._containers.pop(container_id, None)

    def pid(self, container_id: ContainerID) -> int | None:
        container = self._containers.get(container_id)
        return container.pid if container is not None and container.pid > 0 else None

    def _watch(self, container_id: ContainerID, container: _Container) -> None:
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(container.nanny_pid)
        except ProcessLookupError:
            container.exited.set_result(self._runtime.read_status(container_id))
            return

        def on_exit() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            try:  # reap it if it is our child; a recovered one is not
                os.waitpid(container.nanny_pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not container.exited.done():
                container.exited.set_result(self._runtime.read_status(container_id))

        # A callback rather than a task in wait_readable: no task per container to own.
        loop.add_reader(pidfd, on_exit)


def _nanny_argv(
    directory: str,
    argv: list[str],
    config: ContainerConfig,
    launch_info: ContainerLaunchInfo,
    output: tuple[str, str],
    terminal_path: str | None,
    keep_lc_ctype: bool,
) -> list[str]:
    """posix_nanny.py's command line (its docstring lists the arguments)."""
    user = launch_info.user or config.user
    if user is not None and os.geteuid() != 0:
        user = None  # only root can switch users; run as ourselves, as Mesos does
    stdout, stderr = output
    return [
        sys.executable, "-s", "-S", NANNY_SCRIPT,
        os.path.join(directory, STATUS_FILE),
        os.path.join(directory, PID_FILE),
        terminal_path or config.stdin or "-",
        terminal_path or stdout,
        terminal_path or stderr,
        launch_info.working_directory or config.sandbox,
        user or "-",
        _rlimit_spec(launch_info.rlimits),
        "1" if keep_lc_ctype else "0",
        "--",
        *argv,
    ]  # fmt: skip


def _kill_session(leader: int) -> None:
    """SIGKILLs the process group and every process of the session (subgroups too)."""
    try:
        os.killpg(leader, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for process in session_processes(leader):
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _allocate_terminal(config: ContainerConfig) -> tuple[int, str]:
    """A pseudo-terminal for the container: its master goes to the console socket;
    returns our descriptor of the slave and the slave's path, the container's stdio."""
    assert config.console_socket is not None
    master, slave = os.openpty()
    try:
        tty_info = config.container_info.tty_info if config.container_info else None
        console.set_window_size(master, tty_info.window_size if tty_info else None)
        path = os.ttyname(slave)
        console.send(config.console_socket, master, path)
    except OSError as exc:
        os.close(slave)
        raise LaunchError(f"Failed to hand over the container's terminal: {exc}") from exc
    finally:
        os.close(master)
    return slave, path
