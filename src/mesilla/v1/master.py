"""Master operator API messages (`include/mesos/v1/master/master.proto`).

Mesilla answers the read-only calls, SUBSCRIBE, weights, TEARDOWN and
MARK_AGENT_GONE; the other call types parse (so a client gets a clear
"not supported" instead of a parse error) and carry their body as plain JSON.
"""

from __future__ import annotations

import enum

from mesilla.v1.mesos import (
    AgentCapability,
    AgentID,
    AgentInfo,
    DurationInfo,
    ExecutorInfo,
    Flag,
    FrameworkID,
    FrameworkInfo,
    GetLoggingLevel,
    GetOperations,
    Json,
    ListFiles,
    ListFilesCall,
    MasterInfo,
    Message,
    Metric,
    Offer,
    ReadFile,
    ReadFileCall,
    Resource,
    SetLoggingLevelCall,
    Task,
    TaskState,
    TaskStatus,
    TimeInfo,
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
    GET_AGENTS = "GET_AGENTS"
    GET_FRAMEWORKS = "GET_FRAMEWORKS"
    GET_EXECUTORS = "GET_EXECUTORS"
    GET_OPERATIONS = "GET_OPERATIONS"
    GET_TASKS = "GET_TASKS"
    GET_ROLES = "GET_ROLES"
    GET_WEIGHTS = "GET_WEIGHTS"
    UPDATE_WEIGHTS = "UPDATE_WEIGHTS"
    GET_MASTER = "GET_MASTER"
    SUBSCRIBE = "SUBSCRIBE"
    RESERVE_RESOURCES = "RESERVE_RESOURCES"
    UNRESERVE_RESOURCES = "UNRESERVE_RESOURCES"
    CREATE_VOLUMES = "CREATE_VOLUMES"
    DESTROY_VOLUMES = "DESTROY_VOLUMES"
    GROW_VOLUME = "GROW_VOLUME"
    SHRINK_VOLUME = "SHRINK_VOLUME"
    GET_MAINTENANCE_STATUS = "GET_MAINTENANCE_STATUS"
    GET_MAINTENANCE_SCHEDULE = "GET_MAINTENANCE_SCHEDULE"
    UPDATE_MAINTENANCE_SCHEDULE = "UPDATE_MAINTENANCE_SCHEDULE"
    START_MAINTENANCE = "START_MAINTENANCE"
    STOP_MAINTENANCE = "STOP_MAINTENANCE"
    DRAIN_AGENT = "DRAIN_AGENT"
    DEACTIVATE_AGENT = "DEACTIVATE_AGENT"
    REACTIVATE_AGENT = "REACTIVATE_AGENT"
    GET_QUOTA = "GET_QUOTA"
    UPDATE_QUOTA = "UPDATE_QUOTA"
    SET_QUOTA = "SET_QUOTA"
    REMOVE_QUOTA = "REMOVE_QUOTA"
    TEARDOWN = "TEARDOWN"
    MARK_AGENT_GONE = "MARK_AGENT_GONE"


class GetMetricsCall(Message):
    timeout: DurationInfo | None = None


class WeightInfo(Message):
    weight: float
    role: str | None = None


class UpdateWeights(Message):
    weight_infos: list[WeightInfo] = []


class Teardown(Message):
    framework_id: FrameworkID


class MarkAgentGone(Message):
    agent_id: AgentID


class Call(Message):
    type: CallType
    get_metrics: GetMetricsCall | None = None
    update_weights: UpdateWeights | None = None
    teardown: Teardown | None = None
    mark_agent_gone: MarkAgentGone | None = None
    set_logging_level: SetLoggingLevelCall | None = None
    list_files: ListFilesCall | None = None
    read_file: ReadFileCall | None = None
    reserve_resources: Json | None = None
    unreserve_resources: Json | None = None
    create_volumes: Json | None = None
    destroy_volumes: Json | None = None
    grow_volume: Json | None = None
    shrink_volume: Json | None = None
    update_maintenance_schedule: Json | None = None
    start_maintenance: Json | None = None
    stop_maintenance: Json | None = None
    drain_agent: Json | None = None
    deactivate_agent: Json | None = None
    reactivate_agent: Json | None = None
    update_quota: Json | None = None
    set_quota: Json | None = None
    remove_quota: Json | None = None


# --- responses -------------------------------------------------------------------------


class ResponseType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    GET_HEALTH = "GET_HEALTH"
    GET_FLAGS = "GET_FLAGS"
    GET_VERSION = "GET_VERSION"
    GET_METRICS = "GET_METRICS"
    GET_LOGGING_LEVEL = "GET_LOGGING_LEVEL"
    LIST_FILES = "LIST_FILES"
    READ_FILE = "READ_FILE"
    GET_STATE = "GET_STATE"
    GET_AGENTS = "GET_AGENTS"
    GET_FRAMEWORKS = "GET_FRAMEWORKS"
    GET_EXECUTORS = "GET_EXECUTORS"
    GET_OPERATIONS = "GET_OPERATIONS"
    GET_TASKS = "GET_TASKS"
    GET_ROLES = "GET_ROLES"
    GET_WEIGHTS = "GET_WEIGHTS"
    GET_MASTER = "GET_MASTER"
    GET_MAINTENANCE_STATUS = "GET_MAINTENANCE_STATUS"
    GET_MAINTENANCE_SCHEDULE = "GET_MAINTENANCE_SCHEDULE"
    GET_QUOTA = "GET_QUOTA"


class GetHealth(Message):
    healthy: bool


class GetFlags(Message):
    flags: list[Flag] = []


class GetVersion(Message):
    version_info: VersionInfo


class GetMetrics(Message):
    metrics: list[Metric] = []


class AgentResponse(Message):
    """`Response.GetAgents.Agent`."""

    agent_info: AgentInfo
    active: bool
    version: str
    deactivated: bool | None = None
    pid: str | None = None
    registered_time: TimeInfo | None = None
    reregistered_time: TimeInfo | None = None
    total_resources: list[Resource] = []
    allocated_resources: list[Resource] = []
    offered_resources: list[Resource] = []
    capabilities: list[AgentCapability] = []


class GetAgents(Message):
    agents: list[AgentResponse] = []
    recovered_agents: list[AgentInfo] = []


class FrameworkResponse(Message):
    """`Response.GetFrameworks.Framework`."""

    framework_info: FrameworkInfo
    active: bool
    connected: bool
    recovered: bool
    registered_time: TimeInfo | None = None
    reregistered_time: TimeInfo | None = None
    unregistered_time: TimeInfo | None = None
    offers: list[Offer] = []
    inverse_offers: list[Json] = []
    allocated_resources: list[Resource] = []
    offered_resources: list[Resource] = []


class GetFrameworks(Message):
    frameworks: list[FrameworkResponse] = []
    completed_frameworks: list[FrameworkResponse] = []


class ExecutorResponse(Message):
    """`Response.GetExecutors.Executor`."""

    executor_info: ExecutorInfo
    agent_id: AgentID


class GetExecutors(Message):
    executors: list[ExecutorResponse] = []


class GetTasks(Message):
    tasks: list[Task] = []
    unreachable_tasks: list[Task] = []
    completed_tasks: list[Task] = []


class GetState(Message):
    get_tasks: GetTasks | None = None
    get_executors: GetExecutors | None = None
    get_frameworks: GetFrameworks | None = None
    get_agents: GetAgents | None = None


class Role(Message):
    name: str
    weight: float
    frameworks: list[FrameworkID] = []
    resources: list[Resource] = []


class GetRoles(Message):
    roles: list[Role] = []


class GetWeights(Message):
    weight_infos: list[WeightInfo] = []


class GetMaster(Message):
    master_info: MasterInfo | None = None
    start_time: float | None = None
    elected_time: float | None = None


class Response(Message):
    type: ResponseType
    get_health: GetHealth | None = None
    get_flags: GetFlags | None = None
    get_version: GetVersion | None = None
    get_metrics: GetMetrics | None = None
    get_state: GetState | None = None
    get_agents: GetAgents | None = None
    get_frameworks: GetFrameworks | None = None
    get_executors: GetExecutors | None = None
    get_tasks: GetTasks | None = None
    get_roles: GetRoles | None = None
    get_weights: GetWeights | None = None
    get_master: GetMaster | None = None
    get_logging_level: GetLoggingLevel | None = None
    list_files: ListFiles | None = None
    read_file: ReadFile | None = None
    get_operations: GetOperations | None = None


# --- events ------------------------------------------------------------------------------


class EventType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    SUBSCRIBED = "SUBSCRIBED"
    TASK_ADDED = "TASK_ADDED"
    TASK_UPDATED = "TASK_UPDATED"
    AGENT_ADDED = "AGENT_ADDED"
    AGENT_REMOVED = "AGENT_REMOVED"
    FRAMEWORK_ADDED = "FRAMEWORK_ADDED"
    FRAMEWORK_UPDATED = "FRAMEWORK_UPDATED"
    FRAMEWORK_REMOVED = "FRAMEWORK_REMOVED"
    HEARTBEAT = "HEARTBEAT"


class Subscribed(Message):
    get_state: GetState | None = None
    heartbeat_interval_seconds: float | None = None


class TaskAdded(Message):
    task: Task


class TaskUpdated(Message):
    framework_id: FrameworkID
    status: TaskStatus  # the latest status the framework acknowledged
    state: TaskState  # the task's latest state


class AgentAdded(Message):
    agent: AgentResponse


class AgentRemoved(Message):
    agent_id: AgentID


class FrameworkAdded(Message):
    framework: FrameworkResponse


class FrameworkUpdated(Message):
    framework: FrameworkResponse


class FrameworkRemoved(Message):
    framework_info: FrameworkInfo


class Event(Message):
    type: EventType
    subscribed: Subscribed | None = None
    task_added: TaskAdded | None = None
    task_updated: TaskUpdated | None = None
    agent_added: AgentAdded | None = None
    agent_removed: AgentRemoved | None = None
    framework_added: FrameworkAdded | None = None
    framework_updated: FrameworkUpdated | None = None
    framework_removed: FrameworkRemoved | None = None
