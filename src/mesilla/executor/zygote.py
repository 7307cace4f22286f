"""The executor zygote: one pre-imported process per agent that forks default executors.

A default executor started as `python -m mesilla.executor.default` in an OCI
container spends ~140 ms importing and ~80 ms in runc. The agent's linux
launcher instead starts this process once (`python -m mesilla.executor.zygote
FD`, its own session), which imports the default executor, freezes its objects
out of the collector (`gc.freeze`, so forked children share the pages
copy-on-write) and waits on the SOCK_SEQPACKET socket FD for requests: JSON
(see `containerizer/launcher/zygote.request`) with one file descriptor, the
pipe the answer goes to. For each it forks a monitor, which plays conmon's part
and writes conmon's files in the container's `monitor/` directory:

    pid        the monitor's pid       identity   "<pid> <start time>" of the monitor
    init.pid   the executor's host pid init.identity  the same for the executor
    exit/<rid> its exit code (128+N for signal N), written atomically
    start      a FIFO: the executor runs once a byte is written to it

The monitor unshares a pid namespace and forks the executor, pid 1 there,
which joins the container's cgroups in every v1 hierarchy (the devices one
narrowed to runc's default devices), unshares mount, UTS and IPC namespaces,
builds the container's filesystem from the OCI mounts and pivots into it, sets
the rlimits, reports, waits for `start`, then takes the capabilities and runs
the executor's `main` in place. The monitor reaps it and records how it ended.
The zygote exits when the agent's end of the socket closes; monitors outlive it.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import signal
import socket
import sys
from typing import Any

from mesilla.common import procfs, syscalls
from mesilla.common.files import write_atomically
from mesilla.common.syscalls import (
    CLONE_NEWIPC,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUTS,
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    MS_SLAVE,
    MS_STRICTATIME,
    SYS_PIVOT_ROOT,
    check,
    libc,
    mount,
)

_FLAGS = {
    "ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
    "strictatime": MS_STRICTATIME, "bind": MS_BIND, "rbind": MS_BIND | MS_REC,
}  # fmt: skip
_IGNORED = {"rw", "private", "rprivate", "slave", "rslave", "shared", "rshared"}
# runc's default devices: created in /dev, and all the devices cgroup allows
# (besides mknod of any, ptmx, pts and tun, as runc's list, which nested
# containers' runc writes below ours: a child cannot allow what we deny).
DEVICES = {
    "null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9),
    "tty": (5, 0),
}  # fmt: skip
DEVICE_RULES = [
    "c *:* m", "b *:* m", *(f"c {major}:{minor} rwm" for major, minor in DEVICES.values()),
    "c 5:2 rwm", "c 136:* rwm", "c 10:200 rwm",
]  # fmt: skip
_LINKS = {
    "ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
}  # fmt: skip


def _record(directory: str, name: str, pid: int) -> None:
    # conmon's files are not fsynced either: they live under --runtime_dir.
    write_atomically(os.path.join(directory, name), b"%d\n" % pid, durable=False)
    identity = f"{pid} {procfs.start_time(pid)}\n".encode()
    write_atomically(os.path.join(directory, name.replace("pid", "identity")), identity, durable=False)


# --- the zygote ---------------------------------------------------------------------


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))
    for module in ("mesilla.executor.default",):
        importlib.import_module(module)
    gc.freeze()
    # Monitors are reaped by the kernel; each resets this for its own child.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        message, fds, _flags, _address = socket.recv_fds(channel, 1 << 20, 1)
        if not message:
            return  # the agent is gone
        if os.fork() == 0:
            channel.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            code = 1
            try:
                code = monitor(json.loads(message), fds[0])
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)


def monitor(request: dict[str, Any], reply: int) -> int:
    """The per-executor monitor: forks the executor, answers, reaps it, records its end."""
    os.setsid()
    directory = request["monitor_dir"]
    _record(directory, "pid", os.getpid())
    gate = os.path.join(directory, "start")
    if not os.path.exists(gate):
        os.mkfifo(gate, 0o600)
    ready_r, ready_w = os.pipe()
    check(libc.unshare(CLONE_NEWPID), "unsharing a pid namespace")
    child = os.fork()
    if child == 0:
        os.close(ready_r)
        os.close(reply)
        _executor(request, ready_w)  # never returns
    os.close(ready_w)
    _record(directory, "init.pid", child)
    with os.fdopen(ready_r, "rb") as ready:
        failure = ready.read().decode(errors="replace")
    answer = {"error": failure} if failure else {"pid": child, "monitor_pid": os.getpid()}
    try:
        os.write(reply, json.dumps(answer).encode() + b"\n")
    except OSError:
        pass  # the agent died: its recovery finds this container through our files
    os.close(reply)
    _pid, status = os.waitpid(child, 0)
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    os.makedirs(os.path.join(directory, "exit"), exist_ok=True)
    write_atomically(os.path.join(directory, "exit", request["rid"]), b"%d\n" % code, durable=False)
    return 0


# --- the executor (pid 1 of its pid namespace) --------------------------------------


def _executor(request: dict[str, Any], ready: int) -> None:
    code = 127
    try:
        streams = _prepare(request)
    except BaseException as exc:
        os.write(ready, f"{type(exc).__name__}: {exc}".encode() or b"failed")
        os._exit(code)
    os.close(ready)
    try:
        gate = streams.pop()
        os.read(gate, 1)  # held until the agent's `start`
        os.close(gate)
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
            os.close(fd)
        masks = request["capabilities"]
        syscalls.drop_bounding(masks["bounding"])
        syscalls.set_capabilities(masks["effective"], masks["permitted"], masks["inheritable"])
        code = _run(request)
    finally:
        os._exit(code)


def _prepare(request: dict[str, Any]) -> list[int]:
    """Everything before `start`; returns stdin, stdout, stderr and the gate's fd."""
    for hierarchy, path in request["cgroups"]:
        _join_cgroup(hierarchy, path)
    kinds = {"mount": CLONE_NEWNS, "uts": CLONE_NEWUTS, "ipc": CLONE_NEWIPC}
    flags = sum(flag for kind, flag in kinds.items() if kind in request["namespaces"])
    check(libc.unshare(flags), "unsharing namespaces")
    if request["hostname"] is not None:
        socket.sethostname(request["hostname"])
    # Opened on the host, before the pivot hides their paths.
    streams = [os.open(request["stdin"] or os.devnull, os.O_RDONLY)]
    for name in ("stdout", "stderr"):
        streams.append(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    streams.append(os.open(os.path.join(request["monitor_dir"], "start"), os.O_RDWR))
    _filesystem(request["rootfs"], request["mounts"], request["readonly_rootfs"])
    for limit in request["rlimits"]:
        kind = getattr(resource, limit["type"])
        resource.setrlimit(kind, (_rlimit(limit["soft"]), _rlimit(limit["hard"])))
    return streams


def _rlimit(value: int) -> int:
    return resource.RLIM_INFINITY if value >= (1 << 64) - 1 else value


def _inherit_if_empty(parent: str, current: str, name: str) -> None:
    try:
        with open(os.path.join(current, name)) as f:
            if f.read().strip():
                return
    except FileNotFoundError:  # not the cpuset hierarchy
        return
    with open(os.path.join(parent, name)) as f:
        value = f.read().strip()
    if value:
        with open(os.path.join(current, name), "w") as f:
            f.write(value)


def _join_cgroup(hierarchy: str, path: str) -> None:
    """Creates (as runc does) and joins `path` in one v1 hierarchy."""
    current = hierarchy
    for part in path.strip("/").split("/"):
        parent, current = current, os.path.join(current, part)
        if not os.path.isdir(current):
            try:
                os.mkdir(current)
            except FileExistsError:  # made meanwhile by another launch (runc's, or a fork)
                pass
        # A new cpuset has no cpus nor memory nodes: nothing could join it. Also one
        # that another launch made and has not filled yet.
        for name in ("cpuset.cpus", "cpuset.mems"):
            _inherit_if_empty(parent, current, name)
    if os.path.exists(os.path.join(current, "devices.deny")):
        with open(os.path.join(current, "devices.deny"), "w") as f:
            f.write("a")
        for rule in DEVICE_RULES:
            with open(os.path.join(current, "devices.allow"), "w") as f:
                f.write(rule)
    with open(os.path.join(current, "cgroup.procs"), "w") as f:
        f.write("0")


def _filesystem(rootfs: str, mounts: list[dict[str, Any]], readonly: bool) -> None:
    """The OCI mounts into `rootfs` (a bind of itself), /dev's nodes, then pivot_root;
    the new root read-only at the end when `readonly`, as runc's `root.readonly`."""
    mount(None, "/", None, MS_REC | MS_SLAVE)
    mount(rootfs, rootfs, None, MS_BIND | MS_REC)
    for spec in mounts:
        _mount_one(rootfs, spec)
    dev = os.path.join(rootfs, "dev")
    for name, (major, minor) in DEVICES.items():
        os.mknod(os.path.join(dev, name), 0o666 | 0o020000, os.makedev(major, minor))
        os.chmod(os.path.join(dev, name), 0o666)
    for name, target in _LINKS.items():
        os.symlink(target, os.path.join(dev, name))
    os.chdir(rootfs)
    check(libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    check(libc.umount2(b".", MNT_DETACH), "unmounting the host's root")
    os.chdir("/")
    if readonly:
        # The shared host view (the launcher's HOST_ROOTFS_DIR): nothing written at its top.
        mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def _mount_one(rootfs: str, spec: dict[str, Any]) -> None:
    target = os.path.join(rootfs, spec["destination"].lstrip("/"))
    source, kind = spec.get("source"), spec.get("type")
    flags, data = 0, []
    for option in spec.get("options", []):
        if option in _FLAGS:
            flags |= _FLAGS[option]
        elif option not in _IGNORED:
            data.append(option)
    bind = bool(flags & MS_BIND) or kind == "bind"
    if bind:
        flags |= MS_BIND
        assert source is not None
        if os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
        elif not os.path.exists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
    else:
        os.makedirs(target, exist_ok=True)
    try:
        mount(source, target, None if bind else kind, flags & ~MS_RDONLY if bind else flags, ",".join(data))
    except PermissionError:
        if kind != "sysfs":
            raise
        # sysfs needs a network namespace of our own; runc binds the host's then.
        mount("/sys", target, None, MS_BIND | MS_REC)
        bind, flags = True, flags | MS_BIND
    if bind:
        mount(None, target, None, MS_REC | MS_PRIVATE)
        if flags & MS_RDONLY:
            mount(None, target, None, MS_REMOUNT | MS_BIND | (flags & ~MS_REC))


def _run(request: dict[str, Any]) -> int:
    """The executor's `main`, in this process, as `python -m <module> ...` would run it."""
    argv = request["argv"]
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [argv[0], *argv[3:]]
    for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as any Python process
    try:
        importlib.import_module(argv[2]).main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


if __name__ == "__main__":
    main()
