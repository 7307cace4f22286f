"""Core messages of `include/mesos/v1/mesos.proto` that Mesilla uses.

Fields Mesilla does not interpret yet but must carry through unchanged
(discovery, docker parameters, ...) are typed as plain JSON (`Json`).

Over 600 lines, and one module on purpose: it mirrors the one .proto file, and
holds nothing but message definitions.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

Json = dict[str, Any]


class Message(msgspec.Struct, omit_defaults=True, kw_only=True):
    """Base of every v1 message: unknown fields ignored, unset fields omitted."""


# --- identifiers -----------------------------------------------------------


class Identifier(msgspec.Struct, omit_defaults=True, kw_only=True, frozen=True):
    """Base of the ids: a Message, but frozen, so hashable (dict keys, sets).

    Not a subclass of Message: mypy (as dataclasses) refuses a frozen class on a
    mutable base, which msgspec allows; the options are Message's.
    """


class FrameworkID(Identifier, frozen=True):
    value: str


class OfferID(Identifier, frozen=True):
    value: str


class AgentID(Identifier, frozen=True):
    value: str


class TaskID(Identifier, frozen=True):
    value: str


class ExecutorID(Identifier, frozen=True):
    value: str


class OperationID(Identifier, frozen=True):
    value: str


class ContainerID(Identifier, frozen=True):
    value: str
    parent: ContainerID | None = None

    def path(self) -> list[str]:
        """Values from the root container down to this one."""
        chain = [] if self.parent is None else self.parent.path()
        return [*chain, self.value]

    @classmethod
    def from_path(cls, values: list[str]) -> ContainerID:
        """The container whose `path()` is `values` (root first); `values` is not empty."""
        container_id: ContainerID | None = None
        for value in values:
            container_id = cls(value=value, parent=container_id)
        assert container_id is not None
        return container_id

    def root(self) -> ContainerID:
        return self if self.parent is None else self.parent.root()

    def __str__(self) -> str:
        return ".".join(self.path())


class ResourceProviderID(Identifier, frozen=True):
    value: str


# --- time --------------------------------------------------------------------


class DurationInfo(Message):
    nanoseconds: int


class TimeInfo(Message):
    nanoseconds: int


# --- calls the master and the agent share ----------------------------------------


class SetLoggingLevelCall(Message):
    level: int
    duration: DurationInfo


class GetLoggingLevel(Message):
    level: int


class GetOperations(Message):
    # Operations come with resource providers, which Mesilla does not have.
    operations: list[Json] = []


class ListFilesCall(Message):
    path: str


class ReadFileCall(Message):
    path: str
    offset: int = 0
    length: int | None = None


class FileInfo(Message):
    path: str
    nlink: int | None = None
    size: int | None = None
    mtime: TimeInfo | None = None
    mode: int | None = None
    uid: str | None = None
    gid: str | None = None


class ListFiles(Message):
    file_infos: list[FileInfo] = []


class ReadFile(Message):
    size: int
    data: bytes


# --- values and resources --------------------------------------------------------


class ValueType(enum.Enum):
    SCALAR = "SCALAR"
    RANGES = "RANGES"
    SET = "SET"
    TEXT = "TEXT"


class Scalar(Message):
    value: float


class Range(Message):
    begin: int
    end: int


class Ranges(Message):
    range: list[Range] = []


class ValueSet(Message):
    item: list[str] = []


class Text(Message):
    value: str


class AllocationInfo(Message):
    role: str | None = None


class Label(Message):
    key: str
    value: str | None = None


class Labels(Message):
    labels: list[Label] = []


class ReservationInfo(Message):
    type: str | None = None  # STATIC | DYNAMIC
    role: str | None = None
    principal: str | None = None
    labels: Labels | None = None


class Resource(Message):
    name: str
    type: ValueType  # required, as in mesos.proto
    scalar: Scalar | None = None
    ranges: Ranges | None = None
    set: ValueSet | None = None
    role: str | None = None  # deprecated pre-reservation-refinement form
    allocation_info: AllocationInfo | None = None
    reservation: Json | None = None
    reservations: list[ReservationInfo] = []
    disk: Json | None = None
    revocable: Json | None = None
    shared: Json | None = None
    provider_id: ResourceProviderID | None = None


class Attribute(Message):
    name: str
    type: ValueType
    scalar: Scalar | None = None
    ranges: Ranges | None = None
    set: ValueSet | None = None
    text: Text | None = None


class Address(Message):
    hostname: str | None = None
    ip: str | None = None
    port: int | None = None


class URL(Message):
    scheme: str
    address: Address
    path: str | None = None
    query: list[Json] = []
    fragment: str | None = None


# --- frameworks, masters, agents -------------------------------------------------


class FrameworkCapability(Message):
    type: str = "UNKNOWN"


class FrameworkInfo(Message):
    user: str = ""
    name: str = ""
    id: FrameworkID | None = None
    failover_timeout: float = 0.0
    checkpoint: bool = False
    role: str | None = None
    roles: list[str] = []
    hostname: str | None = None
    principal: str | None = None
    webui_url: str | None = None
    capabilities: list[FrameworkCapability] = []
    labels: Labels | None = None
    offer_filters: dict[str, Json] = {}

    def has_capability(self, name: str) -> bool:
        return any(c.type == name for c in self.capabilities)

    def effective_roles(self) -> list[str]:
        """MULTI_ROLE frameworks use `roles`; the rest the (deprecated) `role`, default `*`."""
        if self.has_capability("MULTI_ROLE"):
            return list(self.roles)
        return [self.role or "*"]


class MasterCapability(Message):
    type: str


class MasterInfo(Message):
    id: str
    ip: int
    port: int = 5050
    pid: str | None = None
    hostname: str | None = None
    version: str | None = None
    address: Address | None = None
    domain: Json | None = None
    capabilities: list[MasterCapability] = []


class AgentCapability(Message):
    type: str


class AgentInfo(Message):
    hostname: str
    port: int = 5051
    resources: list[Resource] = []
    attributes: list[Attribute] = []
    id: AgentID | None = None
    domain: Json | None = None


# --- commands, containers, executors, tasks ----------------------------------------


class EnvironmentVariable(Message):
    name: str
    type: str = "VALUE"  # VALUE | SECRET
    value: str | None = None
    secret: Json | None = None


class Environment(Message):
    variables: list[EnvironmentVariable] = []


class CommandURI(Message):
    value: str
    executable: bool | None = None
    extract: bool = True
    cache: bool | None = None
    output_file: str | None = None


class CommandInfo(Message):
    uris: list[CommandURI] = []
    environment: Environment | None = None
    shell: bool = True
    value: str | None = None
    arguments: list[str] = []
    user: str | None = None


class ImageDocker(Message):
    name: str
    credential: Json | None = None
    config: Json | None = None


class Image(Message):
    type: str  # APPC | DOCKER
    appc: Json | None = None
    docker: ImageDocker | None = None
    cached: bool = True


class SandboxPath(Message):
    type: str = "SELF"  # SELF | PARENT
    path: str = ""


class VolumeSource(Message):
    type: str = "UNKNOWN"  # DOCKER_VOLUME | HOST_PATH | SANDBOX_PATH | SECRET | CSI_VOLUME
    docker_volume: Json | None = None
    host_path: Json | None = None
    sandbox_path: SandboxPath | None = None
    secret: Json | None = None
    csi_volume: Json | None = None


class Volume(Message):
    container_path: str
    mode: str = "RW"  # RW | RO
    host_path: str | None = None
    image: Image | None = None
    source: VolumeSource | None = None


class MesosInfo(Message):
    image: Image | None = None


class NetworkInfo(Message):
    ip_addresses: list[Json] = []
    name: str | None = None
    groups: list[str] = []
    labels: Labels | None = None
    port_mappings: list[Json] = []


class LinuxInfo(Message):
    capability_info: Json | None = None
    bounding_capabilities: Json | None = None
    effective_capabilities: Json | None = None
    share_pid_namespace: bool | None = None
    seccomp: Json | None = None
    ipc_mode: str | None = None
    shm_size: int | None = None
    share_cgroups: bool | None = None  # Mesos: true unless set


class RLimit(Message):
    type: str
    hard: int | None = None
    soft: int | None = None


class RLimitInfo(Message):
    rlimits: list[RLimit] = []


class TTYInfo(Message):
    window_size: Json | None = None


class ContainerInfo(Message):
    type: str = "MESOS"  # DOCKER | MESOS
    volumes: list[Volume] = []
    hostname: str | None = None
    docker: Json | None = None
    mesos: MesosInfo | None = None
    network_infos: list[NetworkInfo] = []
    linux_info: LinuxInfo | None = None
    rlimit_info: RLimitInfo | None = None
    tty_info: TTYInfo | None = None


class KillPolicy(Message):
    grace_period: DurationInfo | None = None


class ExecutorInfo(Message):
    executor_id: ExecutorID
    type: str = "UNKNOWN"  # DEFAULT | CUSTOM
    framework_id: FrameworkID | None = None
    command: CommandInfo | None = None
    container: ContainerInfo | None = None
    resources: list[Resource] = []
    name: str | None = None
    source: str | None = None
    data: bytes | None = None
    discovery: Json | None = None
    shutdown_grace_period: DurationInfo | None = None
    labels: Labels | None = None
    # The pods design (6.3.4.2): whose --http_credentials the agent hands the executor.
    principal: str | None = None


class RestartPolicy(Message):
    """Mesilla's per-task restart policy (the pods design, section 6.1.1)."""

    type: str = "NEVER"  # ALWAYS | ON_FAILURE | NEVER
    max_restarts: int | None = None
    min_restart_delay: DurationInfo | None = None


class TaskInfo(Message):
    name: str
    task_id: TaskID
    agent_id: AgentID
    resources: list[Resource] = []
    executor: ExecutorInfo | None = None
    command: CommandInfo | None = None
    container: ContainerInfo | None = None
    health_check: Json | None = None
    check: Json | None = None
    kill_policy: KillPolicy | None = None
    data: bytes | None = None
    labels: Labels | None = None
    discovery: Json | None = None
    max_completion_time: DurationInfo | None = None
    limits: dict[str, Json] = {}
    restart_policy: RestartPolicy | None = None


class TaskGroupInfo(Message):
    tasks: list[TaskInfo] = []


# --- task states and status updates --------------------------------------------------


class TaskState(enum.Enum):
    TASK_STAGING = "TASK_STAGING"
    TASK_STARTING = "TASK_STARTING"
    TASK_RUNNING = "TASK_RUNNING"
    TASK_KILLING = "TASK_KILLING"
    TASK_FINISHED = "TASK_FINISHED"
    TASK_FAILED = "TASK_FAILED"
    TASK_KILLED = "TASK_KILLED"
    TASK_ERROR = "TASK_ERROR"
    TASK_LOST = "TASK_LOST"
    TASK_DROPPED = "TASK_DROPPED"
    TASK_UNREACHABLE = "TASK_UNREACHABLE"
    TASK_GONE = "TASK_GONE"
    TASK_GONE_BY_OPERATOR = "TASK_GONE_BY_OPERATOR"
    TASK_UNKNOWN = "TASK_UNKNOWN"
    # Mesilla's extension for restart policies, sent only to frameworks with the
    # TASK_RESTARTING_STATE capability (as Mesos does for TASK_KILLING).
    TASK_RESTARTING = "TASK_RESTARTING"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {
        TaskState.TASK_FINISHED,
        TaskState.TASK_FAILED,
        TaskState.TASK_KILLED,
        TaskState.TASK_ERROR,
        TaskState.TASK_LOST,
        TaskState.TASK_DROPPED,
        TaskState.TASK_GONE,
        TaskState.TASK_GONE_BY_OPERATOR,
    }
)


class StatusSource(enum.Enum):
    SOURCE_MASTER = "SOURCE_MASTER"
    SOURCE_AGENT = "SOURCE_AGENT"
    SOURCE_EXECUTOR = "SOURCE_EXECUTOR"


class Reason(enum.Enum):
    REASON_COMMAND_EXECUTOR_FAILED = "REASON_COMMAND_EXECUTOR_FAILED"
    REASON_CONTAINER_LAUNCH_FAILED = "REASON_CONTAINER_LAUNCH_FAILED"
    REASON_CONTAINER_LIMITATION = "REASON_CONTAINER_LIMITATION"
    REASON_CONTAINER_LIMITATION_DISK = "REASON_CONTAINER_LIMITATION_DISK"
    REASON_CONTAINER_LIMITATION_MEMORY = "REASON_CONTAINER_LIMITATION_MEMORY"
    REASON_CONTAINER_PREEMPTED = "REASON_CONTAINER_PREEMPTED"
    REASON_CONTAINER_UPDATE_FAILED = "REASON_CONTAINER_UPDATE_FAILED"
    REASON_MAX_COMPLETION_TIME_REACHED = "REASON_MAX_COMPLETION_TIME_REACHED"
    REASON_EXECUTOR_REGISTRATION_TIMEOUT = "REASON_EXECUTOR_REGISTRATION_TIMEOUT"
    REASON_EXECUTOR_REREGISTRATION_TIMEOUT = "REASON_EXECUTOR_REREGISTRATION_TIMEOUT"
    REASON_EXECUTOR_TERMINATED = "REASON_EXECUTOR_TERMINATED"
    REASON_EXECUTOR_UNREGISTERED = "REASON_EXECUTOR_UNREGISTERED"
    REASON_FRAMEWORK_REMOVED = "REASON_FRAMEWORK_REMOVED"
    REASON_GC_ERROR = "REASON_GC_ERROR"
    REASON_INVALID_FRAMEWORKID = "REASON_INVALID_FRAMEWORKID"
    REASON_INVALID_OFFERS = "REASON_INVALID_OFFERS"
    REASON_IO_SWITCHBOARD_EXITED = "REASON_IO_SWITCHBOARD_EXITED"
    REASON_MASTER_DISCONNECTED = "REASON_MASTER_DISCONNECTED"
    REASON_RECONCILIATION = "REASON_RECONCILIATION"
    REASON_RESOURCES_UNKNOWN = "REASON_RESOURCES_UNKNOWN"
    REASON_AGENT_DISCONNECTED = "REASON_AGENT_DISCONNECTED"
    REASON_AGENT_DRAINING = "REASON_AGENT_DRAINING"
    REASON_AGENT_REMOVED = "REASON_AGENT_REMOVED"
    REASON_AGENT_REMOVED_BY_OPERATOR = "REASON_AGENT_REMOVED_BY_OPERATOR"
    REASON_AGENT_REREGISTERED = "REASON_AGENT_REREGISTERED"
    REASON_AGENT_RESTARTED = "REASON_AGENT_RESTARTED"
    REASON_AGENT_UNKNOWN = "REASON_AGENT_UNKNOWN"
    REASON_TASK_KILLED_DURING_LAUNCH = "REASON_TASK_KILLED_DURING_LAUNCH"
    REASON_TASK_CHECK_STATUS_UPDATED = "REASON_TASK_CHECK_STATUS_UPDATED"
    REASON_TASK_HEALTH_CHECK_STATUS_UPDATED = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
    REASON_TASK_GROUP_INVALID = "REASON_TASK_GROUP_INVALID"
    REASON_TASK_GROUP_UNAUTHORIZED = "REASON_TASK_GROUP_UNAUTHORIZED"
    REASON_TASK_INVALID = "REASON_TASK_INVALID"
    REASON_TASK_UNAUTHORIZED = "REASON_TASK_UNAUTHORIZED"
    REASON_TASK_UNKNOWN = "REASON_TASK_UNKNOWN"


class CgroupInfo(Message):
    net_cls: Json | None = None


class ContainerStatus(Message):
    container_id: ContainerID | None = None
    network_infos: list[NetworkInfo] = []
    cgroup_info: CgroupInfo | None = None
    executor_pid: int | None = None


class TaskResourceLimitation(Message):
    resources: list[Resource] = []


class TaskStatus(Message):
    task_id: TaskID
    state: TaskState
    message: str | None = None
    source: StatusSource | None = None
    reason: Reason | None = None
    data: bytes | None = None
    agent_id: AgentID | None = None
    executor_id: ExecutorID | None = None
    timestamp: float | None = None
    uuid: bytes | None = None
    healthy: bool | None = None
    check_status: Json | None = None
    labels: Labels | None = None
    container_status: ContainerStatus | None = None
    unreachable_time: TimeInfo | None = None
    limitation: TaskResourceLimitation | None = None


class Task(Message):
    """The master's and agent's record of a launched task (mesos.proto `Task`)."""

    name: str
    task_id: TaskID
    framework_id: FrameworkID
    agent_id: AgentID
    state: TaskState
    resources: list[Resource] = []
    executor_id: ExecutorID | None = None
    statuses: list[TaskStatus] = []
    status_update_state: TaskState | None = None
    status_update_uuid: bytes | None = None
    labels: Labels | None = None
    discovery: Json | None = None
    container: ContainerInfo | None = None
    health_check: Json | None = None
    check: Json | None = None
    kill_policy: KillPolicy | None = None
    user: str | None = None
    limits: dict[str, Json] = {}


# --- offers and operations ----------------------------------------------------------


class Filters(Message):
    refuse_seconds: float = 5.0


class Launch(Message):
    task_infos: list[TaskInfo] = []


class LaunchGroup(Message):
    executor: ExecutorInfo
    task_group: TaskGroupInfo


class OperationType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    LAUNCH = "LAUNCH"
    LAUNCH_GROUP = "LAUNCH_GROUP"
    RESERVE = "RESERVE"
    UNRESERVE = "UNRESERVE"
    CREATE = "CREATE"
    DESTROY = "DESTROY"
    GROW_VOLUME = "GROW_VOLUME"
    SHRINK_VOLUME = "SHRINK_VOLUME"
    CREATE_DISK = "CREATE_DISK"
    DESTROY_DISK = "DESTROY_DISK"


class Operation(Message):
    type: OperationType
    id: OperationID | None = None
    launch: Launch | None = None
    launch_group: LaunchGroup | None = None
    reserve: Json | None = None
    unreserve: Json | None = None
    create: Json | None = None
    destroy: Json | None = None


class Offer(Message):
    id: OfferID
    framework_id: FrameworkID
    agent_id: AgentID
    hostname: str
    url: URL | None = None
    domain: Json | None = None
    resources: list[Resource] = []
    attributes: list[Attribute] = []
    executor_ids: list[ExecutorID] = []
    unavailability: Json | None = None
    allocation_info: AllocationInfo | None = None


class Request(Message):
    agent_id: AgentID | None = None
    resources: list[Resource] = []


# --- operator APIs (shared by the master's and the agent's, as in mesos.proto) -------


class Flag(Message):
    name: str
    value: str | None = None


class Metric(Message):
    name: str
    value: float | None = None


class VersionInfo(Message):
    version: str
    build_date: str | None = None
    build_time: float | None = None
    build_user: str | None = None
    git_sha: str | None = None
    git_branch: str | None = None
    git_tag: str | None = None
