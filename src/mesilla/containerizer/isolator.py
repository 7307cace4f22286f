"""The Isolator interface (Mesos `include/mesos/slave/isolator.hpp`).

Every hook has a do-nothing default, so an isolator overrides only what it
needs. `prepare` runs in `--isolation` order, `cleanup` in reverse; `cleanup`
may be called for a container the isolator never saw and must not fail then.
`close` (Mesilla's, for the containerizer's `close`) ends background work only:
the containers live on for a restarted agent to recover.
"""

from __future__ import annotations

import asyncio
from typing import Any, Generic, TypeVar

from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.types import (
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerLimitation,
    ContainerRuntimeState,
)
from mesilla.v1.mesos import ContainerID

Section = TypeVar("Section")


class Isolator:
    name: str = ""
    supports_nesting: bool = False
    # DEBUG containers (checks, exec sessions) live in their parent's resources,
    # namespaces and filesystem; only an isolator that shapes the process itself
    # (not what it runs in) applies to them.
    supports_debug: bool = False

    def __init__(self, flags: ContainerizerFlags | None = None) -> None:
        """Every isolator is made from the agent's flags (`cls(flags)`); these hooks need none."""

    async def recover(
        self, states: list[ContainerRuntimeState], orphans: set[ContainerID]
    ) -> None:
        return None

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        return None

    async def isolate(self, container_id: ContainerID, pid: int) -> None:
        return None

    async def watch(self, container_id: ContainerID) -> ContainerLimitation:
        """Resolves when the container hits a limit; by default never."""
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def update(
        self, container_id: ContainerID, resources: list[Any], limits: dict[str, float]
    ) -> None:
        return None

    async def usage(self, container_id: ContainerID) -> dict[str, Any]:
        """ResourceStatistics fields (`mem_rss_bytes`, `cpus_user_time_secs`, ...)."""
        return {}

    async def status(self, container_id: ContainerID) -> dict[str, Any]:
        """ContainerStatus fields this isolator knows (`cgroup_info`, `network_infos`)."""
        return {}

    async def cleanup(self, container_id: ContainerID) -> None:
        return None

    async def close(self) -> None:
        """Stops the isolator's background work; its containers keep running."""


class SectionIsolator(Isolator, Generic[Section]):
    """An isolator whose `prepare` reads one optional section of the container's config
    (`section`), and has nothing to do for a container without it."""

    def section(self, config: ContainerConfig) -> Section | None:
        raise NotImplementedError

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        section = self.section(config)
        return None if section is None else self.prepare_section(container_id, section)

    def prepare_section(
        self, container_id: ContainerID, section: Section
    ) -> ContainerLaunchInfo | None:
        raise NotImplementedError
