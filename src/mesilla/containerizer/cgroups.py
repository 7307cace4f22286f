"""Linux control groups: where a container's cgroup is, and how to read and write it.

Layout (relative to each hierarchy's root, never to the agent's own cgroup, as
in Mesos): every container has its own directory `<cgroups_root>/<id>`, and a
nested container's directory is inside its parent's,
`<cgroups_root>/<root id>/<child id>/...` (Mesos adds a `mesos/` level between
them, which nothing here needs). A nested container that shares its
parent's cgroups (`LinuxInfo.share_cgroups` unset or true, Mesos's default)
sets no limits of its own: its directory only exists so that the OCI runtime
can signal and remove that container alone, and the kernel accounts it to the
nearest ancestor that has limits, which `cgroup_path` names.

Both cgroup versions are handled behind one `Hierarchy`:
- v1 (this project's CI host): one mount per controller under
  `--cgroups_hierarchy` (`/sys/fs/cgroup/memory`, `/sys/fs/cgroup/cpu`, ...);
  an empty cgroup2 mount beside them (hybrid) is ignored.
- v2 (unified): `--cgroups_hierarchy` itself is a cgroup2 mount. A cgroup that
  has children cannot hold processes there, so a container's processes live in
  `<dir>/leaf` (Mesos's v2 layout) and limits are set on `<dir>`.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.common.fds import wait_readable
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.v1.mesos import ContainerID, ContainerInfo

CGROUP2_MAGIC = "cgroup2"
LEAF = "leaf"
# v1 accounting files live in a sibling controller of the one that enforces.
V1_COMPANIONS = {"cpu": ("cpu", "cpuacct"), "memory": ("memory",), "pids": ("pids",)}

# Tells whether a nested container shares its parent's cgroups; the callers
# (launcher, isolators) know the configs, this module does not.
SharesCgroups = Callable[[ContainerID], bool]


class CgroupsError(Exception):
    """A cgroup operation failed; the message names the cgroup and what to check."""


def shares_cgroups(container_info: ContainerInfo | None) -> bool:
    """Mesos's rule for a nested container: share the parent's cgroups unless told not to."""
    linux = container_info.linux_info if container_info is not None else None
    return linux is None or linux.share_cgroups is None or bool(linux.share_cgroups)


def own_cgroup_path(flags: ContainerizerFlags, container_id: ContainerID) -> str:
    """The directory of this very container: `<cgroups_root>/<root id>/.../<id>`."""
    chain: list[str] = []
    node: ContainerID | None = container_id
    while node is not None:
        chain.append(node.value)
        node = node.parent
    root = str(flags.cgroups_root).strip("/")
    return "/".join([root, *reversed(chain)])


def cgroup_path(
    flags: ContainerizerFlags,
    container_id: ContainerID,
    share_cgroups_of: SharesCgroups | None = None,
) -> str:
    """The cgroup that limits and accounts `container_id` (relative to a hierarchy's root).

    A nested container that shares cgroups is accounted to its parent (recursively).
    `share_cgroups_of` answers for nested containers; without it every nested
    container shares, the Mesos default.
    """
    shares = share_cgroups_of or (lambda _cid: True)
    own = container_id
    while own.parent is not None and shares(own):
        own = own.parent
    return own_cgroup_path(flags, own)


def oci_cgroups_path(flags: ContainerizerFlags, container_id: ContainerID) -> str:
    """The OCI `linux.cgroupsPath` for a container: absolute, so the runtime does not
    resolve it under its own cgroup; on v2 the processes go to the `leaf` child."""
    path = "/" + own_cgroup_path(flags, container_id)
    if Hierarchy.detect(flags.cgroups_hierarchy).version == 2:
        path += "/" + LEAF
    return path


@dataclass(frozen=True)
class Hierarchy:
    """The cgroup file systems mounted under `--cgroups_hierarchy`."""

    root: str
    version: int
    # v1: controller -> its mount point; v2: controller -> root (all in one tree).
    mounts: dict[str, str] = field(default_factory=dict)

    @classmethod
    def detect(
        cls, root: str = "/sys/fs/cgroup", mountinfo: str = "/proc/self/mountinfo"
    ) -> Hierarchy:
        root = os.path.realpath(root)
        v1: dict[str, str] = {}
        unified = False
        with open(mountinfo) as f:
            for line in f:
                fields = line.split()
                sep = fields.index("-")
                point, fstype, options = fields[4], fields[sep + 1], fields[sep + 3]
                if fstype == CGROUP2_MAGIC and point == root:
                    unified = True
                elif fstype == "cgroup" and os.path.dirname(point) == root:
                    for option in options.split(","):
                        if option in _V1_CONTROLLERS:
                            v1[option] = point
        if unified:
            with open(os.path.join(root, "cgroup.controllers")) as f:
                names = f.read().split()
            return cls(root, 2, {name: root for name in names})
        if not v1:
            raise CgroupsError(
                f"No cgroup hierarchy is mounted at {root}: mount cgroup v1 controllers "
                "or cgroup2 there, or point --cgroups_hierarchy at the mount"
            )
        return cls(root, 1, v1)

    def has(self, controller: str) -> bool:
        return controller in self.mounts

    def cgroup(self, path: str) -> Cgroup:
        return Cgroup(self, path.strip("/"))


_V1_CONTROLLERS = {
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "pids",
    "devices",
    "freezer",
    "blkio",
    "net_cls",
    "net_prio",
    "perf_event",
    "hugetlb",
    "rdma",
    "misc",
}


class Cgroup:
    """One cgroup (a relative path) across the controllers of a `Hierarchy`."""

    def __init__(self, hierarchy: Hierarchy, path: str) -> None:
        self.hierarchy = hierarchy
        self.path = path

    def __repr__(self) -> str:
        return f"Cgroup({self.path!r}, v{self.hierarchy.version})"

    @property
    def version(self) -> int:
        return self.hierarchy.version

    def directory(self, controller: str) -> str:
        mount = self.hierarchy.mounts.get(controller)
        if mount is None:
            raise CgroupsError(
                f"The '{controller}' cgroup controller is not available under "
                f"{self.hierarchy.root}: enable it or drop its isolator from --isolation"
            )
        return os.path.join(mount, self.path)

    def _procs_directory(self, controller: str) -> str:
        base = self.directory(controller)
        return os.path.join(base, LEAF) if self.version == 2 else base

    def exists(self, controller: str) -> bool:
        return os.path.isdir(self.directory(controller))

    def create(self, controllers: Iterable[str]) -> None:
        """Creates the cgroup in each controller's hierarchy (idempotent)."""
        if self.version == 1:
            for controller in controllers:
                for name in self._companions(controller):
                    os.makedirs(self.directory(name), exist_ok=True)
            return
        wanted = [c for c in controllers if self.hierarchy.has(c)]
        # v2: a controller is usable in a cgroup only when every ancestor delegates
        # it. The cgroup itself delegates nothing: it may hold processes (a runtime
        # that put them there rather than in the leaf), and then the kernel refuses.
        current = self.hierarchy.root
        for part in self.path.split("/"):
            _enable_controllers(current, wanted)
            current = os.path.join(current, part)
            os.makedirs(current, exist_ok=True)
        os.makedirs(os.path.join(current, LEAF), exist_ok=True)

    def read(self, controller: str, name: str) -> str:
        try:
            with open(os.path.join(self.directory(controller), name)) as f:
                return f.read()
        except OSError as exc:
            raise CgroupsError(
                f"Failed to read {name} of cgroup {self.path}: {exc.strerror}"
            ) from None

    def write(self, controller: str, name: str, value: str | int) -> None:
        try:
            with open(os.path.join(self.directory(controller), name), "w") as f:
                f.write(str(value))
        except OSError as exc:
            raise CgroupsError(
                f"Failed to write '{value}' to {name} of cgroup {self.path}: {exc.strerror}"
            ) from None

    def read_keyed(self, controller: str, name: str) -> dict[str, int]:
        """A flat-keyed file such as memory.stat or cpu.stat, as integers."""
        values: dict[str, int] = {}
        for line in self.read(controller, name).splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                values[key] = int(value)
        return values

    def _companions(self, controller: str) -> list[str]:
        """The controllers that make up `controller` here (v1 splits cpu from cpuacct)."""
        if self.version == 2:
            return [controller]
        return [
            n
            for n in V1_COMPANIONS.get(controller, (controller,))
            if self.hierarchy.has(n)
        ]

    def add_process(self, controller: str, pid: int) -> None:
        for name in self._companions(controller):
            procs = os.path.join(self._procs_directory(name), "cgroup.procs")
            try:
                with open(procs, "w") as f:
                    f.write(str(pid))
            except OSError as exc:
                raise CgroupsError(
                    f"Failed to move pid {pid} into cgroup {self.path} ({name}): {exc.strerror}"
                ) from None

    def processes(self, controller: str) -> list[int]:
        """Every process in this cgroup and below it."""
        found: list[int] = []
        for directory, _subdirs, names in os.walk(self.directory(controller)):
            if "cgroup.procs" in names:
                try:
                    with open(os.path.join(directory, "cgroup.procs")) as f:
                        found.extend(int(line) for line in f if line.strip())
                except FileNotFoundError:
                    continue  # removed while walking
        return found

    def contains(self, controller: str, pid: int) -> bool:
        """Whether `pid` is in this cgroup or one below it (in every v1 companion)."""
        prefix = "/" + self.path
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return False
        wanted = set(self._companions(controller))
        for line in lines:
            _hid, names, path = line.split(":", 2)
            inside = path == prefix or path.startswith(prefix + "/")
            if self.version == 2 and names == "":
                return inside
            if self.version == 1 and inside:
                wanted -= set(names.split(","))
        return self.version == 1 and not wanted

    async def remove(self, controllers: Iterable[str], attempts: int = 50) -> None:
        """Removes the cgroup and its descendants, SIGKILLing what is left in them and
        waiting while the dying tasks drain (as Mesos's cgroups destroy does)."""
        names = {
            name for controller in controllers for name in self._companions(controller)
        }
        directories = {self.directory(n) for n in names}
        for top in directories:
            await _remove_tree(self.hierarchy.root, top, attempts)


def _enable_controllers(directory: str, controllers: list[str]) -> None:
    subtree = os.path.join(directory, "cgroup.subtree_control")
    try:
        with open(subtree) as f:
            enabled = set(f.read().split())
        missing = [c for c in controllers if c not in enabled]
        if missing:
            with open(subtree, "w") as f:
                f.write(" ".join("+" + c for c in missing))
    except OSError as exc:
        raise CgroupsError(
            f"Failed to delegate {', '.join(controllers)} below cgroup {directory}: "
            f"{exc.strerror} (a cgroup v2 directory holding processes cannot delegate; "
            "see its cgroup.procs)"
        ) from None


def _kill_members(directory: str) -> None:
    try:
        with open(os.path.join(directory, "cgroup.procs")) as f:
            pids = [int(line) for line in f if line.strip()]
    except FileNotFoundError:
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


async def remove_everywhere(root: str, path: str, attempts: int = 50) -> None:
    """Removes cgroup `path` (killing what is left) in every hierarchy mounted under
    `root`, named and unified ones included: where an OCI runtime made it (as the
    parent of a nested container's) without any controller of ours asking."""
    bases = [os.path.join(root, entry) for entry in sorted(os.listdir(root))]
    mounted = [base for base in bases if not os.path.islink(base) and os.path.ismount(base)]
    await remove_directories(root, [os.path.join(base, path.strip("/")) for base in mounted], attempts)


async def remove_directories(root: str, directories: Iterable[str], attempts: int = 50) -> None:
    """Removes each cgroup directory (absolute, within `root`) and its descendants,
    killing what is left in them; one already gone is fine."""
    # Most are empty by now (no child, no task): one rmdir each, in a thread, as the
    # kernel takes a while over each (~0.2 ms, several ms on a busy host); the rest
    # are walked and drained here.
    for top in await in_thread(_remove_empty, root, list(directories)):
        await _remove_tree(root, top, attempts)


def _remove_empty(root: str, directories: list[str]) -> list[str]:
    """rmdir(2) of each directory; those that are still there (busy, or with children)."""
    left = []
    for directory in directories:
        try:
            files.remove_dir(root, directory)
        except FileNotFoundError:
            continue
        except OSError:
            left.append(directory)
    return left


async def _remove_tree(root: str, top: str, attempts: int) -> None:
    for attempt in range(attempts):
        if not os.path.isdir(top):
            return
        busy: OSError | None = None
        for directory, _subdirs, _files in sorted(
            os.walk(top), key=lambda w: -len(w[0])
        ):
            try:
                files.remove_dir(root, directory)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise CgroupsError(
                        f"Failed to remove cgroup {directory}: {exc.strerror}"
                    ) from None
                busy = exc
                _kill_members(directory)
        if busy is None:
            return
        # Killed tasks leave the cgroup asynchronously; back off a little each time.
        await asyncio.sleep(min(0.01 * (attempt + 1), 0.2))
    raise CgroupsError(
        f"Cgroup {top} still has tasks after {attempts} removal attempts: "
        "kill its processes (see its cgroup.procs) before removing it"
    )


class OomListener:
    """Reports the kernel's OOM kills in one memory cgroup from the moment it is created.

    v1 registers an eventfd on `memory.oom_control` through `cgroup.event_control`
    (the kernel also signals it when the cgroup goes away, which is no OOM). v2
    raises a file-modified event on `memory.events`, watched with inotify (or
    polled where inotify is unavailable), and counts the kills in `oom_kill`.
    """

    POLL_INTERVAL = 1.0  # v2 without inotify only

    def __init__(self, cgroup: Cgroup) -> None:
        self.cgroup = cgroup
        self._baseline = self.oom_kills()
        self._eventfd: int | None = None
        self._control: int | None = None
        self._inotify: int | None = None
        directory = cgroup.directory("memory")
        try:
            if cgroup.version == 1:
                self._eventfd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
                self._control = os.open(
                    os.path.join(directory, "memory.oom_control"),
                    os.O_RDONLY | os.O_CLOEXEC,
                )
                cgroup.write(
                    "memory", "cgroup.event_control", f"{self._eventfd} {self._control}"
                )
            else:
                self._inotify = _inotify_watch(os.path.join(directory, "memory.events"))
        except (OSError, CgroupsError):
            self.close()
            raise

    def oom_kills(self) -> int:
        """The kernel's count of OOM kills in the cgroup (0 once the cgroup is gone)."""
        name = "memory.oom_control" if self.cgroup.version == 1 else "memory.events"
        try:
            return self.cgroup.read_keyed("memory", name).get("oom_kill", 0)
        except CgroupsError:
            return 0

    async def wait(self) -> int:
        """Resolves with the number of OOM kills once there is one; never if the cgroup goes."""
        while True:
            if self._eventfd is not None:
                await wait_readable(self._eventfd)
                try:
                    os.eventfd_read(self._eventfd)
                except BlockingIOError:
                    continue
                # An event on a cgroup that still exists is an OOM. Report it at
                # once: the kill is being made (the kernel may not have counted
                # it yet) and the container's exit must not overtake the report.
                if self.cgroup.exists("memory"):
                    return max(1, self.oom_kills() - self._baseline)
            else:
                if self._inotify is not None:
                    await wait_readable(self._inotify)
                    _drain(self._inotify)
                else:
                    await asyncio.sleep(self.POLL_INTERVAL)
                kills = self.oom_kills() - self._baseline
                if kills > 0:
                    return kills
            if not self.cgroup.exists("memory"):
                await asyncio.Event().wait()  # removed: the container ended otherwise

    def close(self) -> None:
        for fd in (self._eventfd, self._control, self._inotify):
            if fd is not None:
                os.close(fd)
        self._eventfd = self._control = self._inotify = None


_IN_MODIFY = 0x2
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC


def _inotify_watch(path: str) -> int | None:
    """An inotify fd reporting modifications of `path`; None where inotify is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd: int = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, path.encode(), _IN_MODIFY) < 0:
        error = ctypes.get_errno()
        os.close(fd)
        raise OSError(error, f"inotify on {path}: {os.strerror(error)}")
    return fd


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        return


