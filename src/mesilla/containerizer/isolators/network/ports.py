"""network/ports: host-network containers may listen only on the ports they were given.

As Mesos's isolator (1.6+): every `--container_ports_watch_interval` the
agent's listening TCP sockets (/proc/net/tcp, tcp6) are matched, by socket
inode, with the open files of each container's processes (its first process
and all its descendants; a pod's nested containers count against their
executor container's resources). A container listening on a port outside its
`ports` resources is logged and, with `--enforce_container_ports`, limited:
REASON_CONTAINER_LIMITATION, and the whole container tree goes.
`--check_agent_port_range_only` looks only at ports inside the agent's own
`ports` resources, `--container_ports_isolated_range` only at that range.
Containers on a CNI network of their own are skipped: their sockets are not
in the agent's network namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from mesilla.common import procfs
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.isolators.network.cni import named_networks
from mesilla.containerizer.types import (
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerLimitation,
    ContainerRuntimeState,
)
from mesilla.v1.mesos import ContainerID, Range, Ranges, Reason, Resource, ValueType

log = logging.getLogger(__name__)

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column

PortSet = set[int]


def ranges_of(resources: list[Resource]) -> PortSet:
    ports: PortSet = set()
    for resource in resources:
        if resource.name == "ports" and resource.ranges is not None:
            for r in resource.ranges.range:
                ports.update(range(r.begin, r.end + 1))
    return ports


def parse_range(text: str) -> PortSet:
    """`[0-35000]` or `[1-10,20-30]` (Mesos's ranges syntax)."""
    ports: PortSet = set()
    for part in text.strip().strip("[]").split(","):
        if part.strip():
            begin, _, end = part.partition("-")
            ports.update(range(int(begin), int(end or begin) + 1))
    return ports


def as_ranges(ports: PortSet) -> list[Range]:
    ranges: list[Range] = []
    for port in sorted(ports):
        if ranges and ranges[-1].end == port - 1:
            ranges[-1].end = port
        else:
            ranges.append(Range(begin=port, end=port))
    return ranges


def listening_sockets() -> dict[int, int]:
    """The agent's namespace's listening TCP sockets: inode -> port."""
    sockets: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            next(f, None)
            for line in f:
                fields = line.split()
                if len(fields) > 9 and fields[3] == _LISTEN:
                    sockets[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return sockets


def process_tree(root: int) -> list[int]:
    """`root` and its descendants, from /proc's parent pids."""
    children: dict[int, list[int]] = {}
    for process in procfs.processes():
        children.setdefault(process.ppid, []).append(process.pid)
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, ()))
    return tree


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


@dataclass
class _Info:
    allocated: PortSet | None = None  # None until the resources are known (root only)
    pid: int | None = None
    reported: PortSet = field(default_factory=set)  # logged already
    limitation: asyncio.Future[ContainerLimitation] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class NetworkPortsIsolator(Isolator):
    name = "network/ports"
    supports_nesting = True

    def __init__(self, flags: ContainerizerFlags) -> None:
        if flags.check_agent_port_range_only and flags.container_ports_isolated_range:
            raise ValueError(
                "Only one of --check_agent_port_range_only or --container_ports_isolated_range "
                "should be specified"
            )
        self._interval = flags.container_ports_watch_interval
        self._enforce = flags.enforce_container_ports
        self._isolated: PortSet | None = None
        if flags.container_ports_isolated_range:
            self._isolated = parse_range(flags.container_ports_isolated_range)
        elif flags.check_agent_port_range_only:
            from mesilla.agent.host import detect_resources  # the agent's own `ports`

            total = detect_resources(flags.resources, flags.work_dir or "/", flags.default_role)
            self._isolated = ranges_of(total.to_list())
        self._infos: dict[ContainerID, _Info] = {}
        self._loop: asyncio.Task[None] | None = None

    def _tracked_root(self, container_id: ContainerID) -> bool:
        return container_id.root() in self._infos

    async def recover(
        self, states: list[ContainerRuntimeState], orphans: set[ContainerID]
    ) -> None:
        for state in sorted(states, key=lambda s: len(s.container_id.path())):
            if state.config is None:
                continue
            cid = state.container_id
            if cid.parent is None and not named_networks(state.config):
                self._infos[cid] = _Info(ranges_of(state.config.resources), state.pid)
            elif cid.parent is not None and self._tracked_root(cid):
                self._infos[cid] = _Info(pid=state.pid)
        self._start()

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        if container_id.parent is None:
            if named_networks(config):
                return None
            self._infos[container_id] = _Info(ranges_of(config.resources))
        elif self._tracked_root(container_id) and not named_networks(config):
            self._infos[container_id] = _Info()
        self._start()
        return None

    async def isolate(self, container_id: ContainerID, pid: int) -> None:
        info = self._infos.get(container_id)
        if info is not None:
            info.pid = pid

    async def update(
        self, container_id: ContainerID, resources: list[Any], limits: dict[str, float]
    ) -> None:
        info = self._infos.get(container_id)
        if info is not None and container_id.parent is None:
            info.allocated = ranges_of(resources)

    async def watch(self, container_id: ContainerID) -> ContainerLimitation:
        info = self._infos.get(container_id)
        if info is None:
            return await super().watch(container_id)
        return await asyncio.shield(info.limitation)

    async def cleanup(self, container_id: ContainerID) -> None:
        self._infos.pop(container_id, None)

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None

    # --- the periodic check -------------------------------------------------------------

    def _start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.create_task(self._watch_ports(), name="network/ports")

    async def _watch_ports(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                listeners = await asyncio.to_thread(self._listeners)
                self._check(listeners)
            except Exception:
                log.exception("network/ports could not check the containers' listening ports")

    def _listeners(self) -> dict[ContainerID, PortSet]:
        sockets = listening_sockets()
        found: dict[ContainerID, PortSet] = {}
        for container_id, info in list(self._infos.items()):
            if info.pid is None:
                continue
            ports = {
                sockets[inode]
                for pid in process_tree(info.pid)
                for inode in socket_inodes(pid)
                if inode in sockets
            }
            if ports:
                found[container_id] = ports
        return found

    def _check(self, listeners: dict[ContainerID, PortSet]) -> None:
        for container_id, ports in listeners.items():
            root = self._infos.get(container_id.root())
            if root is None or root.allocated is None:
                continue
            unallocated = ports - root.allocated
            if self._isolated is not None:
                unallocated &= self._isolated
            info = self._infos[container_id]
            if not unallocated or unallocated == info.reported:
                continue
            info.reported = unallocated
            ranges = as_ranges(unallocated)
            spans = ",".join(f"{r.begin}-{r.end}" for r in ranges)
            message = f"Container {container_id} is listening on unallocated port(s): [{spans}]"
            log.info(message)
            if self._enforce and not root.limitation.done():
                root.limitation.set_result(
                    ContainerLimitation(
                        reason=Reason.REASON_CONTAINER_LIMITATION,
                        message=message,
                        resources=[
                            Resource(name="ports", type=ValueType.RANGES, ranges=Ranges(range=ranges))
                        ],
                    )
                )

