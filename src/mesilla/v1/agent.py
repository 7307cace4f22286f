"""Agent operator API messages (`include/mesos/v1/agent/agent.proto`).

Parts Mesilla interprets are typed; the rest (resource statistics, container
status) is carried as plain JSON (`Json`).
"""

from __future__ import annotations

import enum

from mesilla.v1.mesos import (
    AgentInfo,
    CommandInfo,
    ContainerID,
    ContainerInfo,
    ExecutorInfo,
    Flag,
    FrameworkInfo,
    GetLoggingLevel,
    GetOperations,
    Json,
    ListFiles,
    ListFilesCall,
    Message,
    Metric,
    ReadFile,
    ReadFileCall,
    Reason,
    Resource,
    Scalar,
    SetLoggingLevelCall,
    Task,
    TaskResourceLimitation,
    TaskState,
    TTYInfo,
    VersionInfo,
)


class CallType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    GET_HEALTH = "GET_HEALTH"
    GET_FLAGS = "GET_FLAGS"
    GET_VERSION = "GET_VERSION"
    GET_METRICS = "GET_METRICS"
    GET_LOGGING_LEVEL = "GET_LOGGING_LEVEL"
    SET_LOGGING_LEVEL = "SET_LOGGING_LEVEL"
    LIST_FILES = "LIST_FILES"
    READ_FILE = "READ_FILE"
    GET_STATE = "GET_STATE"
    GET_CONTAINERS = "GET_CONTAINERS"
    GET_FRAMEWORKS = "GET_FRAMEWORKS"
    GET_EXECUTORS = "GET_EXECUTORS"
    GET_OPERATIONS = "GET_OPERATIONS"
    GET_TASKS = "GET_TASKS"
    GET_AGENT = "GET_AGENT"
    GET_RESOURCE_PROVIDERS = "GET_RESOURCE_PROVIDERS"
    LAUNCH_NESTED_CONTAINER = "LAUNCH_NESTED_CONTAINER"
    WAIT_NESTED_CONTAINER = "WAIT_NESTED_CONTAINER"
    KILL_NESTED_CONTAINER = "KILL_NESTED_CONTAINER"
    REMOVE_NESTED_CONTAINER = "REMOVE_NESTED_CONTAINER"
    LAUNCH_NESTED_CONTAINER_SESSION = "LAUNCH_NESTED_CONTAINER_SESSION"
    ATTACH_CONTAINER_INPUT = "ATTACH_CONTAINER_INPUT"
    ATTACH_CONTAINER_OUTPUT = "ATTACH_CONTAINER_OUTPUT"
    LAUNCH_CONTAINER = "LAUNCH_CONTAINER"
    WAIT_CONTAINER = "WAIT_CONTAINER"
    KILL_CONTAINER = "KILL_CONTAINER"
    REMOVE_CONTAINER = "REMOVE_CONTAINER"
    ADD_RESOURCE_PROVIDER_CONFIG = "ADD_RESOURCE_PROVIDER_CONFIG"
    UPDATE_RESOURCE_PROVIDER_CONFIG = "UPDATE_RESOURCE_PROVIDER_CONFIG"
    REMOVE_RESOURCE_PROVIDER_CONFIG = "REMOVE_RESOURCE_PROVIDER_CONFIG"
    MARK_RESOURCE_PROVIDER_GONE = "MARK_RESOURCE_PROVIDER_GONE"
    PRUNE_IMAGES = "PRUNE_IMAGES"


class DurationJson(Message):
    nanoseconds: int


class GetMetricsCall(Message):
    timeout: DurationJson | None = None


class GetContainersCall(Message):
    show_nested: bool = False
    show_standalone: bool = False


class LaunchContainerCall(Message):
    """LAUNCH_CONTAINER, and LAUNCH_NESTED_CONTAINER(_SESSION) (which have no resources)."""

    container_id: ContainerID
    command: CommandInfo | None = None
    container: ContainerInfo | None = None
    resources: list[Resource] = []
    limits: dict[str, Scalar] = {}


class ContainerCall(Message):
    """WAIT_, REMOVE_ and ATTACH_CONTAINER_OUTPUT: just the container."""

    container_id: ContainerID


class KillContainerCall(Message):
    container_id: ContainerID
    signal: int | None = None


class ProcessIOData(Message):
    type: str = "UNKNOWN"  # STDIN | STDOUT | STDERR
    data: bytes = b""  # base64 in JSON, as protobuf bytes


class ProcessIOControl(Message):
    type: str = "UNKNOWN"  # TTY_INFO | HEARTBEAT
    tty_info: TTYInfo | None = None
    heartbeat: Json | None = None


class ProcessIO(Message):
    """One record of an I/O stream of a container (ATTACH_CONTAINER_INPUT/OUTPUT, sessions)."""

    type: str = "UNKNOWN"  # DATA | CONTROL
    data: ProcessIOData | None = None
    control: ProcessIOControl | None = None


class AttachContainerInputCall(Message):
    type: str = "UNKNOWN"  # CONTAINER_ID (the first record) | PROCESS_IO (the others)
    container_id: ContainerID | None = None
    process_io: ProcessIO | None = None


class Call(Message):
    type: CallType
    get_metrics: GetMetricsCall | None = None
    set_logging_level: SetLoggingLevelCall | None = None
    list_files: ListFilesCall | None = None
    read_file: ReadFileCall | None = None
    get_containers: GetContainersCall | None = None
    launch_nested_container: LaunchContainerCall | None = None
    wait_nested_container: ContainerCall | None = None
    kill_nested_container: KillContainerCall | None = None
    remove_nested_container: ContainerCall | None = None
    launch_nested_container_session: LaunchContainerCall | None = None
    launch_container: LaunchContainerCall | None = None
    wait_container: ContainerCall | None = None
    kill_container: KillContainerCall | None = None
    remove_container: ContainerCall | None = None
    attach_container_output: ContainerCall | None = None
    # ATTACH_CONTAINER_INPUT: every record of the streamed request body is a Call.
    attach_container_input: AttachContainerInputCall | None = None
    prune_images: Json | None = None


# --- responses ---------------------------------------------------------------------


class GetHealth(Message):
    healthy: bool


class GetFlags(Message):
    flags: list[Flag] = []


class GetVersion(Message):
    version_info: VersionInfo


class GetMetrics(Message):
    metrics: list[Metric] = []


class FrameworkEntry(Message):
    framework_info: FrameworkInfo


class GetFrameworks(Message):
    frameworks: list[FrameworkEntry] = []
    completed_frameworks: list[FrameworkEntry] = []


class ExecutorEntry(Message):
    executor_info: ExecutorInfo


class GetExecutors(Message):
    executors: list[ExecutorEntry] = []
    completed_executors: list[ExecutorEntry] = []


class GetTasks(Message):
    pending_tasks: list[Task] = []
    queued_tasks: list[Task] = []
    launched_tasks: list[Task] = []
    terminated_tasks: list[Task] = []
    completed_tasks: list[Task] = []


class GetState(Message):
    get_tasks: GetTasks
    get_executors: GetExecutors
    get_frameworks: GetFrameworks


class GetAgent(Message):
    agent_info: AgentInfo
    resource_providers: list[Json] = []


class Container(Message):
    container_id: ContainerID
    framework_id: Json | None = None
    executor_id: Json | None = None
    executor_name: str | None = None
    container_status: Json | None = None
    resource_statistics: Json | None = None


class GetContainers(Message):
    containers: list[Container] = []


class WaitContainer(Message):
    """The outcome of a container: `exit_status` is a raw wait(2) status."""

    exit_status: int | None = None
    state: TaskState | None = None
    reason: Reason | None = None
    message: str | None = None
    limitation: TaskResourceLimitation | None = None


class GetResourceProviders(Message):
    resource_providers: list[Json] = []


class Response(Message):
    type: CallType
    get_health: GetHealth | None = None
    get_flags: GetFlags | None = None
    get_version: GetVersion | None = None
    get_metrics: GetMetrics | None = None
    get_logging_level: GetLoggingLevel | None = None
    list_files: ListFiles | None = None
    read_file: ReadFile | None = None
    get_state: GetState | None = None
    get_containers: GetContainers | None = None
    get_frameworks: GetFrameworks | None = None
    get_executors: GetExecutors | None = None
    get_tasks: GetTasks | None = None
    get_agent: GetAgent | None = None
    get_operations: GetOperations | None = None
    get_resource_providers: GetResourceProviders | None = None
    wait_nested_container: WaitContainer | None = None
    wait_container: WaitContainer | None = None
