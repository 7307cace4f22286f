"""posix/cpu: CPU time of a container's processes from /proc (no enforcement, as Mesos)."""

from __future__ import annotations

from typing import Any

from mesilla.containerizer.isolators.posix.base import PosixUsageIsolator
from mesilla.containerizer.isolators.posix.procfs import cpu_times


class PosixCpuIsolator(PosixUsageIsolator):
    name = "posix/cpu"

    def sample(self, pid: int) -> dict[str, Any]:
        user, system = cpu_times(pid)
        return {"cpus_user_time_secs": user, "cpus_system_time_secs": system}
