"""namespaces/ipc: IPC namespace and /dev/shm per container, as Mesos's `ipc_mode`.

* unset: a top-level container gets its own IPC namespace and /dev/shm; a
  nested one shares its parent's.
* `PRIVATE`: its own IPC namespace and /dev/shm, sized by `shm_size` (MB).
* `SHARE_PARENT`: a top-level container shares the agent's IPC namespace and
  /dev/shm, a nested one its parent's; `shm_size` makes no sense then.

The launcher derives /dev/shm from the namespace choice (private tmpfs, the
parent's, or the host's), so this isolator only decides the namespace.
"""

from __future__ import annotations

import os
from typing import Any

from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import ContainerID

PRIVATE = "PRIVATE"
SHARE_PARENT = "SHARE_PARENT"


class IpcNamespaceError(ValueError):
    """`LinuxInfo.ipc_mode`/`shm_size` are invalid or not allowed on this agent."""


class IpcNamespaceIsolator(Isolator):
    name = "namespaces/ipc"
    supports_nesting = True
    supports_standalone = True

    def __init__(self, flags: Any = None) -> None:
        self._disallow_agent = bool(
            flags is not None and flags.get("disallow_sharing_agent_ipc_namespace")
        )

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        linux = config.container_info.linux_info if config.container_info else None
        mode = linux.ipc_mode if linux is not None else None
        shm_size = linux.shm_size if linux is not None else None
        if mode not in (None, PRIVATE, SHARE_PARENT):
            raise IpcNamespaceError(
                f"Container {container_id} has unknown ipc_mode '{mode}': use PRIVATE or "
                "SHARE_PARENT"
            )
        if shm_size is not None and mode != PRIVATE:
            raise IpcNamespaceError(
                f"Container {container_id} sets shm_size without ipc_mode PRIVATE: only a "
                "private /dev/shm can be sized"
            )
        private = mode == PRIVATE or (mode is None and container_id.parent is None)
        if private:
            return ContainerLaunchInfo(clone_namespaces={"ipc"})
        if container_id.parent is not None:
            return None  # the launcher joins the parent's
        if self._disallow_agent:
            raise IpcNamespaceError(
                f"Container {container_id} asks to share the agent's IPC namespace, which "
                "--disallow_sharing_agent_ipc_namespace forbids: use ipc_mode PRIVATE"
            )
        return ContainerLaunchInfo(enter_namespaces={"ipc": f"/proc/{os.getpid()}/ns/ipc"})
