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

from mesilla.containerizer.isolators.namespaces.base import NamespaceIsolator
from mesilla.v1.mesos import ContainerID, LinuxInfo

PRIVATE = "PRIVATE"
SHARE_PARENT = "SHARE_PARENT"


class IpcNamespaceError(ValueError):
    """`LinuxInfo.ipc_mode`/`shm_size` are invalid."""


class IpcNamespaceIsolator(NamespaceIsolator):
    namespace = "ipc"
    own_namespace_hint = "use ipc_mode PRIVATE"

    def wants_own(self, container_id: ContainerID, linux: LinuxInfo | None) -> bool:
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
        return mode == PRIVATE or (mode is None and container_id.parent is None)
