"""Forked default executors: the linux launcher's side of the executor zygote.

With `--fork_default_executors` (the default), the linux launcher starts one
zygote per agent (`mesilla.executor.zygote`, whose docstring describes it) and
sends it every default executor that needs nothing only runc can give: no
image, no network namespace nor other namespace of its own beyond mount, pid,
IPC and UTS, no TTY, root, cgroup v1, x86_64 or aarch64. Its container is the same OCI
description (`LinuxLauncher._spec`), applied by the zygote's child in place
of runc's; the monitor files are conmon's, so waiting, recovery and
GET_CONTAINERS read them unchanged. `monitor/forked`, written before the
request, tells a restarted agent that the container is not runc's: its
cgroups are removed here, in every v1 hierarchy, as `runc delete` would.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
from typing import Any

from mesilla.common.blocking import in_thread
from mesilla.common.fds import read_line
from mesilla.common.syscalls import SYS_PIVOT_ROOT
from mesilla.containerizer.cgroups import CgroupsError, Hierarchy, cgroup_path, remove_everywhere
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.launcher import monitor, oci
from mesilla.containerizer.launcher.base import LaunchError
from mesilla.containerizer.types import ForkRequest
from mesilla.v1.mesos import ContainerID

log = logging.getLogger(__name__)

DEFAULT_EXECUTOR = "mesilla.executor.default"
FORKED = "forked"
# What the zygote's child unshares itself (the pid namespace is the monitor's).
NAMESPACES = {"mount", "pid", "ipc", "uts"}


class Zygote:
    """The agent's zygote process and the socket its requests go through."""

    def __init__(self, flags: ContainerizerFlags, hierarchy: Hierarchy) -> None:
        self._flags = flags
        self.hierarchy = hierarchy
        self._socket, self._process = self._start()

    @staticmethod
    def _start() -> tuple[socket.socket, subprocess.Popen[bytes]]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-m", "mesilla.executor.zygote", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        return ours, process

    @classmethod
    def create(cls, flags: ContainerizerFlags) -> Zygote | None:
        """A zygote where forked executors are on and possible here; else None."""
        if not flags.fork_default_executors or os.uname().machine not in SYS_PIVOT_ROOT:
            return None
        try:
            hierarchy = Hierarchy.detect(flags.cgroups_hierarchy)
        except (CgroupsError, OSError):
            return None
        return cls(flags, hierarchy) if hierarchy.version == 1 else None

    @staticmethod
    def eligible(request: ForkRequest, spec: dict[str, Any]) -> bool:
        """Whether this container is a default executor the zygote can fork."""
        config, info = request.config, request.launch_info
        namespaces = spec["linux"]["namespaces"]
        return (
            request.container_id.parent is None
            and config.executor_as_root
            and request.argv[1:3] == ["-m", DEFAULT_EXECUTOR]
            and not info.rootfs
            and config.console_socket is None
            and all("path" not in n and n["type"] in NAMESPACES for n in namespaces)
            and spec["process"]["user"]["uid"] == 0
        )

    async def fork(self, request: ForkRequest, spec: dict[str, Any], monitor_dir: str) -> monitor.Monitored:
        """Has the zygote fork the executor, held before running until `start`."""
        _mark(monitor_dir)  # before anything exists that recovery must find
        message = json.dumps(self._request(request, spec, monitor_dir)).encode()
        read_end, write_end = os.pipe()
        try:
            try:
                socket.send_fds(self._socket, [message], [write_end])
            except OSError:
                # The zygote died (killed): a new one serves this and later requests.
                log.warning("The executor zygote is gone (%s): starting another", self._process.poll())
                await self.close()
                self._socket, self._process = self._start()
                socket.send_fds(self._socket, [message], [write_end])
        finally:
            os.close(write_end)
        try:
            line = await read_line(read_end)
        finally:
            os.close(read_end)
        try:
            answer: Any = json.loads(line) if line else {}
            return monitor.Monitored(int(answer["monitor_pid"]), int(answer["pid"]))
        except (ValueError, KeyError, TypeError):
            reason = answer.get("error") if isinstance(answer, dict) and answer else "its monitor died"
            raise monitor.MonitorError(
                f"The executor zygote could not fork {request.container_id}: {reason}"
            ) from None

    def _request(self, request: ForkRequest, spec: dict[str, Any], monitor_dir: str) -> dict[str, Any]:
        config, process = request.config, spec["process"]
        caps = process["capabilities"]
        path = cgroup_path(self._flags, request.container_id)
        return {
            "rid": ".".join(request.container_id.path()),
            "monitor_dir": monitor_dir,
            "argv": request.argv,
            "env": dict(entry.split("=", 1) for entry in process["env"]),
            "cwd": process["cwd"],
            "stdin": config.stdin,
            "stdout": config.stdout or os.path.join(config.sandbox, "stdout"),
            "stderr": config.stderr or os.path.join(config.sandbox, "stderr"),
            "cgroups": [[mount, path] for mount in sorted(set(self.hierarchy.mounts.values()))],
            "namespaces": sorted(n["type"] for n in spec["linux"]["namespaces"]),
            "hostname": spec.get("hostname"),
            "rootfs": spec["root"]["path"],
            "readonly_rootfs": spec["root"].get("readonly", False),
            "mounts": spec["mounts"],
            "rlimits": process["rlimits"],
            "capabilities": {
                kind: oci.capability_mask(caps[kind])
                for kind in ("bounding", "effective", "permitted", "inheritable")
            },
        }

    async def close(self) -> None:
        """Ends the zygote (it exits when its socket closes); its monitors stay."""
        self._socket.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            await in_thread(self._process.wait, 5)


async def remove_cgroups(flags: ContainerizerFlags, container_id: ContainerID) -> None:
    """What `runc delete` does for runc's containers: kills what is left in the
    container's cgroups and removes them, in every hierarchy (also with the flag
    now off: a restarted agent still cleans up what an earlier one forked)."""
    path = cgroup_path(flags, container_id)
    await remove_everywhere(os.path.realpath(flags.cgroups_hierarchy), path)


def _mark(monitor_dir: str) -> None:
    with open(os.path.join(monitor_dir, FORKED), "w"):
        pass


def is_forked(monitor_dir: str) -> bool:
    return os.path.exists(os.path.join(monitor_dir, FORKED))


def start(monitor_dir: str) -> None:
    """Lets the held executor run: a byte into its `start` FIFO."""
    try:
        fd = os.open(os.path.join(monitor_dir, "start"), os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise LaunchError(f"The forked executor in {monitor_dir} is gone: {exc}") from exc
    try:
        os.write(fd, b"1")
    finally:
        os.close(fd)
