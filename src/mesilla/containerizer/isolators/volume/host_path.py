"""volume/host_path: bind-mounts host directories or files into containers.

Handles volumes whose source is HOST_PATH (`source.host_path.path`, with an
optional `mount_propagation.mode`) and the older form with `Volume.host_path`
set and no source. A HOST_PATH source must be absolute; the older form may
also be relative, to the sandbox. A missing directory is created, as Mesos
does. RO volumes are mounted read-only.
"""

from __future__ import annotations

import os

from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.isolators.volume.mount_point import (
    VolumeError,
    bind_mount,
    mount_target,
    relative_inside,
)
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo, Mount
from mesilla.v1.mesos import ContainerID, Volume


def host_path_of(volume: Volume) -> tuple[str, str | None] | None:
    """(host path, propagation mode) of a host path volume; None for other volumes."""
    if volume.source is not None:
        if volume.source.type != "HOST_PATH":
            return None
        spec = volume.source.host_path or {}
        propagation = (spec.get("mount_propagation") or {}).get("mode")
        return str(spec.get("path", "")), propagation
    if volume.host_path is not None and volume.image is None:
        return volume.host_path, None
    return None


class VolumeHostPathIsolator(Isolator):
    name = "volume/host_path"
    supports_nesting = True

    def __init__(self, flags: ContainerizerFlags) -> None:
        self.flags = flags

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        volumes = config.info.volumes
        mounts: list[Mount] = []
        for volume in volumes:
            found = host_path_of(volume)
            if found is None:
                continue
            host_path, propagation = found
            if volume.source is None and not os.path.isabs(host_path):
                host_path = os.path.join(
                    config.sandbox, relative_inside(host_path, "Volume host_path")
                )
            if not os.path.isabs(host_path):
                raise VolumeError(
                    f"HOST_PATH volume for '{volume.container_path}' has host path '{host_path}': "
                    "it must be absolute"
                )
            source = os.path.normpath(host_path)
            if not os.path.exists(source):
                os.makedirs(source)
            target = mount_target(self.flags, config, volume.container_path, source)
            mounts.append(bind_mount(source, target, volume.mode, propagation))
        return ContainerLaunchInfo(mounts=mounts) if mounts else None
