"""What the usage-only posix isolators share: the pid of each container they watch."""

from __future__ import annotations

from typing import Any

from mesilla.common.blocking import in_thread
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.types import ContainerRuntimeState
from mesilla.v1.mesos import ContainerID


class PosixUsageIsolator(Isolator):
    """Remembers each container's first pid (its session id); enforces nothing."""

    supports_nesting = True

    def __init__(self, flags: ContainerizerFlags | None = None) -> None:
        self._pids: dict[ContainerID, int] = {}

    async def recover(self, states: list[ContainerRuntimeState], orphans: set[ContainerID]) -> None:
        for state in states:
            if state.pid is not None:
                self._pids[state.container_id] = state.pid

    async def isolate(self, container_id: ContainerID, pid: int) -> None:
        self._pids[container_id] = pid

    async def cleanup(self, container_id: ContainerID) -> None:
        self._pids.pop(container_id, None)

    async def usage(self, container_id: ContainerID) -> dict[str, Any]:
        pid = self._pids.get(container_id)
        # Reading /proc blocks: off the loop.
        return {} if pid is None else await in_thread(self.sample, pid)

    def sample(self, pid: int) -> dict[str, Any]:
        """The statistics of the session `pid` leads, from /proc."""
        return {}
