"""disk/du: measures each sandbox with `du` and, optionally, enforces the `disk` quota.

Every `--container_disk_watch_interval` the sandbox of each top-level container
is measured with `du -k -s` at the lowest CPU priority (Mesos's disk/du). The
result is reported as `disk_used_bytes` next to `disk_limit_bytes` (the `disk`
resources); with `--enforce_container_disk_quota`, a container over its quota
is reported with REASON_CONTAINER_LIMITATION_DISK and the containerizer
destroys it. Nested containers' sandboxes lie inside their parent's, so they
are measured as part of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from mesilla.common.resources import Resources
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.types import (
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerLimitation,
    ContainerRuntimeState,
)
from mesilla.v1.mesos import ContainerID, Reason, Resource, Scalar, ValueType

log = logging.getLogger(__name__)

MB = 1024 * 1024


def disk_quota(resources: list[Resource]) -> int | None:
    """The sandbox quota in bytes: the `disk` resources that are not volumes (None: no quota)."""
    sandbox = [
        r
        for r in resources
        if r.name == "disk" and not (r.disk or {}).get("persistence")
    ]
    if not sandbox:
        return None
    return int(Resources.from_list(sandbox).scalar("disk") * MB)


async def measure(path: str) -> int:
    """Bytes used under `path`, as `du -k -s` counts them (run at nice 19)."""
    process = await asyncio.create_subprocess_exec(
        "nice",
        "-n",
        "19",
        "du",
        "-k",
        "-s",
        path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await process.communicate()
    except asyncio.CancelledError:
        # Do not leave du running (nor its pipes to a loop that may be closing).
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    # du exits 1 when a file vanished while it walked; its total is still good then.
    fields = out.split()
    if not fields or not fields[0].isdigit():
        raise OSError(f"du failed on {path}: {err.decode(errors='replace').strip()}")
    return int(fields[0]) * 1024


@dataclass
class _Sandbox:
    path: str
    quota: int | None
    used: int | None = None
    limitation: asyncio.Future[ContainerLimitation] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    collector: asyncio.Task[None] | None = None


class DiskDuIsolator(Isolator):
    name = "disk/du"
    supports_nesting = True

    def __init__(self, flags: ContainerizerFlags) -> None:
        self.interval = float(flags.container_disk_watch_interval)
        self.enforce = bool(flags.enforce_container_disk_quota)
        if self.interval <= 0:
            raise ValueError(
                f"--container_disk_watch_interval must be positive, got {self.interval}"
            )
        self.sandboxes: dict[ContainerID, _Sandbox] = {}

    def _track(
        self, container_id: ContainerID, sandbox: str, resources: list[Resource]
    ) -> None:
        state = _Sandbox(sandbox, disk_quota(resources))
        state.collector = asyncio.create_task(
            self._collect(container_id, state), name=f"disk/du {container_id.value}"
        )
        self.sandboxes[container_id] = state

    async def recover(
        self, states: list[ContainerRuntimeState], orphans: set[ContainerID]
    ) -> None:
        for runtime in states:
            if runtime.container_id.parent is None and runtime.sandbox is not None:
                resources = runtime.config.resources if runtime.config else []
                self._track(runtime.container_id, runtime.sandbox, resources)

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        if container_id.parent is None:
            self._track(container_id, config.sandbox, config.resources)
        return None

    async def _collect(self, container_id: ContainerID, state: _Sandbox) -> None:
        while True:
            try:
                state.used = await measure(state.path)
            except OSError as exc:
                log.warning(
                    "disk/du: cannot measure container %s: %s", container_id.value, exc
                )
            else:
                over = state.quota is not None and state.used > state.quota
                if over and self.enforce and not state.limitation.done():
                    state.limitation.set_result(self._limitation(state))
            await asyncio.sleep(self.interval)

    @staticmethod
    def _limitation(state: _Sandbox) -> ContainerLimitation:
        assert state.quota is not None and state.used is not None
        return ContainerLimitation(
            reason=Reason.REASON_CONTAINER_LIMITATION_DISK,
            message=f"Disk usage ({state.used // 1024}KB) exceeds quota ({state.quota // 1024}KB)",
            resources=[
                Resource(
                    name="disk",
                    type=ValueType.SCALAR,
                    scalar=Scalar(value=state.quota / MB),
                )
            ],
        )

    async def watch(self, container_id: ContainerID) -> ContainerLimitation:
        state = self.sandboxes.get(container_id)
        if state is None:  # nested or unknown: never limited here
            return await super().watch(container_id)
        return await asyncio.shield(state.limitation)

    async def update(
        self, container_id: ContainerID, resources: list[Any], limits: dict[str, float]
    ) -> None:
        state = self.sandboxes.get(container_id)
        if state is not None:
            state.quota = disk_quota(resources)

    async def usage(self, container_id: ContainerID) -> dict[str, Any]:
        state = self.sandboxes.get(container_id)
        if state is None:
            return {}
        usage: dict[str, Any] = {}
        if state.quota is not None:
            usage["disk_limit_bytes"] = state.quota
        if state.used is not None:
            usage["disk_used_bytes"] = state.used
        return usage

    async def cleanup(self, container_id: ContainerID) -> None:
        state = self.sandboxes.pop(container_id, None)
        if state is not None:
            await _stop([state])

    async def close(self) -> None:
        states = list(self.sandboxes.values())
        self.sandboxes.clear()
        await _stop(states)


async def _stop(states: list[_Sandbox]) -> None:
    """Cancels the sandboxes' measuring and waits until each (and its du) has ended."""
    collectors = [s.collector for s in states if s.collector is not None]
    for collector in collectors:
        collector.cancel()
    await asyncio.gather(*collectors, return_exceptions=True)
