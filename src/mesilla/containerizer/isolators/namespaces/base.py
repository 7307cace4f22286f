"""What the namespace isolators share: a container gets its own namespace or shares one.

A nested container that shares gets its parent's (the launcher joins it); a
top-level one gets the agent's, unless `--disallow_sharing_agent_<ns>_namespace`
forbids it.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import ContainerID, LinuxInfo


class NamespaceSharingError(Exception):
    """The container asks to share the agent's namespace, which this agent forbids."""


class NamespaceIsolator(Isolator):
    """A subclass names its `namespace` and its `own_namespace_hint`, and decides
    `wants_own`; it is the isolator `namespaces/<namespace>`."""

    supports_nesting = True
    namespace: ClassVar[str]  # as in /proc/<pid>/ns/ and the flags
    # How a container asks for its own namespace instead, for the refusal's message.
    own_namespace_hint: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = f"namespaces/{cls.namespace}"

    def __init__(self, flags: ContainerizerFlags | None = None) -> None:
        # --disallow_sharing_agent_ipc_namespace, ..._pid_namespace: typed fields of their own.
        self._disallow_agent = flags is not None and bool(
            getattr(flags, f"disallow_sharing_agent_{self.namespace}_namespace")
        )

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        linux = config.info.linux_info
        return self.own() if self.wants_own(container_id, linux) else self.shared(container_id)

    def wants_own(self, container_id: ContainerID, linux: LinuxInfo | None) -> bool:
        """Whether the container gets a namespace of its own, else it shares one; raises
        an error of its own for what it asks that cannot be."""
        raise NotImplementedError

    def own(self) -> ContainerLaunchInfo:
        return ContainerLaunchInfo(clone_namespaces={self.namespace})

    def shared(self, container_id: ContainerID) -> ContainerLaunchInfo | None:
        if container_id.parent is not None:
            return None  # the launcher joins the parent's
        if self._disallow_agent:
            raise NamespaceSharingError(
                f"Container {container_id} asks to share the agent's {self.namespace} namespace, "
                f"which --disallow_sharing_agent_{self.namespace}_namespace forbids: "
                f"{self.own_namespace_hint}"
            )
        return ContainerLaunchInfo(
            enter_namespaces={self.namespace: f"/proc/{os.getpid()}/ns/{self.namespace}"}
        )
