"""filesystem/posix: the container sees the host filesystem; its sandbox is a host directory.

As Mesos's isolator on non-Linux hosts, there is no rootfs and no mount
namespace: the isolator makes sure the sandbox exists, gives it to the
container's user when the agent runs as root, and refuses what it cannot do
(an image needs `filesystem/linux`).
"""

from __future__ import annotations

import os
import pwd

from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import ContainerID


class FilesystemIsolatorError(Exception):
    """The container asks for something this filesystem isolator cannot provide."""


class PosixFilesystemIsolator(Isolator):
    name = "filesystem/posix"
    supports_nesting = True

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        info = config.container_info
        if info is not None and info.mesos is not None and info.mesos.image is not None:
            raise FilesystemIsolatorError(
                f"Container {container_id} has an image, which filesystem/posix cannot "
                "provide: add filesystem/linux to --isolation"
            )
        os.makedirs(config.sandbox, exist_ok=True)
        if config.user and os.geteuid() == 0:
            try:
                entry = pwd.getpwnam(config.user)
            except KeyError:
                raise FilesystemIsolatorError(
                    f"User '{config.user}' of container {container_id} does not exist on this host"
                ) from None
            os.chown(config.sandbox, entry.pw_uid, entry.pw_gid)
        return None
