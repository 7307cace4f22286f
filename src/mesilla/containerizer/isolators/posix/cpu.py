"""posix/cpu: CPU time of a container's processes from /proc (no enforcement, as Mesos)."""

from __future__ import annotations

from typing import Any

from mesilla.containerizer.isolators.posix.base import PosixUsageIsolator
from mesilla.containerizer.isolators.posix.procfs import cpu_times
from mesilla.v1.mesos import ContainerID


class PosixCpuIsolator(PosixUsageIsolator):
    name = "posix/cpu"

    async def usage(self, container_id: ContainerID) -> dict[str, Any]:
        pid = self._pids.get(container_id)
        if pid is None:
            return {}
        user, system = cpu_times(pid)
        return {"cpus_user_time_secs": user, "cpus_system_time_secs": system}
