"""Starts a command task in its image rootfs, out of its executor's reach.

The command executor of a task with an image runs on the host's filesystem
(the image need not hold an interpreter, as in Mesos) and starts the task as

    python -I -S task_rootfs.py '<json>' <program> [args...]

where the JSON gives the `rootfs`, the `sandbox` (host path) and the
`sandbox_directory` where the task sees it, the `working_directory`, the
user (`user`, `uid`, `gid`; resolved by the executor against the host's
user database, as Mesos's command executor does) and the task's `bounding`
capability set (a bit mask of kernel capability numbers).

This program unshares a pid namespace and forks the task's first process,
pid 1 there: it takes a mount namespace of its own, pivots into the rootfs
(the old root detached, so no path leads back to the host), mounts a fresh
/proc of the new pid namespace, /sys and a /dev of harmless devices, reopens its standard streams that
are sandbox files at their paths inside, drops what is not in its bounding
set (root's capabilities after exec), becomes the user and execs tini
(bound into the rootfs, as the linux launcher gives containers with a pid
namespace of their own) or, without tini, the command itself. The executor
and this program stay in the outer pid namespace: the task cannot see them,
nor reach the host through their /proc entries, and inherits no descriptor
of theirs but its standard streams.

This program waits for the task and ends as it did: tini's exit code 128+N
is taken as "killed by signal N" (the linux launcher's convention), so the
executor reports signals as Mesos does. Signals sent to the task's process
group reach the task's init directly; one sent before tini could take it is
held here and passed on. It runs outside the package before the Python path
is set up (`-S`): standard library only, and `mesilla/common/syscalls.py` loaded
by its path.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import shutil
import signal
import sys
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mesilla.common import syscalls
else:  # outside the package (see the docstring): the module's file, by its path
    syscalls = SimpleNamespace(**runpy.run_path(f"{os.path.dirname(__file__)}/../common/syscalls.py"))

PR_SET_PDEATHSIG = 1

# As the linux launcher: Debian's static tini, and where containers see it.
INIT = shutil.which("tini-static")
INIT_PATH = "/.mesilla-init"
# Signals the executor sends the task's process group (this program's): for the
# task's init, not for this program.
GROUP_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM,
                 signal.SIGUSR1, signal.SIGUSR2)  # fmt: skip

# The devices of the task's /dev, as OCI runtimes give a container.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

def _mount_point(rootfs: str, path: str, directory: bool = True) -> str:
    target = os.path.join(rootfs, path.lstrip("/"))
    if directory:
        os.makedirs(target, exist_ok=True)
    elif not os.path.lexists(target):
        # The image's rootfs is shared: a task and its checks may create it at once.
        with contextlib.suppress(FileExistsError), open(target, "x"):
            pass
    return target


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _sandbox_streams(sandbox: str) -> dict[int, str]:
    """Standard streams that are files in the sandbox, by their path relative to it."""
    streams = {}
    for fd in (0, 1, 2):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if path.startswith(sandbox.rstrip("/") + "/") and _same_file(f"/proc/self/fd/{fd}", path):
            streams[fd] = os.path.relpath(path, sandbox)
    return streams


def _reopen(streams: dict[int, str], sandbox_directory: str) -> None:
    """Reopens the sandbox's streams through the task's own view of the sandbox,
    so that no descriptor of the task names a host path."""
    for fd, relative in streams.items():
        flags = os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_APPEND
        new = os.open(os.path.join(sandbox_directory, relative), flags)
        os.dup2(new, fd)
        os.close(new)


def _fresh_dev(dev: str) -> None:
    """A /dev of the harmless devices only, whatever the executor's is (the host's
    under the posix launcher); /dev/shm stays the executor's, as its IPC namespace."""
    nosuid_noexec = syscalls.MS_NOSUID | syscalls.MS_NOEXEC
    syscalls.mount("tmpfs", dev, "tmpfs", nosuid_noexec, "mode=755,size=65536k")
    for name in DEVICES:
        syscalls.mount(f"/dev/{name}", _mount_point(dev, name, directory=False), None, syscalls.MS_BIND)
    pts = _mount_point(dev, "pts")
    syscalls.mount("devpts", pts, "devpts", nosuid_noexec, "newinstance,ptmxmode=0666,mode=0620")
    syscalls.mount("/dev/shm", _mount_point(dev, "shm"), None, syscalls.MS_BIND | syscalls.MS_REC)
    for name, target in (("ptmx", "pts/ptmx"), ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, os.path.join(dev, name))


def _pivot(spec: dict[str, Any]) -> None:
    """Makes the rootfs this process's root, in a mount namespace of its own."""
    rootfs, sandbox, inside = spec["rootfs"], spec["sandbox"], spec["sandbox_directory"]
    streams = _sandbox_streams(sandbox)
    syscalls.check(syscalls.libc.unshare(syscalls.CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    # Nothing mounted here may propagate back to the executor's namespace.
    syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
    # pivot_root needs a mount point; binding it onto itself keeps what the
    # linux launcher already mounted inside (sandbox, volumes).
    syscalls.mount(rootfs, rootfs, None, syscalls.MS_BIND | syscalls.MS_REC)
    sandbox_target = _mount_point(rootfs, inside)
    if not _same_file(sandbox, sandbox_target):
        syscalls.mount(sandbox, sandbox_target, None, syscalls.MS_BIND | syscalls.MS_REC)
    _fresh_dev(_mount_point(rootfs, "/dev"))
    if INIT is not None:
        syscalls.mount(INIT, _mount_point(rootfs, INIT_PATH, directory=False), None, syscalls.MS_BIND)
    for path in ("/proc", "/sys"):
        _mount_point(rootfs, path)
    os.chdir(rootfs)
    syscalls.check(syscalls.libc.pivot_root(b".", b"."), f"pivot_root into {rootfs}")
    # The old root is stacked on the new one: detached, no path leads to the host.
    syscalls.check(syscalls.libc.umount2(b".", syscalls.MNT_DETACH), "detaching the host's root")
    os.chdir("/")
    # Fresh: this /proc shows the new pid namespace only.
    harmless = syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC
    syscalls.mount("proc", "/proc", "proc", harmless)
    syscalls.mount("sysfs", "/sys", "sysfs", syscalls.MS_RDONLY | harmless)
    _reopen(streams, inside)
    os.chdir(spec.get("working_directory") or inside)


def _bound_capabilities(spec: dict[str, Any]) -> None:
    if spec.get("bounding") is None:
        return
    syscalls.drop_bounding(int(spec["bounding"]))


def _become(spec: dict[str, Any]) -> None:
    if spec.get("uid") is None:
        return
    uid, gid = int(spec["uid"]), int(spec["gid"])
    # The image's group database, as after Mesos's chroot.
    os.setgroups(os.getgrouplist(spec["user"], gid))
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def _task(spec: dict[str, Any], argv: list[str]) -> None:
    """The task's first process: pid 1 of the new pid namespace. Never returns."""
    try:
        _pivot(spec)
        _bound_capabilities(spec)
        _become(spec)
        # Set after the user change, which clears it: the task dies with this program.
        syscalls.check(syscalls.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        if INIT is not None:
            argv = [INIT_PATH, "-g", "--", *argv]
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"Failed to start the task in its rootfs: {exc}", file=sys.stderr)
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def _end_as(status: int) -> None:
    """Exits as the task did; a signal it died of is raised here again."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
    else:
        code = os.waitstatus_to_exitcode(status)
        number = code - 128 if INIT is not None and code > 128 else 0
        if number not in signal.valid_signals() or number in (signal.SIGSTOP, signal.SIGTSTP):
            sys.exit(code)
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
    sys.exit(128 + number)  # a signal whose default is not to terminate


def _blocks_group_signals(pid: int) -> bool:
    """Whether `pid` blocks the group signals, as tini does from its first instructions."""
    wanted = sum(1 << (number - 1) for number in GROUP_SIGNALS)
    try:
        with open(f"/proc/{pid}/status") as f:
            blocked = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
    except (OSError, StopIteration, ValueError):
        return False
    return blocked & wanted == wanted


def _wait(pid: int, early: list[int]) -> int:
    """Waits for the task's init; a signal sent to the task's group before that
    init could take it (pid 1 drops what it neither handles nor blocks), which
    `early` holds, is passed on once it can."""
    while INIT is not None and not _blocks_group_signals(pid):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.002)
    for number in GROUP_SIGNALS:
        # From now on they reach the task's init directly, as members of our group.
        signal.signal(number, signal.SIG_IGN)
    for received in early:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, received)
    return os.waitpid(pid, 0)[1]


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit("usage: task_rootfs.py '<json>' <program> [args...]")
    spec = json.loads(argv[0])
    syscalls.check(syscalls.libc.unshare(syscalls.CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    early: list[int] = []
    for number in GROUP_SIGNALS:
        signal.signal(number, lambda received, _frame: early.append(received))
    pid = os.fork()
    if pid == 0:
        for number in GROUP_SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        _task(spec, argv[1:])
    _end_as(_wait(pid, early))


if __name__ == "__main__":
    main(sys.argv[1:])
