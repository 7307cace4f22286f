"""OCI runtime configuration (`config.json`) from a merged ContainerLaunchInfo.

Pure functions, no I/O but reading the rootfs's `/etc/passwd` and `/etc/group`
to resolve a user name, so the whole translation is testable without root.
Field names follow the OCI runtime spec 1.0 as runc and crun read it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

OCI_VERSION = "1.0.2"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
UNLIMITED = 2**64 - 1  # RLIM_INFINITY as the spec carries it

# Linux capability names by number (include/uapi/linux/capability.h).
CAPABILITIES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
    "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
    "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
    "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
    "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
)

# The OCI runtimes' default set (runc's `spec`, Docker, podman): the most that a
# container with an image and no capability information holds. Root keeping the
# rest would reach the host through the kernel despite its own root and pid
# namespace: open_by_handle_at (CAP_DAC_READ_SEARCH) opens any file of a filesystem
# it has a descriptor on, CAP_SYS_ADMIN mounts, CAP_SYS_MODULE loads modules.
DEFAULT_CAPABILITIES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
)

# Namespace kinds as the spec names them; "mount" is always created (the runtime pivots).
NAMESPACE_KINDS = ("pid", "network", "mount", "ipc", "uts", "cgroup")


class UserNotFound(LookupError):
    """The container's user is in neither the rootfs's /etc/passwd nor numeric."""


@dataclass
class User:
    uid: int
    gid: int
    additional_gids: list[int] = field(default_factory=list)

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"uid": self.uid, "gid": self.gid}
        if self.additional_gids:
            spec["additionalGids"] = self.additional_gids
        return spec


def resolve_user(user: str | None, rootfs: str) -> User:
    """`name`, `uid` or `uid:gid`, looked up in `<rootfs>/etc/passwd` (root if None)."""
    if not user:
        return User(0, 0)
    name, _, group = user.partition(":")
    passwd = _read_table(os.path.join(rootfs, "etc/passwd"))
    entry = next((row for row in passwd if name in (row[0], row[2])), None)
    if entry is None and not name.isdigit():
        raise UserNotFound(
            f"User '{name}' is not in {os.path.join(rootfs, 'etc/passwd')}: create it there "
            "or give a numeric uid"
        )
    uid = int(entry[2]) if entry else int(name)
    gid = int(group) if group.isdigit() else int(entry[3]) if entry else uid
    groups = _read_table(os.path.join(rootfs, "etc/group"))
    login = entry[0] if entry else None
    extra = sorted(
        {int(row[2]) for row in groups if login and login in row[3].split(",") and row[2].isdigit()}
        - {gid}
    )
    return User(uid, gid, extra)


def _read_table(path: str) -> list[list[str]]:
    try:
        with open(path) as f:
            return [line.rstrip("\n").split(":") for line in f if line.count(":") >= 3]
    except OSError:
        return []


def capability_names(capabilities: list[str] | None) -> list[str]:
    """Spec names (`CAP_` prefixed, upper case); None means the agent's own bounding set,
    which is what a process the agent forks would keep."""
    if capabilities is None:
        return list(_bounding_names())
    names = (c.upper() for c in capabilities)
    return [n if n.startswith("CAP_") else f"CAP_{n}" for n in names]


def capability_mask(names: list[str]) -> int:
    """Spec names as the kernel's bit mask of capability numbers."""
    bits = 0
    for name in capability_names(names):
        if name not in CAPABILITIES:
            raise ValueError(f"Unknown capability {name}")
        bits |= 1 << CAPABILITIES.index(name)
    return bits


@functools.cache
def _bounding_names() -> tuple[str, ...]:
    """The agent's bounding set, read once: a process's bounding set only ever shrinks."""
    with open("/proc/self/status") as f:
        mask = next((int(line.split()[1], 16) for line in f if line.startswith("CapBnd:")), 0)
    return tuple(name for number, name in enumerate(CAPABILITIES) if mask >> number & 1)


def rlimits(limits: list[tuple[str, int | None, int | None]]) -> list[dict[str, Any]]:
    """(type, soft, hard) with Mesos's `RLMT_*` or spec's `RLIMIT_*` types; None is unlimited."""
    specs = []
    for kind, soft, hard in limits:
        name = kind.upper()
        name = "RLIMIT_" + name[len("RLMT_") :] if name.startswith("RLMT_") else name
        specs.append(
            {
                "type": name,
                "soft": UNLIMITED if soft is None else soft,
                "hard": UNLIMITED if hard is None else hard,
            }
        )
    return specs


def process(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    user: User,
    limits: list[tuple[str, int | None, int | None]],
    capabilities: list[str] | None,
    *,
    bounding: list[str] | None = None,
    terminal: bool = False,
    window_size: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The spec's `process`; a `terminal` one gets a pseudo-terminal of `window_size`
    (TTYInfo.WindowSize) from the runtime, sent over its console socket.

    As Mesos, given capabilities are the effective and permitted sets and the
    bounding set (else `bounding`) is also the inheritable one, so that no file
    capability grants more than the bounding set.
    """
    env = {"PATH": DEFAULT_PATH, **env}
    caps = capability_names(capabilities)
    most = capability_names(bounding) if bounding is not None else caps
    spec = {
        "terminal": terminal,
        "user": user.spec(),
        "args": argv,
        "env": [f"{k}={v}" for k, v in env.items()],
        "cwd": cwd,
        "capabilities": {
            "bounding": most,
            "effective": caps,
            "permitted": caps,
            "inheritable": most if capabilities is not None else [],
            # Ambient only for non-root users given capabilities, so that these survive
            # their exec; without any, a non-root user keeps none (setuid drops them).
            "ambient": caps if user.uid != 0 and capabilities is not None else [],
        },
        "rlimits": rlimits(limits),
        "noNewPrivileges": False,
    }
    if terminal and window_size:
        spec["consoleSize"] = {
            "height": int(window_size.get("rows", 0)),
            "width": int(window_size.get("columns", 0)),
        }
    return spec


def base_mounts(*, shm: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The kernel filesystems every container gets; `shm` replaces the private /dev/shm."""
    return [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
        },
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
        },
        shm
        or {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        },
        {
            "destination": "/dev/mqueue",
            "type": "mqueue",
            "source": "mqueue",
            "options": ["nosuid", "noexec", "nodev"],
        },
        {
            "destination": "/sys",
            "type": "sysfs",
            "source": "sysfs",
            "options": ["nosuid", "noexec", "nodev", "ro"],
        },
    ]


def bind(source: str, destination: str, *, read_only: bool = False) -> dict[str, Any]:
    options = ["rbind", "ro" if read_only else "rw", "rprivate"]
    return {"destination": destination, "type": "bind", "source": source, "options": options}


def namespaces(create: set[str], enter: dict[str, str]) -> list[dict[str, Any]]:
    """Namespaces to create, and to join by path (joining wins); "mount" always."""
    unknown = sorted((create | set(enter)) - set(NAMESPACE_KINDS))
    if unknown:
        raise ValueError(f"Unknown namespace kind(s) {', '.join(unknown)}: use {NAMESPACE_KINDS}")
    kinds = create | set(enter) | {"mount"}
    return [
        {"type": k, **({"path": enter[k]} if k in enter else {})}
        for k in NAMESPACE_KINDS
        if k in kinds
    ]


def config(
    *,
    process_spec: dict[str, Any],
    rootfs: str,
    mounts: list[dict[str, Any]],
    namespace_specs: list[dict[str, Any]],
    cgroups_path: str | None,
    resources: dict[str, Any],
    hostname: str | None = None,
    readonly_rootfs: bool = False,
) -> dict[str, Any]:
    linux: dict[str, Any] = {"namespaces": namespace_specs, "resources": resources}
    if cgroups_path is not None:
        linux["cgroupsPath"] = cgroups_path
    spec: dict[str, Any] = {
        "ociVersion": OCI_VERSION,
        "process": process_spec,
        "root": {"path": rootfs, "readonly": readonly_rootfs},
        "mounts": mounts,
        "linux": linux,
    }
    if hostname is not None and any(n["type"] == "uts" and "path" not in n for n in namespace_specs):
        spec["hostname"] = hostname
    return spec


def probe_spec(rootfs: str, host_mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """A container that runs `/bin/true` in a view of the host (the runtime probe)."""
    return config(
        process_spec=process(["/bin/true"], {}, "/", User(0, 0), [], None),
        rootfs=rootfs,
        mounts=[*base_mounts(), *host_mounts],
        namespace_specs=namespaces({"pid", "mount"}, {}),
        cgroups_path=None,
        resources={},
    )
