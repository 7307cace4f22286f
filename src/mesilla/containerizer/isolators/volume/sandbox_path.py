"""volume/sandbox_path: directories of a sandbox mounted into a container (SELF and PARENT).

A SANDBOX_PATH volume names a relative `path` in the container's own sandbox
(SELF) or in its parent's (PARENT, only for nested containers: this is how
tasks of a pod share a directory of the executor's sandbox). The directory is
created if missing (owned by the container's user, if one is given) and
bind-mounted at `container_path`. Paths that climb out with `..` are refused.
"""

from __future__ import annotations

import os
import pwd

from mesilla.common import files
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.isolators.volume.mount_point import (
    VolumeError,
    bind_mount,
    mount_target,
    relative_inside,
)
from mesilla.containerizer.types import (
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerRuntimeState,
    Mount,
)
from mesilla.v1.mesos import ContainerID


class VolumeSandboxPathIsolator(Isolator):
    name = "volume/sandbox_path"
    supports_nesting = True

    def __init__(self, flags: ContainerizerFlags) -> None:
        self.flags = flags
        self.sandboxes: dict[ContainerID, str] = {}

    async def recover(
        self, states: list[ContainerRuntimeState], orphans: set[ContainerID]
    ) -> None:
        for state in states:
            if state.sandbox is not None:
                self.sandboxes[state.container_id] = state.sandbox

    def _parent_sandbox(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> str:
        assert container_id.parent is not None
        known = self.sandboxes.get(container_id.parent)
        if known is not None:
            return known
        # The agent puts a nested sandbox at <parent sandbox>/containers/<id>.
        return os.path.dirname(os.path.dirname(os.path.normpath(config.sandbox)))

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        self.sandboxes[container_id] = config.sandbox
        volumes = config.info.volumes
        mounts: list[Mount] = []
        for volume in volumes:
            if volume.source is None or volume.source.type != "SANDBOX_PATH":
                continue
            spec = volume.source.sandbox_path
            if spec is None:
                raise VolumeError(
                    f"SANDBOX_PATH volume for '{volume.container_path}' has no sandbox_path: "
                    "set source.sandbox_path {type, path}"
                )
            if spec.type == "SELF":
                base = config.sandbox
            elif spec.type == "PARENT":
                if container_id.parent is None:
                    raise VolumeError(
                        f"SANDBOX_PATH volume '{spec.path}' of type PARENT needs a nested container: "
                        f"{container_id.value} has no parent; use type SELF"
                    )
                base = self._parent_sandbox(container_id, config)
            else:
                raise VolumeError(
                    f"SANDBOX_PATH volume '{spec.path}' has unknown type '{spec.type}': use SELF or PARENT"
                )
            try:
                # Followed to the end: what is mounted must lie in the sandbox, whatever links it holds.
                source = files.inside(
                    base, relative_inside(spec.path, "SANDBOX_PATH path"), follow=True
                )
            except files.OutsideRoot:
                raise VolumeError(
                    f"SANDBOX_PATH volume '{spec.path}' leads outside its sandbox through a symlink"
                ) from None
            if not os.path.isdir(source):
                os.makedirs(source)
                if config.user is not None:
                    try:
                        user = pwd.getpwnam(config.user)
                    except KeyError:
                        raise VolumeError(
                            f"SANDBOX_PATH volume '{spec.path}': user '{config.user}' does not "
                            "exist on this agent"
                        ) from None
                    os.chown(source, user.pw_uid, user.pw_gid)
            target = mount_target(self.flags, config, volume.container_path, source)
            mounts.append(bind_mount(source, target, volume.mode))
        return ContainerLaunchInfo(mounts=mounts) if mounts else None

    async def cleanup(self, container_id: ContainerID) -> None:
        self.sandboxes.pop(container_id, None)
