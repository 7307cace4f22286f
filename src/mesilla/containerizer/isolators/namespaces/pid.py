"""namespaces/pid: each container in its own pid namespace, or sharing one.

As Mesos's isolator: a top-level container gets a new pid namespace (with a
fresh /proc, which the linux launcher always mounts) unless its
`LinuxInfo.share_pid_namespace` asks to share the agent's; a nested container
shares its parent's only when asked (the launcher joins it), else gets its own.
"""

from __future__ import annotations

from mesilla.containerizer.isolators.namespaces.base import NamespaceIsolator
from mesilla.v1.mesos import ContainerID, LinuxInfo


class PidNamespaceIsolator(NamespaceIsolator):
    namespace = "pid"
    own_namespace_hint = "unset share_pid_namespace"

    def wants_own(self, container_id: ContainerID, linux: LinuxInfo | None) -> bool:
        return not (linux is not None and linux.share_pid_namespace)
