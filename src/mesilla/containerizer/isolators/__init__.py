"""Isolators, one per module under `<family>/<name>.py`, selected by `--isolation`.

`ISOLATORS` maps Mesos's isolator names to `module:Class` (imported lazily).
Whatever order entries are added in, isolators always run in `MESOS_ORDER`,
the order of Mesos's creators table: `prepare` in that order, `cleanup` in
reverse. `resolve_isolation` applies Mesos's rules to the `--isolation` value.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable

from mesilla.common.errors import ConfigurationError
from mesilla.common.plugins import load_class
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator

ISOLATORS: dict[str, str] = {
    "filesystem/posix": "mesilla.containerizer.isolators.filesystem.posix:PosixFilesystemIsolator",
    "posix/cpu": "mesilla.containerizer.isolators.posix.cpu:PosixCpuIsolator",
    "posix/mem": "mesilla.containerizer.isolators.posix.mem:PosixMemIsolator",
    "cgroups/cpu": "mesilla.containerizer.isolators.cgroups.cpu:CgroupsCpuIsolator",
    "cgroups/mem": "mesilla.containerizer.isolators.cgroups.mem:CgroupsMemIsolator",
    "cgroups/pids": "mesilla.containerizer.isolators.cgroups.pids:CgroupsPidsIsolator",
    "disk/du": "mesilla.containerizer.isolators.disk.du:DiskDuIsolator",
    "posix/rlimits": "mesilla.containerizer.isolators.posix.rlimits:PosixRLimitsIsolator",
    "linux/capabilities": "mesilla.containerizer.isolators.linux.capabilities:LinuxCapabilitiesIsolator",
    "volume/host_path": "mesilla.containerizer.isolators.volume.host_path:VolumeHostPathIsolator",
    "volume/sandbox_path": "mesilla.containerizer.isolators.volume.sandbox_path:VolumeSandboxPathIsolator",
    "docker/runtime": "mesilla.containerizer.isolators.docker.runtime:DockerRuntimeIsolator",
    "filesystem/linux": "mesilla.containerizer.isolators.filesystem.linux:LinuxFilesystemIsolator",
    "namespaces/pid": "mesilla.containerizer.isolators.namespaces.pid:PidNamespaceIsolator",
    "namespaces/ipc": "mesilla.containerizer.isolators.namespaces.ipc:IpcNamespaceIsolator",
    "environment_secret": (
        "mesilla.containerizer.isolators.environment_secret:EnvironmentSecretIsolator"
    ),
    "network/cni": "mesilla.containerizer.isolators.network.cni:NetworkCniIsolator",
    "network/ports": "mesilla.containerizer.isolators.network.ports:NetworkPortsIsolator",
}

# Mesos's creators table order (`src/slave/containerizer/mesos/containerizer.cpp`).
MESOS_ORDER: tuple[str, ...] = (
    "filesystem/posix",
    "filesystem/linux",
    "filesystem/shared",
    "posix/cpu",
    "posix/mem",
    "disk/du",
    "volume/sandbox_path",
    "cgroups/all",
    "cgroups/blkio",
    "cgroups/cpu",
    "cgroups/cpuset",
    "cgroups/devices",
    "cgroups/hugetlb",
    "cgroups/mem",
    "cgroups/net_cls",
    "cgroups/net_prio",
    "cgroups/perf_event",
    "cgroups/pids",
    "appc/runtime",
    "docker/runtime",
    "docker/volume",
    "linux/devices",
    "gpu/nvidia",
    "namespaces/ipc",
    "namespaces/pid",
    "network/cni",
    "network/port_mapping",
    "volume/host_path",
    "volume/image",
    "volume/secret",
    "volume/csi",
    "linux/capabilities",
    "linux/nnp",
    "linux/seccomp",
    "disk/xfs",
    "network/ports",
    "posix/rlimits",
    "environment_secret",
)

# Deprecated names Mesos still accepts.
ALIASES: dict[str, tuple[str, ...]] = {
    "process": ("posix/cpu", "posix/mem"),
    "posix/disk": ("disk/du",),
    "cgroups": ("cgroups/cpu", "cgroups/mem"),
}

# `filesystem/linux` brings the volume isolators with it, as in Mesos.
_IMPLIED_BY: dict[str, tuple[str, ...]] = {
    "filesystem/linux": ("volume/image", "volume/host_path", "volume/sandbox_path"),
}


class IsolationError(ConfigurationError, ValueError):
    """`--isolation` is invalid; the message names the offending isolator."""


def _rank(name: str) -> tuple[int, str]:
    try:
        return (MESOS_ORDER.index(name), name)
    except ValueError:  # registered but unknown to Mesos: after Mesos's own
        return (len(MESOS_ORDER), name)


def resolve_isolation(names: str | Iterable[str]) -> list[str]:
    """The isolator names to load, in run order, for an `--isolation` value."""
    if isinstance(names, str):
        names = names.split(",")
    wanted: set[str] = set()
    for raw in names:
        name = raw.strip()
        if name:
            wanted.update(ALIASES.get(name, (name,)))

    filesystems = sorted(n for n in wanted if n.startswith("filesystem/"))
    if len(filesystems) > 1:
        raise IsolationError(
            f"Only one filesystem isolator can be used, got {', '.join(filesystems)}: "
            "keep one in --isolation"
        )
    if not filesystems:
        wanted.add("filesystem/posix")
    wanted.add("environment_secret")  # always, as in Mesos
    for name in list(wanted):
        # Implied isolators join only where this build provides them.
        wanted.update(n for n in _IMPLIED_BY.get(name, ()) if n in ISOLATORS)

    unknown = sorted(wanted - ISOLATORS.keys())
    if unknown:
        known = ", ".join(sorted(ISOLATORS))
        raise IsolationError(
            f"Unknown or unsupported isolator(s) {', '.join(unknown)} in --isolation: "
            f"use any of {known}"
        )
    return sorted(wanted, key=_rank)


def load_isolator_class(name: str) -> type[Isolator]:
    return load_class(ISOLATORS[name], Isolator)


async def load_isolators(names: str | Iterable[str], flags: ContainerizerFlags) -> list[Isolator]:
    """Creates the isolators for `--isolation`, in run order."""
    isolators: list[Isolator] = []
    for name in resolve_isolation(names):
        cls = load_isolator_class(name)
        create = getattr(cls, "create", None)
        if create is not None and inspect.iscoroutinefunction(create):
            isolator = await create(flags)
        else:
            isolator = cls(flags)
        if not isolator.name:
            isolator.name = name
        isolators.append(isolator)
    return isolators
