"""The per-container monitor (the seed's nanny): conmon.

conmon (Debian package `conmon`, ~2 MB RSS, ~1 MB PSS) runs the runtime's
`create` with itself as the parent of the container's init, so the init is
held before exec until `start`; it reaps the init and writes its exit code
atomically (glib's write-temp-then-rename) to `<exit dir>/<runtime id>`, so
the result survives an agent restart. It double-forks and is never the
agent's child: an agent that dies or restarts changes nothing for it.

conmon reports the init's end as an exit code where a signal N reads as
128+N, as shells do; `wait_status` turns that back into a raw wait(2) status
(an init that really calls exit(128+N) is taken as killed by N).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from mesilla.common import procfs
from mesilla.common.fds import read_line, wait_readable
from mesilla.containerizer.launcher.base import LaunchError
from mesilla.containerizer.launcher.runtime import OciRuntime, reap

CONMON = "conmon"


class MonitorError(LaunchError):
    """conmon could not create the container; the message has the runtime's reason."""


@dataclass(frozen=True)
class Monitored:
    monitor_pid: int  # conmon
    pid: int  # the container's init, on the host


def available() -> bool:
    return shutil.which(CONMON) is not None


async def spawn(
    runtime: OciRuntime,
    runtime_id: str,
    bundle: str,
    directory: str,
    stdin: str | None,
    stdout: str,
    stderr: str,
    console_socket: str | None = None,
) -> Monitored:
    """Starts conmon, which creates the container held before exec.

    `directory` receives `pid` (conmon), `init.pid` (the container's first
    process) and the `exit/` directory of the exit code. conmon passes its own
    standard streams through to the container: `stdin` (a pipe of the agent's
    I/O switchboard; /dev/null if None), `stdout` and `stderr`; a container with
    a terminal gets that instead, the runtime sending its master to `console_socket`.
    """
    binary = shutil.which(CONMON)
    if binary is None:
        raise MonitorError("conmon is not installed: apt-get install conmon")
    exit_dir = os.path.join(directory, "exit")
    os.makedirs(exit_dir, exist_ok=True)
    argv = _conmon_argv(binary, runtime, runtime_id, bundle, directory, console_socket)
    read_end, write_end = os.pipe()
    try:
        proc = _start(argv, directory, write_end, stdin, stdout, stderr)
    finally:
        os.close(write_end)
    try:
        # The first conmon exits once its daemon half is forked; the daemon
        # writes {"data": <init pid>} (or a negative value and a message) when
        # the runtime's create returned.
        reply = await read_line(read_end)
        await reap(proc)
    finally:
        os.close(read_end)
    try:
        pid = int(json.loads(reply).get("data", -1))
    except (ValueError, AttributeError):
        pid = -1
    if pid <= 0:
        raise MonitorError(
            f"{runtime.name} could not create container {runtime_id}: {_last_line(stderr)}"
        )
    monitor_pid = read_pid(directory, "pid")
    if monitor_pid is None:
        raise MonitorError(f"conmon wrote no pid file for container {runtime_id} in {directory}")
    return Monitored(monitor_pid, pid)


def _conmon_argv(
    binary: str,
    runtime: OciRuntime,
    runtime_id: str,
    bundle: str,
    directory: str,
    console_socket: str | None,
) -> list[str]:
    argv = [
        binary,
        "--api-version", "1",
        "--cid", runtime_id,
        "--cuuid", runtime_id,
        "--name", runtime_id,
        "--runtime", runtime.binary,
        "--runtime-arg", "--root",
        "--runtime-arg", runtime.root,
        "--bundle", bundle,
        "--container-pidfile", os.path.join(directory, "init.pid"),
        "--conmon-pidfile", os.path.join(directory, "pid"),
        "--exit-dir", os.path.join(directory, "exit"),
        # The container writes to our files itself; conmon copies nothing.
        "--log-path", "passthrough:",
        "--log-level", "error",
        # Not a sync(2) of the whole host at every exit: the files are the container's.
        "--no-sync-log",
    ]
    if console_socket is not None:
        # Not conmon's own --terminal: that one keeps the master and logs what it reads.
        argv += ["--runtime-opt", "--console-socket", "--runtime-opt", console_socket]
    return argv


def _start(
    argv: list[str], directory: str, sync: int, stdin: str | None, stdout: str, stderr: str
) -> subprocess.Popen[bytes]:
    """conmon, started directly rather than through asyncio's subprocess machinery (a
    transport and a child watcher's thread: ~2 ms more a launch); vfork'd, it returns
    once conmon has exec'd."""
    streams: list[int] = []
    try:
        streams.append(_open_stream(stdin, os.O_RDONLY))
        for path in (stdout, stderr):
            streams.append(_open_stream(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND))
        return subprocess.Popen(
            argv,
            stdin=streams[0],
            stdout=streams[1],
            stderr=streams[2],
            cwd=directory,
            pass_fds=(sync,),
            env={**os.environ, "_OCI_SYNCPIPE": str(sync)},
            start_new_session=True,
        )
    finally:
        for fd in streams:
            os.close(fd)


def _open_stream(path: str | None, flags: int) -> int:
    """A standard stream for the container: a file, or a pipe whose other end the
    switchboard holds, opened without blocking and then made blocking for the container."""
    if path is None:
        return os.open(os.devnull, os.O_RDONLY)
    fd = os.open(path, flags | os.O_NONBLOCK, 0o644)
    os.set_blocking(fd, True)
    return fd


def _last_line(path: str) -> str:
    """The runtime's reason, which it (through conmon) wrote to the container's stderr."""
    lines = []
    # Only a file can be read back; a session's pipe or terminal carried it to the client.
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.stat(path).st_mode):
            with open(path, errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else f"no reason given (see {path})"


def read_pid(directory: str, name: str) -> int | None:
    try:
        with open(os.path.join(directory, name)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def exit_code(directory: str, runtime_id: str) -> int | None:
    """The exit code conmon wrote, None while the container runs."""
    try:
        with open(os.path.join(directory, "exit", runtime_id)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def wait_status(code: int) -> int:
    """A raw wait(2) status from conmon's exit code (128+N: killed by signal N)."""
    number = code - 128
    if 0 < number < signal.NSIG:
        return number
    return (code & 0xFF) << 8


def is_monitor(pid: int, runtime_id: str, directory: str | None = None) -> bool:
    """Whether `pid` is still conmon for this container (pids get reused), or the
    zygote's monitor whose identity is in `directory` (its cmdline is the zygote's)."""
    if directory is not None and os.path.exists(os.path.join(directory, "identity")):
        return identified(pid, directory, "identity")
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    process = procfs.stat(pid)
    return (
        process is not None
        and process.state != "Z"
        and os.path.basename(argv[0]) == CONMON.encode()
        and (runtime_id.encode() in argv)
    )


def identified(pid: int, directory: str, name: str) -> bool:
    """Whether `pid` is the live process whose "<pid> <start time>" is in `directory/name`."""
    try:
        with open(os.path.join(directory, name)) as f:
            recorded = f.read().split()
    except OSError:
        return False
    return recorded == [str(pid), str(procfs.start_time(pid))]


async def wait_exit(pid: int, identity: Callable[[int], bool] | None = None) -> bool:
    """Resolves when process `pid` is gone; not our child, so a pidfd, not waitpid.
    True once it has been followed to its end; False when there was no such process.

    `identity` confirms, once the pidfd pins the process, that `pid` was not reused.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if identity is not None and not identity(pid):
            return False
        await wait_readable(fd)
        return True
    finally:
        os.close(fd)
