"""The linux launcher: every container is an OCI runtime container (runc or crun).

As Mesos's `LinuxLauncher`, a container gets namespaces and a cgroup; here the
OCI runtime makes them from a bundle we generate (`bundle.py`, `oci.py`) under the
container's runtime directory:

    <runtime_dir>/containers/<id>[/containers/<child id>...]/
        bundle/config.json    the OCI configuration
        monitor/pid           conmon's pid; monitor/init.pid the container's
        monitor/exit/<rid>    conmon's record of the exit code
        shm/                  a private /dev/shm (tmpfs mounted on the host)
        status                the raw wait(2) status, once known
    <runtime_dir>/<runc|crun>/   the runtime's own state (`--root`)
    <runtime_dir>/host-rootfs/   the host view, shared by the containers without an image

The runtime's container id (`rid`) is the dot-joined ContainerID path. Each
container has a conmon monitor (`monitor.py`); it holds the first process
before exec until `start`, reaps it and records how it ended, independent of
the agent. A container without an image sees a read-only view of the host
(`host_rootfs.py`) with its sandbox mounted read-write; every container has its
own mount and pid namespaces. A nested container joins its parent's network,
UTS and IPC namespaces (and pid namespace with `share_pid_namespace`); a DEBUG
one (check, exec session) also its pid namespace and filesystem. Its
cgroup is a child of its parent's, so the parent's limits and accounting
cover it while the runtime can still kill and delete it on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
from dataclasses import dataclass, field
from typing import Any

from mesilla.common import files, procfs
from mesilla.common.blocking import in_thread
from mesilla.common.files import write_atomically
from mesilla.containerizer.cgroups import cgroup_path
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.launcher import host_rootfs, monitor, oci, zygote
from mesilla.containerizer.launcher.base import Launcher, LaunchError, wait_exited
from mesilla.containerizer.launcher.bundle import (
    forget_secrets,
    mount_tmpfs,
    namespaces,
    oci_mount,
    write_spec,
)
from mesilla.containerizer.launcher.debug import enter_filesystem_of
from mesilla.containerizer.launcher.runtime import (
    NoOciRuntime,
    OciRuntime,
    find_runtime,
)
from mesilla.containerizer.runtime_paths import (
    CONTAINERS_DIR,
    STATUS_FILE,
    container_dir,
    read_int,
)
from mesilla.containerizer.types import (
    ContainerClass,
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerRuntimeState,
    ForkRequest,
)
from mesilla.v1.mesos import ContainerID, LinuxInfo

# The init of containers with their own pid namespace (Debian's tini-static: a
# static binary, so it runs in any image), and where containers see it.
_INIT = shutil.which("tini-static")
INIT_PATH = "/.mesilla-init"

log = logging.getLogger(__name__)

BUNDLE_DIR = "bundle"
MONITOR_DIR = "monitor"
SHM_DIR = "shm"
HOST_ROOTFS_DIR = "host-rootfs"
# How long destroy waits for the monitor to record the exit after SIGKILL.
DESTROY_GRACE = 30.0


class UnknownContainer(LaunchError):
    """The launcher has no such container (never forked here, or already destroyed)."""


@dataclass
class _Container:
    id: ContainerID
    directory: str
    pid: int | None
    monitor_pid: int | None
    exited: asyncio.Future[int | None] = field(default_factory=asyncio.Future)
    watcher: asyncio.Task[None] | None = None
    destroyed: bool = False
    # Known only for containers forked here; a recovered one is treated as sharing.
    own_pid_namespace: bool = False
    recovered: bool = False  # by a restarted agent: its monitor_pid is not yet confirmed
    forked: bool = False  # by the executor zygote (`zygote.py`), not runc

    @property
    def monitor_dir(self) -> str:
        return os.path.join(self.directory, MONITOR_DIR)

    @property
    def rid(self) -> str:
        return runtime_id(self.id)


def runtime_id(container_id: ContainerID) -> str:
    return ".".join(container_id.path())


class LinuxLauncher(Launcher):
    name = "linux"

    def __init__(self, flags: ContainerizerFlags) -> None:
        if not monitor.available():
            raise LaunchError(
                "The linux launcher needs conmon: apt-get install conmon, or use --launcher=posix"
            )
        binary = find_runtime(flags.oci_runtime, flags.runtime_dir)
        self._flags = flags
        self._runtime = OciRuntime(binary, os.path.join(flags.runtime_dir, os.path.basename(binary)))
        self._containers: dict[ContainerID, _Container] = {}
        self._cgroups_root = os.path.realpath(flags.cgroups_hierarchy)
        self._zygote = zygote.Zygote.create(flags)

    @staticmethod
    def available(flags: ContainerizerFlags | None = None) -> bool:
        """Root, conmon, and a runtime that really runs a container here."""
        if os.geteuid() != 0 or not monitor.available():
            return False
        try:
            if flags is None:
                find_runtime(None)
            else:
                find_runtime(flags.oci_runtime, flags.runtime_dir)
        except NoOciRuntime:
            return False
        return True

    @property
    def runtime(self) -> OciRuntime:
        return self._runtime

    def directory(self, container_id: ContainerID) -> str:
        return container_dir(self._flags.runtime_dir, container_id)

    # --- launch ---------------------------------------------------------------

    async def fork(self, request: ForkRequest) -> int:
        container_id, argv = request.container_id, request.argv
        config, launch_info = request.config, request.launch_info
        if container_id in self._containers and not self._containers[container_id].destroyed:
            raise LaunchError(f"Container {container_id} already exists in the linux launcher")
        directory = self.directory(container_id)
        bundle = os.path.join(directory, BUNDLE_DIR)
        monitor_dir = os.path.join(directory, MONITOR_DIR)
        rid = runtime_id(container_id)
        # Leftovers of an earlier container with this id would confuse recovery.
        await self._release(container_id, directory)
        with contextlib.suppress(FileNotFoundError):
            files.remove_file(directory, STATUS_FILE)
        spawn: asyncio.Future[monitor.Monitored] | None = None
        try:
            os.makedirs(bundle)
            os.makedirs(monitor_dir)
            os.makedirs(config.sandbox, exist_ok=True)
            spec = self._spec(container_id, argv, config, launch_info)
            await in_thread(write_spec, bundle, spec)
            forked = self._zygote is not None and self._zygote.eligible(request, spec)
            spawn = asyncio.ensure_future(
                self._zygote.fork(request, spec, monitor_dir)
                if self._zygote is not None and forked
                else monitor.spawn(
                    self._runtime,
                    rid,
                    bundle,
                    monitor_dir,
                    config.stdin,
                    config.stdout or os.path.join(config.sandbox, "stdout"),
                    config.stderr or os.path.join(config.sandbox, "stderr"),
                    None if _enters_parent(config) else config.console_socket,
                )
            )
            monitored = await asyncio.shield(spawn)
            if launch_info.secret_names:
                # crun keeps a copy of the config in its state directory; runc does not.
                copies = [os.path.join(bundle, "config.json"), self._runtime.config_copy(rid)]
                forget_secrets(copies, launch_info.secret_names)
        except asyncio.CancelledError:
            # conmon goes on creating the container: let it finish, then remove it all.
            if spawn is not None:
                with contextlib.suppress(Exception):
                    await spawn
            await self._release(container_id, directory)
            raise
        except (OSError, ValueError, LookupError) as exc:
            await self._release(container_id, directory)
            raise LaunchError(f"Failed to create container {container_id}: {exc}") from exc
        except LaunchError:
            await self._release(container_id, directory)
            raise
        container = _Container(container_id, directory, monitored.pid, monitored.monitor_pid)
        container.forked = forked
        container.own_pid_namespace = any(
            n["type"] == "pid" and "path" not in n for n in spec["linux"]["namespaces"]
        )
        self._containers[container_id] = container
        self._watch(container)
        return monitored.pid

    def _spec(
        self,
        container_id: ContainerID,
        argv: list[str],
        config: ContainerConfig,
        launch_info: ContainerLaunchInfo,
    ) -> dict[str, Any]:
        parent_pid = self._parent_pid(container_id)
        linux_info = config.container_info.linux_info if config.container_info else None
        debug = config.container_class is ContainerClass.DEBUG
        create, enter = namespaces(parent_pid, launch_info, linux_info, debug)
        shm = self._shm(container_id, create, enter, linux_info)
        rootfs, mounts, sandbox_target = self._filesystem(config, launch_info, shm)

        if "pid" in create and _INIT is not None:
            # A process that is pid 1 of its namespace gets no default signal
            # actions, so a plain `sleep` would ignore SIGTERM; tini runs as pid 1
            # instead, forwarding signals to the command's process group and reaping.
            mounts.append(oci.bind(_INIT, INIT_PATH, read_only=True))
            argv = [INIT_PATH, "-g", "--", *argv]

        user = oci.resolve_user(
            launch_info.user or config.user or config.command.user,
            f"/proc/{parent_pid}/root" if debug else launch_info.rootfs or "/",
        )
        capabilities, bounding = launch_info.capabilities, launch_info.bounding_capabilities
        if launch_info.rootfs and capabilities is None and bounding is None:
            # Root keeps only what cannot reach past its rootfs (oci.DEFAULT_CAPABILITIES).
            bounding = [c for c in oci.DEFAULT_CAPABILITIES if c in oci.capability_names(None)]
        tty_info = config.container_info.tty_info if config.container_info else None
        window_size = tty_info.window_size if tty_info else None
        if debug:
            assert parent_pid is not None and container_id.parent is not None
            argv = enter_filesystem_of(
                parent_pid, user, self._debug_capabilities(container_id.parent, capabilities), argv,
                config.console_socket, window_size,
            )
            if config.console_socket is not None:
                # enter.py sends the terminal's master from inside the container.
                directory = os.path.dirname(config.console_socket)
                mounts.append(oci.bind(directory, directory))
            # Entering takes root and every capability; enter.py drops them after.
            user, capabilities, bounding = oci.User(0, 0), None, None
        hostname = config.container_info.hostname if config.container_info else None
        return oci.config(
            process_spec=oci.process(
                argv,
                launch_info.environment,
                launch_info.working_directory or sandbox_target,
                user,
                launch_info.rlimits,
                capabilities,
                bounding=bounding,
                # A DEBUG command's terminal is enter.py's, not the runtime's.
                terminal=config.console_socket is not None and not debug,
                window_size=window_size,
            ),
            rootfs=rootfs,
            readonly_rootfs=not launch_info.rootfs,
            mounts=mounts,
            namespace_specs=oci.namespaces(create, enter),
            # Nested containers always get a child cgroup (see the module docstring).
            cgroups_path="/" + cgroup_path(self._flags, container_id, lambda _cid: False),
            resources=launch_info.cgroup_resources,
            hostname=hostname or container_id.value,
        )

    def _filesystem(
        self,
        config: ContainerConfig,
        launch_info: ContainerLaunchInfo,
        shm: dict[str, Any],
    ) -> tuple[str, list[dict[str, Any]], str]:
        """(rootfs, mounts, where the sandbox is inside): an image's rootfs, else the
        host's seen from the shared HOST_ROOTFS_DIR; the sandbox and the isolators' mounts."""
        if launch_info.rootfs:
            rootfs = launch_info.rootfs
            mounts = oci.base_mounts(shm=shm)
            sandbox_target = self._flags.sandbox_directory
        else:
            # One for all, read-only at its top: a container's own costs ~7 ms of
            # rmdir(2) at its teardown (the mount points the runtime made in it).
            rootfs = os.path.join(self._flags.runtime_dir, HOST_ROOTFS_DIR)
            os.makedirs(rootfs, exist_ok=True)
            mounts = [*oci.base_mounts(shm=shm), *host_rootfs.prepare(rootfs)]
            sandbox_target = config.sandbox
        extra: list[dict[str, Any]] = []
        for mount in map(oci_mount, launch_info.mounts):
            # The same mount twice (two isolators asking for it) would hide what was
            # mounted under the first one in between.
            if mount not in extra:
                extra.append(mount)
        # The sandbox is always there, read-write; an isolator's own mount of it wins.
        if not any(m["destination"] == sandbox_target for m in extra):
            mounts.append(oci.bind(config.sandbox, sandbox_target))
        mounts.extend(extra)
        return rootfs, mounts, sandbox_target

    def _parent_pid(self, container_id: ContainerID) -> int | None:
        if container_id.parent is None:
            return None
        parent = self._containers.get(container_id.parent)
        if parent is None or parent.pid is None or parent.exited.done():
            raise LaunchError(
                f"Parent container {container_id.parent} of {container_id} is not running "
                "in the linux launcher: launch the parent first"
            )
        return parent.pid

    def _debug_capabilities(
        self, parent: ContainerID, requested: list[str] | None
    ) -> dict[str, list[str]]:
        """A DEBUG command's capabilities: its parent's, less what it did not ask for.

        A check or an exec session so never holds what the task it looks into
        dropped. The parent's sets are in its bundle, which outlives agent restarts.
        """
        path = os.path.join(self.directory(parent), BUNDLE_DIR, "config.json")
        try:
            with open(path) as f:
                sets: dict[str, list[str]] = json.load(f)["process"]["capabilities"]
        except (OSError, ValueError, KeyError) as exc:
            raise LaunchError(f"Cannot read the capabilities of {parent} in {path}: {exc}") from exc
        if requested is not None:
            allowed = set(oci.capability_names(requested))
            sets = {kind: [c for c in names if c in allowed] for kind, names in sets.items()}
        return sets

    def _shm(
        self,
        container_id: ContainerID,
        create: set[str],
        enter: dict[str, str],
        linux_info: LinuxInfo | None,
    ) -> dict[str, Any]:
        """/dev/shm goes with the IPC namespace: a private tmpfs, the parent's, or the host's.

        A private one is mounted on the host at `<container dir>/shm`, as Mesos
        does, because a nested container joining this IPC namespace must bind
        the same /dev/shm and mounts of another mount namespace cannot be bound.
        """
        if "ipc" in create:
            path = os.path.join(self.directory(container_id), SHM_DIR)
            os.makedirs(path, exist_ok=True)
            size = linux_info.shm_size if linux_info is not None else None
            if not os.path.ismount(path):
                mount_tmpfs(path, size)
            return oci.bind(path, "/dev/shm")
        source = "/dev/shm"
        if "ipc" in enter and container_id.parent is not None:
            source = self._shm_source(container_id.parent)
        return oci.bind(source, "/dev/shm")

    def _shm_source(self, container_id: ContainerID) -> str:
        """The host directory that is `container_id`'s /dev/shm."""
        own = os.path.join(self.directory(container_id), SHM_DIR)
        if os.path.ismount(own):
            return own
        if container_id.parent is not None:
            return self._shm_source(container_id.parent)
        return "/dev/shm"

    async def start(self, container_id: ContainerID) -> None:
        container = self._get(container_id)
        if container.forked:
            zygote.start(container.monitor_dir)
        else:
            await self._runtime.start(container.rid, container.pid)

    # --- the running container ------------------------------------------------

    def _watch(self, container: _Container) -> None:
        container.watcher = asyncio.create_task(self._await_exit(container))

    async def _await_exit(self, container: _Container) -> None:
        try:
            followed = False
            rid, monitor_dir = container.rid, container.monitor_dir
            if container.monitor_pid is not None:
                followed = await monitor.wait_exit(
                    container.monitor_pid, lambda pid: monitor.is_monitor(pid, rid, monitor_dir)
                )
            if not followed and (container.monitor_pid is None or container.recovered):
                # The monitor died before the container (a recovered one's, while the
                # agent was down, is no longer its monitor): follow the init itself.
                container.monitor_pid = None
                if container.forked:
                    if container.pid is not None:
                        await monitor.wait_exit(
                            container.pid,
                            lambda pid: monitor.identified(pid, monitor_dir, "init.identity"),
                        )
                    return
                state = await self._runtime.state(container.rid)
                if state is not None and state.get("status") in ("created", "running", "paused"):
                    await monitor.wait_exit(int(state["pid"]))
        finally:
            # Even when watching failed: a waiter gets what is known rather than hanging.
            if not container.exited.done():
                container.exited.set_result(self._read_status(container))

    def _read_status(self, container: _Container) -> int | None:
        status_path = os.path.join(container.directory, STATUS_FILE)
        status = read_int(status_path)
        if status is not None:
            return status
        code = monitor.exit_code(os.path.join(container.directory, MONITOR_DIR), container.rid)
        if code is None:
            return None
        status = monitor.wait_status(code)
        # Under --runtime_dir: atomic, not fsynced (runtime_paths says why).
        write_atomically(status_path, b"%d\n" % status, durable=False)
        return status

    async def wait(self, container_id: ContainerID) -> int | None:
        return await wait_exited(self._containers.get(container_id))

    async def kill(self, container_id: ContainerID, signal_number: int) -> None:
        container = self._get(container_id)
        if container.forked:
            _signal_init(container, signal_number)
        else:
            await self._runtime.kill(container.rid, signal_number)

    async def destroy(self, container_id: ContainerID) -> None:
        container = self._containers.get(container_id)
        rid = runtime_id(container_id)
        directory = self.directory(container_id)
        if container is not None and not container.exited.done():
            # The init of its own pid namespace takes every process with it, and
            # killing it directly spares a runtime process; otherwise --all, which
            # also reaches what shares a pid namespace but sits in our cgroup.
            if container.forked:
                # A forked executor is pid 1 of its namespace; what joined its cgroups goes too.
                if not _signal_init(container, signal.SIGKILL):
                    await zygote.remove_cgroups(self._flags, container_id)
            elif not (container.own_pid_namespace and _signal_init(container, signal.SIGKILL)):
                await self._runtime.kill(rid, signal.SIGKILL, all_processes=True)
            try:
                async with asyncio.timeout(DESTROY_GRACE):
                    await asyncio.shield(container.exited)
            except TimeoutError:
                log.warning("Monitor of container %s did not report its exit", container_id)
        if container is not None:
            container.destroyed = True
            if container.watcher is not None:
                container.watcher.cancel()
            if not container.exited.done():
                container.exited.set_result(self._read_status(container))
        await self._release(container_id, directory)

    async def _release(self, container_id: ContainerID, directory: str) -> None:
        """Removes the runtime's container (a forked one's cgroups), the bundle and the monitor's files."""
        # First: what the container's processes (and conmon, writing the exit) may still touch.
        if zygote.is_forked(os.path.join(directory, MONITOR_DIR)):
            await zygote.remove_cgroups(self._flags, container_id)
        else:
            # A stopped runc container goes without a runc process (OciRuntime.delete).
            await self._runtime.delete(runtime_id(container_id), self._cgroups_root)
        shm = os.path.join(directory, SHM_DIR)
        if os.path.ismount(shm):
            files.unmount(self._flags.runtime_dir, shm, detach=True)
        trees = [os.path.join(directory, name) for name in (BUNDLE_DIR, MONITOR_DIR, SHM_DIR)]
        if any(os.path.lexists(tree) for tree in trees):
            # A pod's teardown would otherwise stall the loop for ~100 ms.
            await in_thread(_remove_trees, self._flags.runtime_dir, trees)
        for path in (os.path.join(directory, CONTAINERS_DIR), directory):
            with contextlib.suppress(OSError):
                # only when nothing else (checkpoints, children) is left
                files.remove_dir(self._flags.runtime_dir, path)

    def pid(self, container_id: ContainerID) -> int | None:
        container = self._containers.get(container_id)
        return None if container is None or container.destroyed else container.pid

    async def close(self) -> None:
        if self._zygote is not None:
            await self._zygote.close()

    def _get(self, container_id: ContainerID) -> _Container:
        container = self._containers.get(container_id)
        if container is None or container.destroyed:
            raise UnknownContainer(f"Unknown container {container_id} in the linux launcher")
        return container

    # --- recovery -------------------------------------------------------------

    async def recover(self, states: list[ContainerRuntimeState]) -> set[ContainerID]:
        known = {state.container_id for state in states}
        found = set(self._scan(os.path.join(self._flags.runtime_dir, CONTAINERS_DIR), None))
        found |= {ContainerID.from_path(rid.split(".")) for rid in self._runtime.ids()}
        for container_id in sorted(found, key=lambda cid: len(cid.path())):
            if container_id in self._containers:
                continue
            directory = self.directory(container_id)
            monitor_dir = os.path.join(directory, MONITOR_DIR)
            # Whether the monitor is still this container's is checked once, by its watcher.
            container = _Container(
                container_id,
                directory,
                pid=monitor.read_pid(monitor_dir, "init.pid"),
                monitor_pid=monitor.read_pid(monitor_dir, "pid"),
                recovered=True,
                forked=zygote.is_forked(monitor_dir),
            )
            self._containers[container_id] = container
            self._watch(container)
        return found - known

    def _scan(self, containers_dir: str, parent: ContainerID | None) -> list[ContainerID]:
        """Containers with launcher files under a `containers/` directory, recursively."""
        found: list[ContainerID] = []
        with contextlib.suppress(FileNotFoundError):
            for value in os.listdir(containers_dir):
                container_id = ContainerID(value=value, parent=parent)
                directory = os.path.join(containers_dir, value)
                if os.path.isdir(os.path.join(directory, MONITOR_DIR)):
                    found.append(container_id)
                found += self._scan(os.path.join(directory, CONTAINERS_DIR), container_id)
        return found


def _enters_parent(config: ContainerConfig) -> bool:
    """A DEBUG container: its command runs in its parent's filesystem (`enter_filesystem_of`)."""
    return config.container_class is ContainerClass.DEBUG


def _signal_init(container: _Container, number: int) -> bool:
    """Signals the container's init through a pidfd, if it still is that process; False
    when it could not be signalled that way."""
    if container.pid is None or (container.monitor_pid is None and not container.forked):
        return False
    try:
        fd = os.pidfd_open(container.pid)
    except OSError:
        return False
    try:
        if not _is_init(container, container.pid):
            return False
        signal.pidfd_send_signal(fd, number)
        return True
    except (OSError, ValueError, IndexError):
        return False
    finally:
        os.close(fd)


def _is_init(container: _Container, pid: int) -> bool:
    """Whether `pid` (pinned by a pidfd) is the container's init: a forked executor's
    recorded identity, which outlives its monitor; else the monitor's child."""
    if container.forked:
        return monitor.identified(pid, container.monitor_dir, "init.identity")
    process = procfs.stat(pid)
    return process is not None and process.ppid == container.monitor_pid


def _remove_trees(root: str, paths: list[str]) -> None:
    for path in paths:
        _remove_tree(root, path)


def _remove_tree(root: str, path: str) -> None:
    """Removes a directory of ours, refusing to descend into anything mounted there."""
    if not os.path.lexists(path):
        return
    prefix = os.path.realpath(path) + "/"
    with open("/proc/self/mountinfo") as f:
        mounted = [line.split()[4] for line in f]
    inside = [m for m in mounted if m == prefix[:-1] or m.startswith(prefix)]
    if inside:
        raise LaunchError(
            f"{inside[0]} is mounted inside {path}: unmount it before removing the container"
        )
    files.remove_tree(root, path)
