"""filesystem/linux: a mount namespace per container, the image's rootfs, the sandbox.

As Mesos's isolator on Linux (the linux launcher is required):

* a container with an image runs in its rootfs, with its sandbox bind-mounted
  read-write at `--sandbox_directory`, which is its MESOS_SANDBOX and
  working directory;
* a container without an image sees the host (the launcher's read-only host
  view) with the sandbox at its host path;
* the command executor of a task with an image stays on the host view and
  pivots only the task into the rootfs (`executor/task_rootfs.py`), so it
  needs the rootfs mounted read-write at its host path, with the sandbox (and
  the volumes, `launch_info.own_executor_arguments`) inside it.

Volumes are the volume isolators' (`volume/*`), which Mesos enables with this one.
"""

from __future__ import annotations

import os

from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.launcher.oci import UserNotFound, resolve_user
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo, Mount
from mesilla.v1.mesos import ContainerID


class LinuxFilesystemError(Exception):
    """The container's filesystem cannot be set up; the message names the fix."""


class LinuxFilesystemIsolator(Isolator):
    name = "filesystem/linux"
    supports_nesting = True

    def __init__(self, flags: ContainerizerFlags) -> None:
        self._sandbox_directory: str = flags.sandbox_directory

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        os.makedirs(config.sandbox, exist_ok=True)
        if config.user and os.geteuid() == 0:
            _give_to(config.sandbox, config.user, config.rootfs or "/", container_id)
        info = ContainerLaunchInfo(clone_namespaces={"mount"})
        if config.rootfs is None:
            info.environment["MESOS_SANDBOX"] = config.sandbox
            return info
        if not os.path.isdir(config.rootfs):
            raise LinuxFilesystemError(
                f"The rootfs {config.rootfs} of container {container_id} does not exist: "
                "the provisioner must provide it before PREPARING"
            )
        in_rootfs = os.path.join(config.rootfs, self._sandbox_directory.lstrip("/"))
        if config.task_info is not None:
            info.environment["MESOS_SANDBOX"] = config.sandbox
            info.mounts = [
                Mount(config.rootfs, config.rootfs),
                Mount(config.sandbox, in_rootfs),
            ]
            return info
        info.rootfs = config.rootfs
        info.mounts = [Mount(config.sandbox, self._sandbox_directory)]
        info.environment["MESOS_SANDBOX"] = self._sandbox_directory
        info.working_directory = self._sandbox_directory
        return info


def _give_to(sandbox: str, user: str, rootfs: str, container_id: ContainerID) -> None:
    """The sandbox belongs to the container's user, as the rootfs defines it."""
    try:
        owner = resolve_user(user, rootfs)
    except UserNotFound as exc:
        raise LinuxFilesystemError(f"Container {container_id}: {exc}") from None
    os.chown(sandbox, owner.uid, owner.gid)
