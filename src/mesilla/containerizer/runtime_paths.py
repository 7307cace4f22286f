"""The containerizer's checkpoints under `--runtime_dir`, in Mesos's layout.

    <runtime_dir>/containers/<root>/
        pid            host pid of the container's first process
        status         its raw wait(2) status, written by the supervisor when it exits
        termination    the ContainerTermination the containerizer decided (JSON)
        config         the ContainerConfig it was launched with (JSON, no secret values)
        launch_info    the merged ContainerLaunchInfo (JSON, no secret variables)
        standalone.marker   present for a standalone container (no executor)
        containers/<child>/...   the same, recursively, for nested containers

Every file is written atomically (temporary file, rename), so an agent that
dies leaves either the old or the new content, never a torn file. Not fsynced,
as Mesos does not: the directory is cleared on reboot (Mesos keeps it on a
tmpfs, /var/run/mesos) since the containers it describes do not outlive the
machine, an agent crash leaves the page cache, and readers take a torn file
(possible only after a power loss) as absent. The fsyncs, five per container
launch, cost 1-15 ms each on a busy disk, serially on the event loop.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import TypeVar

import msgspec

from mesilla.common import secrets
from mesilla.common.errors import BadRequest
from mesilla.common.files import remove_tree, write_atomically
from mesilla.common.validation import validate_container_id
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo, ContainerTermination
from mesilla.v1.mesos import ContainerID

T = TypeVar("T")

PID_FILE = "pid"
STATUS_FILE = "status"
TERMINATION_FILE = "termination"
CONFIG_FILE = "config"
LAUNCH_INFO_FILE = "launch_info"
STANDALONE_MARKER = "standalone.marker"
CONTAINERS_DIR = "containers"

log = logging.getLogger(__name__)


def container_dir(runtime_dir: str, container_id: ContainerID) -> str:
    parts = [runtime_dir]
    for value in container_id.path():
        parts += [CONTAINERS_DIR, value]
    return os.path.join(*parts)


def _write(path: str, data: bytes) -> None:
    write_atomically(path, data, durable=False)  # see the module's docstring


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_int(path: str) -> int | None:
    data = _read(path)
    if data is None or not data.strip():
        return None
    try:
        return int(data.strip())
    except ValueError:
        return None


class RuntimeDir:
    """Typed access to one runtime directory's container checkpoints."""

    def __init__(self, root: str) -> None:
        self.root = root

    def path(self, container_id: ContainerID, name: str = "") -> str:
        base = container_dir(self.root, container_id)
        return os.path.join(base, name) if name else base

    def write_pid(self, container_id: ContainerID, pid: int) -> None:
        _write(self.path(container_id, PID_FILE), b"%d\n" % pid)

    def read_pid(self, container_id: ContainerID) -> int | None:
        return read_int(self.path(container_id, PID_FILE))

    def mark_standalone(self, container_id: ContainerID) -> None:
        _write(self.path(container_id, STANDALONE_MARKER), b"")

    def is_standalone(self, container_id: ContainerID) -> bool:
        return os.path.exists(self.path(container_id, STANDALONE_MARKER))

    def read_status(self, container_id: ContainerID) -> int | None:
        return read_int(self.path(container_id, STATUS_FILE))

    def write_config(self, container_id: ContainerID, config: ContainerConfig) -> None:
        public = dataclasses.replace(config, executor_secrets={})
        _write(self.path(container_id, CONFIG_FILE), secrets.redact(msgspec.json.encode(public)))

    def read_config(self, container_id: ContainerID) -> ContainerConfig | None:
        return self._decode(self.path(container_id, CONFIG_FILE), ContainerConfig)

    def write_launch_info(self, container_id: ContainerID, info: ContainerLaunchInfo) -> None:
        public = {k: v for k, v in info.environment.items() if k not in info.secret_names}
        encoded = msgspec.json.encode(dataclasses.replace(info, environment=public))
        _write(self.path(container_id, LAUNCH_INFO_FILE), secrets.redact(encoded))

    def write_termination(self, container_id: ContainerID, term: ContainerTermination) -> None:
        _write(self.path(container_id, TERMINATION_FILE), msgspec.json.encode(term))

    def read_termination(self, container_id: ContainerID) -> ContainerTermination | None:
        return self._decode(self.path(container_id, TERMINATION_FILE), ContainerTermination)

    @staticmethod
    def _decode(path: str, type_: type[T]) -> T | None:
        data = _read(path)
        if data is None:
            return None
        try:
            return msgspec.json.decode(data, type=type_)
        except msgspec.MsgspecError:
            return None  # unreadable checkpoint: recovery treats the field as unknown

    def containers(self) -> list[ContainerID]:
        """Every checkpointed container, parents before their children."""
        found: list[ContainerID] = []

        def walk(directory: str, parent: ContainerID | None) -> None:
            try:
                # scandir: the entries' types come with the listing, no stat for each.
                with os.scandir(directory) as entries:
                    names = sorted(e.name for e in entries if e.is_dir())
            except FileNotFoundError:
                return
            for name in names:
                child_dir = os.path.join(directory, name)
                container_id = ContainerID(value=name, parent=parent)
                try:
                    validate_container_id(container_id)
                except BadRequest as exc:  # not ours: never followed, never removed
                    log.warning("Skipping '%s' in the runtime directory: %s", child_dir, exc)
                    continue
                found.append(container_id)
                walk(os.path.join(child_dir, CONTAINERS_DIR), container_id)

        walk(os.path.join(self.root, CONTAINERS_DIR), None)
        return found

    def remove(self, container_id: ContainerID) -> None:
        remove_tree(self.root, self.path(container_id), ignore_errors=True)
