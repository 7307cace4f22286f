"""The Launcher interface (Mesos `src/slave/containerizer/mesos/launcher.hpp`)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.types import ContainerRuntimeState, ForkRequest
from mesilla.v1.mesos import ContainerID


class Exiting(Protocol):
    """A launcher's record of a container: its first process's raw wait status, once known."""

    exited: asyncio.Future[int | None]


async def wait_exited(container: Exiting | None) -> int | None:
    """`Launcher.wait` of a launcher that keeps such records: None for a container it does
    not know. Shielded: a cancelled waiter leaves the status to the others."""
    return None if container is None else await asyncio.shield(container.exited)


class LaunchError(Exception):
    """The container could not be created; the message says which step and why."""


class Launcher:
    """Created with the agent's flags: `cls(flags)`, or `await cls.create(flags)` where defined."""

    name: str = ""

    def __init__(self, flags: ContainerizerFlags) -> None:
        pass

    @staticmethod
    def available(flags: ContainerizerFlags | None = None) -> bool:
        """Whether the launcher works on this host with these flags."""
        return True

    async def recover(self, states: list[ContainerRuntimeState]) -> set[ContainerID]:
        """Re-attaches to live containers; returns those it knows that `states` lacks (orphans)."""
        raise NotImplementedError

    async def fork(self, request: ForkRequest) -> int:
        """Creates the container with its first process held before exec; returns its host pid."""
        raise NotImplementedError

    async def start(self, container_id: ContainerID) -> None:
        """Lets the held process exec (after isolate and fetch)."""
        raise NotImplementedError

    async def wait(self, container_id: ContainerID) -> int | None:
        """The raw wait status of the container's first process, once it has ended."""
        raise NotImplementedError

    async def kill(self, container_id: ContainerID, signal: int) -> None:
        raise NotImplementedError

    async def destroy(self, container_id: ContainerID) -> None:
        """Kills every process of the container and releases what the launcher holds."""
        raise NotImplementedError

    def pid(self, container_id: ContainerID) -> int | None:
        raise NotImplementedError

    async def close(self) -> None:
        """Releases what the launcher runs for itself; its containers keep running."""
