"""posix/mem: resident memory of a container's processes from /proc (no enforcement, as Mesos)."""

from __future__ import annotations

from typing import Any

from mesilla.containerizer.isolators.posix.base import PosixUsageIsolator
from mesilla.containerizer.isolators.posix.procfs import rss_bytes
from mesilla.v1.mesos import ContainerID


class PosixMemIsolator(PosixUsageIsolator):
    name = "posix/mem"

    async def usage(self, container_id: ContainerID) -> dict[str, Any]:
        pid = self._pids.get(container_id)
        if pid is None:
            return {}
        return {"mem_rss_bytes": rss_bytes(pid)}
