"""Data shared by the containerizer, its launchers and its isolators.

As in Mesos (`include/mesos/slave/containerizer.proto`), isolators do not touch
the process themselves: `prepare` returns a `ContainerLaunchInfo` describing
what the container needs (mounts, namespaces, environment, rlimits, cgroup
limits) and the launcher applies the merged description when it creates the
container (for the linux launcher, as OCI runtime configuration).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from mesilla.v1.mesos import (
    CommandInfo,
    ContainerID,
    ContainerInfo,
    ExecutorInfo,
    Reason,
    Resource,
    TaskInfo,
)


class ContainerState(enum.Enum):
    STARTING = "STARTING"
    PROVISIONING = "PROVISIONING"
    PREPARING = "PREPARING"
    ISOLATING = "ISOLATING"
    FETCHING = "FETCHING"
    RUNNING = "RUNNING"
    DESTROYING = "DESTROYING"


class ContainerClass(enum.Enum):
    DEFAULT = "DEFAULT"
    DEBUG = "DEBUG"  # check and exec sessions: no own resources or isolation


@dataclass
class ContainerConfig:
    """What to run and with what: the input of `Containerizer.launch`."""

    command: CommandInfo
    sandbox: str  # host path of the sandbox directory
    container_info: ContainerInfo | None = None
    resources: list[Resource] = field(default_factory=list)
    limits: dict[str, float] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    # Only the container's own process gets these (an executor's token): never
    # written down, nor inherited by its debug containers.
    executor_secrets: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    # Mesilla's own executors run as root (their interpreter need not be readable
    # by `user`), while `user` owns the sandbox and runs the tasks they start.
    executor_as_root: bool = False
    executor_info: ExecutorInfo | None = None
    task_info: TaskInfo | None = None
    container_class: ContainerClass = ContainerClass.DEFAULT
    # Where stdout/stderr go (default: `<sandbox>/stdout`, `<sandbox>/stderr`).
    # stdin is read from `stdin` (a FIFO of the agent's I/O switchboard), else
    # from /dev/null.
    stdin: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    # A TTY container's launcher sends its terminal's master here (`console.py`);
    # the terminal then replaces stdin, stdout and stderr.
    console_socket: str | None = None
    # Filled in by the provisioner when the container has an image.
    rootfs: str | None = None
    image_config: dict[str, Any] | None = None

    @property
    def info(self) -> ContainerInfo:
        """`container_info`, or an empty one (no linux_info, no volumes, ...) where there is none."""
        return self.container_info if self.container_info is not None else ContainerInfo()


@dataclass
class Mount:
    source: str
    target: str  # path inside the container
    type: str = "bind"
    options: list[str] = field(default_factory=lambda: ["rbind", "rw"])


@dataclass
class ContainerLaunchInfo:
    """An isolator's contribution to a launch; the containerizer merges them in order."""

    environment: dict[str, str] = field(default_factory=dict)
    working_directory: str | None = None
    rootfs: str | None = None
    mounts: list[Mount] = field(default_factory=list)
    # Namespaces to create afresh ("pid", "mount", "ipc", "uts", "network", "cgroup").
    clone_namespaces: set[str] = field(default_factory=set)
    # Namespaces to join: kind -> path such as /proc/<pid>/ns/net (nested containers).
    enter_namespaces: dict[str, str] = field(default_factory=dict)
    rlimits: list[tuple[str, int | None, int | None]] = field(default_factory=list)
    capabilities: list[str] | None = None
    # The most its processes can ever hold (Mesos's bounding set); else `capabilities`.
    bounding_capabilities: list[str] | None = None
    # OCI `linux.resources` fragments (memory, cpu, pids), merged key by key.
    cgroup_resources: dict[str, Any] = field(default_factory=dict)
    # Command replacing the configured one (docker/runtime: the image's entrypoint).
    command: CommandInfo | None = None
    user: str | None = None
    # Variables of `environment` whose values are secrets (environment_secret):
    # never written to a file.
    secret_names: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class ForkRequest:
    """What a launcher's `fork` creates: the container, its first process's argv, the
    configuration and the isolators' merged launch info (one argument for every launcher)."""

    container_id: ContainerID
    argv: list[str]
    config: ContainerConfig
    launch_info: ContainerLaunchInfo


@dataclass
class ContainerLimitation:
    """An isolator's report that a container went over a limit (it is then destroyed)."""

    reason: Reason
    message: str
    resources: list[Resource] = field(default_factory=list)


@dataclass
class ContainerTermination:
    status: int | None = None  # raw wait(2) status
    state: str | None = None  # TaskState name, when a limitation decides it
    reason: Reason | None = None
    message: str | None = None
    limited_resources: list[Resource] = field(default_factory=list)


@dataclass
class ContainerRuntimeState:
    """What recovery knows of a container from the runtime directory's checkpoints."""

    container_id: ContainerID
    pid: int | None
    sandbox: str | None
    config: ContainerConfig | None = None
