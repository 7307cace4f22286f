"""What the agent asks of a containerizer (Mesos's `src/slave/containerizer/containerizer.hpp`).

`mesilla.containerizer.containerizer.Containerizer` (Mesos's
MesosContainerizer) is the implementation; the agent depends on this
interface only, and the agent's tests put smaller fakes behind it. Results
are typed: `status` is the v1 `ContainerStatus`, `usage` a
`ResourceStatistics`. Failures are `mesilla.common.errors.ContainerError`s:
an unknown container is `UnknownContainer`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Protocol

from mesilla.containerizer.types import ContainerConfig, ContainerState, ContainerTermination
from mesilla.v1.mesos import ContainerID, ContainerStatus, Image, Resource


class LaunchResult(enum.Enum):
    SUCCESS = "SUCCESS"
    ALREADY_LAUNCHED = "ALREADY_LAUNCHED"
    NOT_SUPPORTED = "NOT_SUPPORTED"


@dataclass(frozen=True)
class ResourceStatistics:
    """A container's usage, by Mesos's `ResourceStatistics` field names (those Mesilla
    measures); None is "not measured", and is left out of the JSON."""

    timestamp: float
    processes: int | None = None
    threads: int | None = None
    cpus_user_time_secs: float | None = None
    cpus_system_time_secs: float | None = None
    cpus_limit: float | None = None
    cpus_nr_periods: int | None = None
    cpus_nr_throttled: int | None = None
    cpus_throttled_time_secs: float | None = None
    mem_total_bytes: int | None = None
    mem_limit_bytes: int | None = None
    mem_soft_limit_bytes: int | None = None
    mem_file_bytes: int | None = None
    mem_anon_bytes: int | None = None
    mem_cache_bytes: int | None = None
    mem_rss_bytes: int | None = None
    mem_mapped_file_bytes: int | None = None
    mem_swap_bytes: int | None = None
    mem_unevictable_bytes: int | None = None
    disk_limit_bytes: int | None = None
    disk_used_bytes: int | None = None

    @classmethod
    def from_fields(cls, values: dict[str, float]) -> ResourceStatistics:
        """From isolators' `usage`, a dict by the same names (others are not Mesos's: dropped)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})  # type: ignore[arg-type]

    def to_json(self) -> dict[str, float]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


class Containerizer(Protocol):
    """The containerizer as the agent sees it."""

    async def recover(self, checkpointed: set[ContainerID]) -> None: ...

    async def launch(self, container_id: ContainerID, config: ContainerConfig) -> LaunchResult: ...

    async def wait(self, container_id: ContainerID) -> ContainerTermination | None: ...

    async def kill(self, container_id: ContainerID, signal_number: int) -> bool: ...

    async def destroy(self, container_id: ContainerID) -> ContainerTermination | None: ...

    async def update(
        self, container_id: ContainerID, resources: list[Resource], limits: dict[str, float]
    ) -> None: ...

    async def usage(self, container_id: ContainerID) -> ResourceStatistics: ...

    async def status(self, container_id: ContainerID) -> ContainerStatus: ...

    def containers(self) -> list[ContainerID]: ...

    def state(self, container_id: ContainerID) -> ContainerState | None: ...

    def config(self, container_id: ContainerID) -> ContainerConfig | None: ...

    async def remove(self, container_id: ContainerID) -> None: ...

    async def prune_images(self, excluded: list[Image]) -> None: ...
