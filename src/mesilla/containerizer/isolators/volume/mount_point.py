"""Where a volume lands in a container, shared by the volume isolators.

A relative `container_path` is under the container's sandbox: the mount
point is created in the sandbox on the host, and the target is the sandbox as
the container sees it (`--sandbox_directory` when it has an image, else the
sandbox's host path). An absolute `container_path` is a path in the image's
rootfs (the runtime creates it); a container without an image sees the host's
tree, so the path must already exist there.
"""

from __future__ import annotations

import os
import unicodedata

from mesilla.common import files
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.types import ContainerConfig, Mount


class VolumeError(ValueError):
    """A volume that cannot be provided; the message names the volume and the fix."""


def relative_inside(path: str, what: str) -> str:
    """`path` normalised, refused if absolute or if it climbs out with `..`."""
    _printable(path, what)
    if not path or os.path.isabs(path):
        raise VolumeError(f"{what} '{path}' must be a non-empty relative path")
    normal = os.path.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise VolumeError(f"{what} '{path}' must not leave its directory with '..'")
    return normal


def _printable(path: str, what: str) -> None:
    if any(unicodedata.category(c) == "Cc" for c in path):
        shown = path.encode("unicode_escape").decode()
        raise VolumeError(f"{what} '{shown}' contains invalid characters")


def mount_target(
    flags: ContainerizerFlags, config: ContainerConfig, container_path: str, source: str
) -> str:
    """The target inside the container; creates the mount point for sandbox-relative paths."""
    _printable(container_path, "Volume container_path")
    if os.path.isabs(container_path):
        target = os.path.normpath(container_path)
        if config.rootfs is None and not os.path.exists(target):
            raise VolumeError(
                f"Volume container_path '{container_path}' does not exist on the host, and a "
                "container without an image sees the host's tree: use a relative path (under "
                "the sandbox) or give the container an image"
            )
        return target
    relative = relative_inside(container_path, "Volume container_path")
    try:
        # Symlinks the sandbox holds (a task can make them) must not lead the mount point out.
        host_point = files.inside(config.sandbox, relative, follow=True)
    except files.OutsideRoot:
        raise VolumeError(
            f"Volume container_path '{container_path}' leads outside the sandbox through a symlink"
        ) from None
    if os.path.isdir(source):
        os.makedirs(host_point, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(host_point), exist_ok=True)
        with open(host_point, "a"):
            pass
    sandbox = flags.sandbox_directory if config.rootfs is not None else config.sandbox
    return os.path.join(sandbox, os.path.relpath(host_point, os.path.realpath(config.sandbox)))


def bind_mount(
    source: str, target: str, mode: str, propagation: str | None = None
) -> Mount:
    if mode not in ("RW", "RO"):
        raise VolumeError(f"Volume mode '{mode}' for {target} must be RW or RO")
    options = ["rbind", "rw" if mode == "RW" else "ro"]
    # BIDIRECTIONAL lets mounts made in the container reach the host (Mesos's MountPropagation).
    options.append("rshared" if propagation == "BIDIRECTIONAL" else "rslave")
    return Mount(source=source, target=target, type="bind", options=options)
