"""What every cgroups isolator shares: per-container cgroups, their lifecycle and recovery.

Each isolator (Mesos calls the per-controller part a subsystem) contributes its
limits twice: as an OCI `linux.resources` fragment in `prepare`, so a launcher
on an OCI runtime creates the cgroup already limited, and by writing the
control files in `isolate`, which covers launchers that do not create cgroups
(posix) and v2, where the runtime limits only the `leaf` child. A process not
yet in the container's cgroup is moved there in `isolate`.

A nested container that shares its parent's cgroups has no state here: no
limits, no usage of its own (Mesos's behaviour).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from mesilla.common.resources import Resources
from mesilla.containerizer.cgroups import (
    Cgroup,
    Hierarchy,
    own_cgroup_path,
    shares_cgroups,
)
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.types import (
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerRuntimeState,
)
from mesilla.v1.mesos import ContainerID, Resource

S = TypeVar("S")  # a subsystem's settings


class IsolatorConfigError(ValueError):
    """A container asks for something an isolator cannot give; the message says what to change."""


def scalar(resources: Iterable[Resource], name: str) -> float:
    """The total of the `name` scalar resources (exact arithmetic, as the allocator)."""
    return Resources.from_list(r for r in resources if r.name == name).scalar(name)


@dataclass
class CgroupState:
    cgroup: Cgroup
    resources: list[Resource] = field(default_factory=list)
    limits: dict[str, float] = field(default_factory=dict)
    applied: bool = False  # whether the control files were written once

    def scalar(self, name: str) -> float:
        return scalar(self.resources, name)


class CgroupsIsolator(Isolator, Generic[S]):
    controller: str = ""  # the v2 name (`cpu`, `memory`, `pids`)
    supports_nesting = True

    def __init__(self, flags: ContainerizerFlags, hierarchy: Hierarchy | None = None) -> None:
        self.flags = flags
        self.hierarchy = hierarchy or Hierarchy.detect(flags.cgroups_hierarchy)
        if not self.hierarchy.has(self.controller):
            raise IsolatorConfigError(
                f"The {self.name} isolator needs the '{self.controller}' cgroup controller, which "
                f"is not mounted under {self.hierarchy.root}: enable it or remove {self.name} "
                "from --isolation"
            )
        self.containers: dict[ContainerID, CgroupState] = {}

    # What each subsystem defines: its settings, computed (and checked) once from the
    # resources and limits, then given as OCI configuration or written to control files.

    def settings(self, resources: list[Resource], limits: dict[str, float]) -> S | None:
        """What these resources and limits set (IsolatorConfigError where invalid); None: nothing."""
        raise NotImplementedError

    def fragment(self, settings: S) -> dict[str, Any]:
        """The OCI `linux.resources` fragment of `settings`."""
        raise NotImplementedError

    def write(self, state: CgroupState, settings: S) -> None:
        """Writes the control files of `settings` into `state.cgroup`."""
        raise NotImplementedError

    def launch_resources(
        self, resources: list[Resource], limits: dict[str, float]
    ) -> dict[str, Any]:
        """The OCI `linux.resources` fragment for these resources and limits."""
        settings = self.settings(resources, limits)
        return {} if settings is None else self.fragment(settings)

    def apply(self, state: CgroupState) -> None:
        """Writes the control files for `state.resources` and `state.limits`."""
        settings = self.settings(state.resources, state.limits)
        if settings is not None:
            self.write(state, settings)

    def statistics(self, state: CgroupState) -> dict[str, Any]:
        raise NotImplementedError

    def started(self, container_id: ContainerID, state: CgroupState) -> None:
        """Hook once the container's cgroup holds its process (and after recovery)."""

    def forget(self, container_id: ContainerID) -> None:
        """Hook when the isolator drops a container."""

    # The Isolator lifecycle.

    def _state(
        self, container_id: ContainerID, config: ContainerConfig | None
    ) -> CgroupState | None:
        if container_id.parent is not None and shares_cgroups(
            config.container_info if config else None
        ):
            return None
        cgroup = self.hierarchy.cgroup(own_cgroup_path(self.flags, container_id))
        if config is None:
            return CgroupState(cgroup)
        return CgroupState(cgroup, list(config.resources), dict(config.limits))

    async def recover(
        self, states: list[ContainerRuntimeState], orphans: set[ContainerID]
    ) -> None:
        for runtime in states:
            state = self._state(runtime.container_id, runtime.config)
            if state is not None and state.cgroup.exists(self.controller):
                state.applied = True  # limits were written before the agent restarted
                self.containers[runtime.container_id] = state
                self.started(runtime.container_id, state)

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        state = self._state(container_id, config)
        if state is None:
            return None
        fragment = self.launch_resources(state.resources, state.limits)
        self.containers[container_id] = state
        return ContainerLaunchInfo(cgroup_resources=fragment)

    async def isolate(self, container_id: ContainerID, pid: int) -> None:
        state = self.containers.get(container_id)
        if state is None:
            return
        state.cgroup.create([self.controller])
        self.apply(state)
        state.applied = True
        if not state.cgroup.contains(self.controller, pid):
            state.cgroup.add_process(self.controller, pid)
        self.started(container_id, state)

    async def update(
        self, container_id: ContainerID, resources: list[Any], limits: dict[str, float]
    ) -> None:
        state = self.containers.get(container_id)
        if state is None:
            return
        self.settings(resources, limits)  # checks them before anything is written
        state.resources, state.limits = list(resources), dict(limits)
        self.apply(state)

    async def usage(self, container_id: ContainerID) -> dict[str, Any]:
        state = self.containers.get(container_id)
        if state is None or not state.cgroup.exists(self.controller):
            return {}
        return self.statistics(state)

    async def cleanup(self, container_id: ContainerID) -> None:
        self.containers.pop(container_id, None)
        self.forget(container_id)
        # Also for containers never seen (orphans): their directory is theirs alone.
        cgroup = self.hierarchy.cgroup(own_cgroup_path(self.flags, container_id))
        await cgroup.remove([self.controller])
