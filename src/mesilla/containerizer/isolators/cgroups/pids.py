"""cgroups/pids: a cap on the number of tasks (processes and threads) of a container.

Mesos has no pids resource, so the cap comes from the agent flag
`--cgroups_max_pids` (unset: no cap, only accounting), the same for every
container with its own cgroups. A fork beyond the cap fails with EAGAIN inside
the container; nothing is killed, so there is no limitation to report.
"""

from __future__ import annotations

from typing import Any

from mesilla.containerizer.cgroups import Hierarchy
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolators.cgroups.subsystem import (
    CgroupsIsolator,
    CgroupState,
    IsolatorConfigError,
)
from mesilla.v1.mesos import Resource


class CgroupsPidsIsolator(CgroupsIsolator[int | str]):
    name = "cgroups/pids"
    controller = "pids"

    def __init__(self, flags: ContainerizerFlags, hierarchy: Hierarchy | None = None) -> None:
        super().__init__(flags, hierarchy)
        maximum = flags.cgroups_max_pids
        if maximum is not None and maximum < 1:
            raise IsolatorConfigError(
                f"--cgroups_max_pids={maximum} must be at least 1 (or unset)"
            )
        self.max_pids: int | None = maximum

    def settings(self, resources: list[Resource], limits: dict[str, float]) -> int | str:
        """pids.max: the agent's --cgroups_max_pids, else "max" (no limit, but written still)."""
        return "max" if self.max_pids is None else self.max_pids

    def fragment(self, settings: int | str) -> dict[str, Any]:
        return {} if isinstance(settings, str) else {"pids": {"limit": settings}}

    def write(self, state: CgroupState, settings: int | str) -> None:
        state.cgroup.write("pids", "pids.max", settings)

    def statistics(self, state: CgroupState) -> dict[str, Any]:
        cgroup = state.cgroup
        return {
            "processes": len(cgroup.processes("pids")),
            "threads": int(cgroup.read("pids", "pids.current")),
        }
