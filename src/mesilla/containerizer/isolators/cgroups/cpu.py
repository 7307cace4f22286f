"""cgroups/cpu: CPU shares from `cpus`, and a CFS quota (Mesos `cgroups/cpu` subsystem).

Shares are `cpus * 1024` (at least 2). The CFS quota caps the container at
`limits["cpus"]` when the framework set one (infinity: no cap), otherwise at
its `cpus` request when `--cgroups_enable_cfs` is on; the period is 100 ms and
the quota at least 1 ms. On cgroup v2, shares become `cpu.weight` the way OCI
runtimes convert them, and the quota is `cpu.max`.
"""

from __future__ import annotations

import math
import os
from typing import Any

from mesilla.containerizer.isolators.cgroups.subsystem import (
    CgroupsIsolator,
    CgroupState,
    IsolatorConfigError,
    scalar,
)
from mesilla.v1.mesos import Resource

SHARES_PER_CPU = 1024
MIN_SHARES = 2
CFS_PERIOD_US = 100_000
MIN_CFS_QUOTA_US = 1_000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def shares_to_weight(shares: int) -> int:
    """cgroup v2 `cpu.weight` (1..10000) for v1 shares (2..262144), as runc and crun map it."""
    return 1 + ((shares - 2) * 9999) // 262142


class CgroupsCpuIsolator(CgroupsIsolator[tuple[int, int | None]]):
    name = "cgroups/cpu"
    controller = "cpu"

    def settings(
        self, resources: list[Resource], limits: dict[str, float]
    ) -> tuple[int, int | None] | None:
        """(shares, CFS quota in us or None for no cap); None without a `cpus` request."""
        requested = [r for r in resources if r.name == "cpus"]
        if not requested:
            return None
        cpus = scalar(requested, "cpus")
        limit = limits.get("cpus")
        if cpus < 0 or (limit is not None and (math.isnan(limit) or limit < cpus)):
            raise IsolatorConfigError(
                f"Invalid cpus request {cpus} / limit {limit}: the request must be >= 0 and "
                "the limit (if set) not below the request"
            )
        shares = max(MIN_SHARES, int(cpus * SHARES_PER_CPU))
        if limit is not None:
            cap = None if math.isinf(limit) else limit
        else:
            cap = cpus if self.flags.cgroups_enable_cfs else None
        quota = None if cap is None else max(MIN_CFS_QUOTA_US, int(cap * CFS_PERIOD_US))
        return shares, quota

    def fragment(self, settings: tuple[int, int | None]) -> dict[str, Any]:
        shares, quota = settings
        cpu: dict[str, Any] = {"shares": shares}
        if quota is not None:
            cpu.update(quota=quota, period=CFS_PERIOD_US)
        return {"cpu": cpu}

    def write(self, state: CgroupState, settings: tuple[int, int | None]) -> None:
        shares, quota = settings
        cgroup = state.cgroup
        if cgroup.version == 1:
            cgroup.write("cpu", "cpu.shares", shares)
            cgroup.write("cpu", "cpu.cfs_period_us", CFS_PERIOD_US)
            cgroup.write("cpu", "cpu.cfs_quota_us", -1 if quota is None else quota)
        else:
            cgroup.write("cpu", "cpu.weight", shares_to_weight(shares))
            cgroup.write(
                "cpu", "cpu.max", f"{'max' if quota is None else quota} {CFS_PERIOD_US}"
            )

    def statistics(self, state: CgroupState) -> dict[str, Any]:
        cgroup = state.cgroup
        stat = cgroup.read_keyed("cpu", "cpu.stat")
        if cgroup.version == 1:
            ticks = cgroup.read_keyed("cpuacct", "cpuacct.stat")
            usage = {
                "cpus_user_time_secs": ticks.get("user", 0) / CLOCK_TICKS,
                "cpus_system_time_secs": ticks.get("system", 0) / CLOCK_TICKS,
                "cpus_throttled_time_secs": stat.get("throttled_time", 0) / 1e9,
            }
        else:
            usage = {
                "cpus_user_time_secs": stat.get("user_usec", 0) / 1e6,
                "cpus_system_time_secs": stat.get("system_usec", 0) / 1e6,
                "cpus_throttled_time_secs": stat.get("throttled_usec", 0) / 1e6,
            }
        usage["cpus_nr_periods"] = stat.get("nr_periods", 0)
        usage["cpus_nr_throttled"] = stat.get("nr_throttled", 0)
        if any(r.name == "cpus" for r in state.resources):
            limit = state.limits.get("cpus", state.scalar("cpus"))
            if not math.isinf(
                limit
            ):  # JSON has no infinity; an unset field means no cap
                usage["cpus_limit"] = limit
        return usage
