"""posix/mem: resident memory of a container's processes from /proc (no enforcement, as Mesos)."""

from __future__ import annotations

from typing import Any

from mesilla.containerizer.isolators.posix.base import PosixUsageIsolator
from mesilla.containerizer.isolators.posix.procfs import rss_bytes


class PosixMemIsolator(PosixUsageIsolator):
    name = "posix/mem"

    def sample(self, pid: int) -> dict[str, Any]:
        return {"mem_rss_bytes": rss_bytes(pid)}
