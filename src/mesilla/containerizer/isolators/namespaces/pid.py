"""namespaces/pid: each container in its own pid namespace, or sharing one.

As Mesos's isolator: a top-level container gets a new pid namespace (with a
fresh /proc, which the linux launcher always mounts) unless its
`LinuxInfo.share_pid_namespace` asks to share the agent's; a nested container
shares its parent's only when asked (the launcher joins it), else gets its own.
"""

from __future__ import annotations

from mesilla.containerizer.isolators.namespaces.base import NamespaceIsolator
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import ContainerID


class PidNamespaceError(Exception):
    """The container asks for a pid namespace this agent does not allow."""


class PidNamespaceIsolator(NamespaceIsolator):
    name = "namespaces/pid"
    namespace = "pid"
    label = "pid"
    error = PidNamespaceError
    own_namespace_hint = "unset share_pid_namespace"

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        linux = config.container_info.linux_info if config.container_info else None
        share = bool(linux is not None and linux.share_pid_namespace)
        return self.shared(container_id) if share else self.own()
