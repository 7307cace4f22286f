"""namespaces/pid: each container in its own pid namespace, or sharing one.

As Mesos's isolator: a top-level container gets a new pid namespace (with a
fresh /proc, which the linux launcher always mounts) unless its
`LinuxInfo.share_pid_namespace` asks to share the agent's; a nested container
shares its parent's only when asked (the launcher joins it), else gets its own.
"""

from __future__ import annotations

import os
from typing import Any

from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import ContainerID


class PidNamespaceError(Exception):
    """The container asks for a pid namespace this agent does not allow."""


class PidNamespaceIsolator(Isolator):
    name = "namespaces/pid"
    supports_nesting = True
    supports_standalone = True

    def __init__(self, flags: Any = None) -> None:
        self._disallow_agent = bool(
            flags is not None and flags.get("disallow_sharing_agent_pid_namespace")
        )

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        linux = config.container_info.linux_info if config.container_info else None
        share = bool(linux is not None and linux.share_pid_namespace)
        if not share:
            return ContainerLaunchInfo(clone_namespaces={"pid"})
        if container_id.parent is not None:
            return None  # the launcher joins the parent's
        if self._disallow_agent:
            raise PidNamespaceError(
                f"Container {container_id} asks to share the agent's pid namespace, which "
                "--disallow_sharing_agent_pid_namespace forbids: unset share_pid_namespace"
            )
        return ContainerLaunchInfo(enter_namespaces={"pid": f"/proc/{os.getpid()}/ns/pid"})
