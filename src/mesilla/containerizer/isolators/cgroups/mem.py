"""cgroups/mem: memory limits from `mem`, and OOM kills as limitations (Mesos `cgroups/mem`).

The soft limit is the `mem` request; the hard limit is `limits["mem"]` when set
(infinity: none), else the request, never below 32 MB. As in Mesos, an update
never lowers the hard limit of a running container (the kernel would have to
reclaim at once, or refuse), it only raises it. When the kernel OOM-kills a
process of the container, `watch` reports REASON_CONTAINER_LIMITATION_MEMORY
and the containerizer destroys the container; the agent itself is untouched.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from mesilla.containerizer.cgroups import Cgroup, CgroupsError, Hierarchy, OomListener
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolators.cgroups.subsystem import (
    CgroupsIsolator,
    CgroupState,
    IsolatorConfigError,
    scalar,
)
from mesilla.containerizer.types import ContainerLimitation
from mesilla.v1.mesos import ContainerID, Reason, Resource, Scalar, ValueType

MB = 1024 * 1024
MIN_MEMORY = 32 * MB
# A v1 limit at or above this is the kernel's "unlimited" (page-rounded LONG_MAX).
UNLIMITED_V1 = 1 << 62

_V1_STATISTICS: dict[str, tuple[str, ...]] = {
    "mem_rss_bytes": ("total_rss",),
    "mem_cache_bytes": ("total_cache",),
    "mem_mapped_file_bytes": ("total_mapped_file",),
    "mem_swap_bytes": ("total_swap",),
    "mem_unevictable_bytes": ("total_unevictable",),
    "mem_anon_bytes": ("total_active_anon", "total_inactive_anon"),
    "mem_file_bytes": ("total_active_file", "total_inactive_file"),
}
_V2_STATISTICS: dict[str, tuple[str, ...]] = {
    "mem_rss_bytes": ("anon",),
    "mem_cache_bytes": ("file",),
    "mem_mapped_file_bytes": ("file_mapped",),
    "mem_unevictable_bytes": ("unevictable",),
    "mem_anon_bytes": ("anon",),
    "mem_file_bytes": ("file",),
}


def _mem_resource(megabytes: float) -> Resource:
    return Resource(name="mem", type=ValueType.SCALAR, scalar=Scalar(value=megabytes))


class CgroupsMemIsolator(CgroupsIsolator[tuple[int, int | None]]):
    name = "cgroups/mem"
    controller = "memory"

    def __init__(self, flags: ContainerizerFlags, hierarchy: Hierarchy | None = None) -> None:
        super().__init__(flags, hierarchy)
        self._listeners: dict[ContainerID, OomListener] = {}
        self._listening: dict[ContainerID, asyncio.Event] = {}

    def settings(
        self, resources: list[Resource], limits: dict[str, float]
    ) -> tuple[int, int | None] | None:
        """(soft limit, hard limit or None for unlimited) in bytes; None without `mem`."""
        if not any(r.name == "mem" for r in resources):
            return None
        request = scalar(resources, "mem")
        limit = limits.get("mem")
        if limit is not None and (math.isnan(limit) or limit < request):
            raise IsolatorConfigError(
                f"Invalid mem limit {limit} MB: it must not be below the request of {request} MB"
            )
        soft = max(MIN_MEMORY, int(request * MB))
        if limit is None:
            return soft, soft
        return soft, None if math.isinf(limit) else max(MIN_MEMORY, int(limit * MB))

    def fragment(self, settings: tuple[int, int | None]) -> dict[str, Any]:
        soft, hard = settings
        return {"memory": {"limit": -1 if hard is None else hard, "reservation": soft}}

    def write(self, state: CgroupState, settings: tuple[int, int | None]) -> None:
        soft, hard = settings
        cgroup = state.cgroup
        current = _hard_limit(cgroup)
        lowering = state.applied and (
            hard is not None and (current is None or hard < current)
        )
        if cgroup.version == 1:
            cgroup.write("memory", "memory.soft_limit_in_bytes", soft)
            if not lowering:
                cgroup.write(
                    "memory", "memory.limit_in_bytes", -1 if hard is None else hard
                )
        else:
            cgroup.write("memory", "memory.low", soft)
            if not lowering:
                cgroup.write("memory", "memory.max", "max" if hard is None else hard)

    def statistics(self, state: CgroupState) -> dict[str, Any]:
        cgroup = state.cgroup
        if cgroup.version == 1:
            stat = cgroup.read_keyed("memory", "memory.stat")
            usage = {
                "mem_total_bytes": int(cgroup.read("memory", "memory.usage_in_bytes"))
            }
            fields = _V1_STATISTICS
            soft = int(cgroup.read("memory", "memory.soft_limit_in_bytes"))
        else:
            stat = cgroup.read_keyed("memory", "memory.stat")
            usage = {"mem_total_bytes": int(cgroup.read("memory", "memory.current"))}
            fields = _V2_STATISTICS
            low = cgroup.read("memory", "memory.low").strip()
            soft = UNLIMITED_V1 if low == "max" else int(low)
        for name, keys in fields.items():
            if any(k in stat for k in keys):
                usage[name] = sum(stat.get(k, 0) for k in keys)
        hard = _hard_limit(cgroup)
        if hard is not None:
            usage["mem_limit_bytes"] = hard
        if soft < UNLIMITED_V1:
            usage["mem_soft_limit_bytes"] = soft
        return usage

    def started(self, container_id: ContainerID, state: CgroupState) -> None:
        if container_id not in self._listeners:
            self._listeners[container_id] = OomListener(state.cgroup)
        self._listening.setdefault(container_id, asyncio.Event()).set()

    def forget(self, container_id: ContainerID) -> None:
        listener = self._listeners.pop(container_id, None)
        if listener is not None:
            listener.close()
        self._listening.pop(container_id, None)

    async def watch(self, container_id: ContainerID) -> ContainerLimitation:
        # Only containers with their own cgroup can hit a limit; wait for isolate().
        await self._listening.setdefault(container_id, asyncio.Event()).wait()
        listener = self._listeners[container_id]
        await listener.wait()
        return self._limitation(container_id, listener.cgroup)

    def _limitation(
        self, container_id: ContainerID, cgroup: Cgroup
    ) -> ContainerLimitation:
        state = self.containers.get(container_id)
        hard = _hard_limit(cgroup)
        peak_file = (
            "memory.max_usage_in_bytes" if cgroup.version == 1 else "memory.peak"
        )
        try:
            peak = f"{int(cgroup.read('memory', peak_file)) // MB}MB"
        except CgroupsError:  # v2 kernels before 5.19 have no memory.peak
            peak = "unknown"
        try:
            statistics = cgroup.read("memory", "memory.stat")
        except CgroupsError:
            statistics = ""
        requested = f"{hard // MB}MB" if hard is not None else "unlimited"
        megabytes = (
            hard / MB if hard is not None else (state.scalar("mem") if state else 0.0)
        )
        return ContainerLimitation(
            reason=Reason.REASON_CONTAINER_LIMITATION_MEMORY,
            message=(
                f"Memory limit exceeded: Requested: {requested} Maximum Used: {peak}\n\n"
                f"MEMORY STATISTICS: \n{statistics}"
            ),
            resources=[_mem_resource(megabytes)],
        )


def _hard_limit(cgroup: Cgroup) -> int | None:
    """The hard limit in bytes, None when unlimited."""
    if cgroup.version == 1:
        value = int(cgroup.read("memory", "memory.limit_in_bytes"))
        return None if value >= UNLIMITED_V1 else value
    text = cgroup.read("memory", "memory.max").strip()
    return None if text == "max" else int(text)
