"""The OCI runtime (runc or crun) as the linux launcher drives it.

Every call passes `--root <runtime_dir>/<name>` so the runtime's state of our
containers lives beside our checkpoints, and `list` returns only ours.

`find_runtime` picks `--oci_runtime` or the first of crun, runc that really
runs a container here (crun refuses a cgroup v1 hybrid host, for example):
a binary that exists is not enough. The probe runs once per process and
binary, and once per boot where the caller names a directory to remember it in
(the agent's runtime directory): a restarted agent, which must re-register
within moments, does not run a container first to learn what it knew.

Two commands are done without a runtime process where runc's own files say
exactly what it would do: `start` (its exec FIFO) and `delete` of a stopped
container (its `state.json`: remove its cgroups and state directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

import msgspec

from mesilla.common import files, procfs
from mesilla.common.errors import ConfigurationError
from mesilla.common.fds import wait_readable
from mesilla.containerizer.cgroups import CgroupsError, remove_directories
from mesilla.containerizer.launcher.base import LaunchError

CANDIDATES = ("crun", "runc")
# runc's handshake between `create` and `start`: the created init blocks opening
# this FIFO (in the container's state directory) for writing; `runc start` opens
# it for reading, takes the byte init writes just before it execs, and removes it
# (runc tells a created container from a running one by the FIFO being there).
EXEC_FIFO = "exec.fifo"
# runc's record of a container (its config, init pid and start time, cgroups).
STATE_FILE = "state.json"

log = logging.getLogger(__name__)

_probed: dict[str, tuple[str | None, str]] = {}


class OciRuntimeError(LaunchError):
    """The OCI runtime refused a command; the message has its own words."""


@dataclass(frozen=True)
class OciRuntime:
    binary: str  # absolute path
    root: str  # the runtime's state directory (`--root`)

    @property
    def name(self) -> str:
        return os.path.basename(self.binary)

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", self.root, *args]

    async def run(self, *args: str, check: bool = True) -> tuple[int, str]:
        """Runs one runtime command; returns its exit code and stdout."""
        code, out, err = await communicate(self.argv(*args))
        if check and code != 0:
            raise OciRuntimeError(
                f"'{self.name} {' '.join(args)}' failed with exit code {code}: "
                f"{err.decode(errors='replace').strip()}"
            )
        return code, out.decode()

    async def start(self, runtime_id: str, pid: int | None = None) -> None:
        """Lets the created container's init exec. With runc and the init's `pid`, does
        what `runc start` does (EXEC_FIFO) without a runc process: ~13 ms of each launch,
        and a Go start-up's CPU. Anything unexpected is left to `runc start` to report."""
        if self.name != "runc" or pid is None:
            await self.run("start", runtime_id)
            return
        fifo = os.path.join(self.root, runtime_id, EXEC_FIFO)
        try:
            # Not blocking: a blocking open would wait for an init that may be dead.
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            await self.run("start", runtime_id)
            return
        try:
            started = await _take_exec_byte(fd, pid)
        finally:
            os.close(fd)
        if not started:
            raise OciRuntimeError(
                f"'{self.name} start {runtime_id}' failed: container process is already dead"
            )
        files.remove_file(self.root, fifo)

    async def kill(self, runtime_id: str, signal: int, *, all_processes: bool = False) -> bool:
        """Signals the container; False when it has no process left to signal."""
        args = ["kill", *(["--all"] if all_processes else []), runtime_id, str(signal)]
        code, _ = await self.run(*args, check=False)
        return code == 0

    def knows(self, runtime_id: str) -> bool:
        """Whether the runtime has state for the container (runc and crun keep a directory)."""
        return os.path.isdir(os.path.join(self.root, runtime_id))

    def config_copy(self, runtime_id: str) -> str:
        """Where the runtime keeps its own copy of a container's config (crun does)."""
        return os.path.join(self.root, runtime_id, "config.json")

    async def delete(self, runtime_id: str, cgroups_root: str | None = None) -> None:
        """Removes the runtime's container (killing what is left); absent is fine.

        A runc container that runc would find stopped, and whose cgroups all lie
        within `cgroups_root`, is removed here as `runc delete` does it (its
        cgroups, then its state directory; see `_stopped_cgroups`): a runc
        process less per teardown (~12 ms of CPU, a Go start-up). Anything else,
        or a removal that fails, is left to `delete --force`."""
        if not self.knows(runtime_id):
            return
        if cgroups_root is None or not await self._delete_stopped(runtime_id, cgroups_root):
            await self.run("delete", "--force", runtime_id)

    async def _delete_stopped(self, runtime_id: str, cgroups_root: str) -> bool:
        """`runc delete` of a stopped container, done here; False where runc must do it."""
        cgroups = self._stopped_cgroups(runtime_id, cgroups_root)
        if cgroups is None:
            return False
        try:
            await remove_directories(cgroups_root, cgroups)
            directory = os.path.join(self.root, runtime_id)
            for name in os.listdir(directory):
                files.remove_file(self.root, os.path.join(directory, name))
            files.remove_dir(self.root, directory)
        except (CgroupsError, OSError, files.OutsideRoot) as exc:
            log.warning("Removing stopped container %s without runc failed (%s): "
                        "runc deletes it", runtime_id, exc)  # fmt: skip
            return False
        return True

    def _stopped_cgroups(self, runtime_id: str, cgroups_root: str) -> list[str] | None:
        """The cgroup directories of a runc container whose removal is all `runc delete`
        does to it, else None: its init is gone as runc tells it (no such pid, another
        process's start time, a zombie) and it had a pid namespace of its own, so none
        of its processes is left (runc signals nothing then either); no hooks to run,
        nothing rootless, systemd-managed or Intel RDT; its state directory holds only
        what runc writes (STATE_FILE, EXEC_FIFO when never started); every cgroup
        inside `cgroups_root`."""
        if self.name != "runc":
            return None
        directory = os.path.join(self.root, runtime_id)
        try:
            if not set(os.listdir(directory)) <= {STATE_FILE, EXEC_FIFO}:
                return None
            with open(os.path.join(directory, STATE_FILE), "rb") as f:
                state = _STATE.decode(f.read())
            config = state.config
            paths = list(state.cgroup_paths.values())
            if (
                state.rootless or state.intel_rdt_path
                or config.cgroups.Systemd or config.cgroups.Rootless
                or any((config.Hooks or {}).values())
                or [n.path for n in config.namespaces if n.type == "NEWPID"] != [""]
                or not all(_strictly_inside(cgroups_root, p) for p in paths)
                or _runs(state.init_process_pid, state.init_process_start)
            ):  # fmt: skip
                return None
        except (OSError, ValueError):  # msgspec's errors too
            return None
        return sorted(set(paths))

    async def state(self, runtime_id: str) -> dict[str, Any] | None:
        """The runtime's state of the container (`status`, `pid`, ...), None if unknown."""
        code, out = await self.run("state", runtime_id, check=False)
        return json.loads(out) if code == 0 else None

    def ids(self) -> list[str]:
        """The ids of the containers the runtime has state for, read from its state
        directory (one directory per container, as `knows` reads it): `runc list` loads
        and checks every container's state first, 0.6-1.1 s of a restarted agent's
        recovery at a thousand containers."""
        try:
            with os.scandir(self.root) as entries:
                return [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return []


class _Namespace(msgspec.Struct):
    type: str
    path: str = ""


class _CgroupsConfig(msgspec.Struct):
    Systemd: bool = False
    Rootless: bool = False


class _Config(msgspec.Struct):
    namespaces: list[_Namespace]
    cgroups: _CgroupsConfig
    Hooks: dict[str, Any] | None = None


class _State(msgspec.Struct):
    """What `_stopped_cgroups` reads of runc's STATE_FILE; the rest (most of it, the
    whole config) is skipped unparsed: ~0.06 ms where json.loads took ~0.3-1 ms."""

    init_process_pid: int
    init_process_start: int
    cgroup_paths: dict[str, str]
    config: _Config
    rootless: bool = False
    intel_rdt_path: str = ""


_STATE = msgspec.json.Decoder(_State)


def _strictly_inside(root: str, path: str) -> bool:
    """Lexically, and cheaply: the removal checks again, links resolved (`files`)."""
    return os.path.normpath(path).startswith(root.rstrip("/") + "/")


def _runs(pid: int, start_time: int) -> bool:
    """Whether `pid` is still the process that started at `start_time` and not a
    zombie: runc's test of a container's init."""
    return procfs.start_time(pid) == start_time


async def communicate(argv: list[str]) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, stderr) of `argv`, as asyncio's `communicate`, but started
    with a vfork'd Popen, its pipes read from the loop and its end seen through a
    pidfd: no transport and child-watcher thread for each of a teardown's calls."""
    # Returns once the child has exec'd (vfork), as asyncio's own start does.
    proc = subprocess.Popen(  # noqa: ASYNC220
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    loop = asyncio.get_running_loop()
    received = {f.fileno(): bytearray() for f in (proc.stdout, proc.stderr)}
    reading = set(received)
    ended: asyncio.Future[None] = loop.create_future()

    def drain(fd: int) -> None:
        data = os.read(fd, 65536)
        received[fd] += data
        if not data:
            loop.remove_reader(fd)
            reading.discard(fd)
            if not reading and not ended.done():
                ended.set_result(None)

    for fd in received:
        os.set_blocking(fd, False)
        loop.add_reader(fd, drain, fd)
    try:
        await ended
    finally:
        for fd in reading:
            loop.remove_reader(fd)
        proc.stdout.close()
        proc.stderr.close()
    code = await reap(proc)
    out, err = received.values()
    return code, bytes(out), bytes(err)


async def reap(proc: subprocess.Popen[bytes]) -> int:
    """Waits for our child `proc` to end, through a pidfd, and reaps it; its exit code."""
    with contextlib.suppress(ProcessLookupError):  # reaped already by a waitpid(-1) elsewhere
        fd = os.pidfd_open(proc.pid)
        try:
            await wait_readable(fd)
        finally:
            os.close(fd)
    return proc.wait()


async def _take_exec_byte(fifo: int, pid: int) -> bool:
    """Reads the exec FIFO to its end, as `runc start` does: our open lets init's
    open return; it writes one byte and execs, which closes its end. False when
    init ended without writing (it was killed, or was never there)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:  # gone: no writer left, whatever it wrote is there
        try:
            return os.read(fifo, 64) != b""
        except BlockingIOError:
            return False
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    for fd in (fifo, pidfd):
        loop.add_reader(fd, woken.set)
    received = b""
    try:
        while True:
            # Readiness first: before init's open has returned, a read would see
            # no writer and end at once; poll reports the end only after a writer.
            await woken.wait()
            woken.clear()
            try:
                chunk = os.read(fifo, 64)
            except BlockingIOError:  # written nothing yet, its end still open
                continue
            if not chunk:
                return received != b""
            received += chunk
    finally:
        for fd in (fifo, pidfd):
            loop.remove_reader(fd)
        os.close(pidfd)


class NoOciRuntime(LaunchError, ConfigurationError):
    """No OCI runtime runs a container on this host; the message says why for each tried."""


def find_runtime(wanted: str | None, record_dir: str | None = None) -> str:
    """The absolute path of `wanted` (else of the first of CANDIDATES) if it runs a
    container here; raises NoOciRuntime with each candidate's reason otherwise.
    A probe that succeeded is recorded in `record_dir`, if given, for this boot."""
    reasons = []
    for name in [wanted] if wanted else CANDIDATES:
        binary, reason = _probe(name, record_dir)
        if binary is not None:
            return binary
        reasons.append(f"{name}: {reason}")
    flag = f"--oci_runtime={wanted}" if wanted else "--oci_runtime"
    raise NoOciRuntime(
        f"No OCI runtime runs a container on this host ({'; '.join(reasons)}): install runc "
        f"or crun, fix {flag}, or use --launcher=posix"
    )


def _probe(name: str, record_dir: str | None) -> tuple[str | None, str]:
    """(absolute path, '') if `name` runs a trivial container here, else (None, why not)."""
    if name not in _probed:
        binary = shutil.which(name)
        if binary is None:
            _probed[name] = (None, "not installed")
        elif os.geteuid() != 0:
            _probed[name] = (None, "the linux launcher needs root")
        else:
            record = os.path.join(record_dir, f"probed-{name}.json") if record_dir else None
            identity = _probe_identity(binary)
            if record is not None and identity is not None and _read_record(record) == identity:
                _probed[name] = (binary, "")
            else:
                reason = _run_probe_container(binary)
                _probed[name] = (binary if not reason else None, reason)
                if not reason and record is not None and identity is not None:
                    _write_record(record, identity)
    return _probed[name]


def _probe_identity(binary: str) -> dict[str, Any] | None:
    """What a recorded probe holds for: this binary file, unchanged, on this boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot_id = f.read().strip()
        st = os.stat(binary)
    except OSError:
        return None
    return {"binary": binary, "boot_id": boot_id, "inode": st.st_ino, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns}  # fmt: skip


def _read_record(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def _write_record(path: str, identity: dict[str, Any]) -> None:
    """Best effort: without the record the next start probes again."""
    with contextlib.suppress(OSError):
        files.write_atomically(path, json.dumps(identity).encode(), durable=False)


def _run_probe_container(binary: str) -> str:
    """Runs /bin/true in a view of the host; returns the runtime's complaint, '' on success."""
    # Imported here: the bundle modules are only needed for the probe.
    from mesilla.containerizer.launcher import host_rootfs, oci

    with tempfile.TemporaryDirectory(prefix="mesilla-oci-probe-") as tmp:
        rootfs = os.path.join(tmp, "rootfs")
        os.mkdir(rootfs)
        spec = oci.probe_spec(rootfs, host_rootfs.prepare(rootfs))
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(spec, f)
        state = os.path.join(tmp, "state")
        probe_id = f"mesilla-probe-{os.getpid()}"
        try:
            result = subprocess.run(
                [binary, "--root", state, "run", "--bundle", tmp, probe_id],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        finally:
            subprocess.run(
                [binary, "--root", state, "delete", "--force", probe_id],
                capture_output=True,
                check=False,
            )
        if result.returncode == 0:
            return ""
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit code {result.returncode}"
