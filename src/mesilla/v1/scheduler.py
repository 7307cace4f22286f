"""Scheduler API messages (`include/mesos/v1/scheduler/scheduler.proto`)."""

from __future__ import annotations

import enum

from mesilla.v1.mesos import (
    AgentID,
    ExecutorID,
    Filters,
    FrameworkID,
    FrameworkInfo,
    Json,
    KillPolicy,
    MasterInfo,
    Message,
    Offer,
    OfferID,
    Operation,
    Request,
    TaskID,
    TaskStatus,
)


class CallType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    SUBSCRIBE = "SUBSCRIBE"
    TEARDOWN = "TEARDOWN"
    ACCEPT = "ACCEPT"
    DECLINE = "DECLINE"
    ACCEPT_INVERSE_OFFERS = "ACCEPT_INVERSE_OFFERS"
    DECLINE_INVERSE_OFFERS = "DECLINE_INVERSE_OFFERS"
    REVIVE = "REVIVE"
    KILL = "KILL"
    SHUTDOWN = "SHUTDOWN"
    ACKNOWLEDGE = "ACKNOWLEDGE"
    ACKNOWLEDGE_OPERATION_STATUS = "ACKNOWLEDGE_OPERATION_STATUS"
    RECONCILE = "RECONCILE"
    RECONCILE_OPERATIONS = "RECONCILE_OPERATIONS"
    MESSAGE = "MESSAGE"
    REQUEST = "REQUEST"
    SUPPRESS = "SUPPRESS"
    UPDATE_FRAMEWORK = "UPDATE_FRAMEWORK"


class Subscribe(Message):
    framework_info: FrameworkInfo
    force: bool | None = None
    suppressed_roles: list[str] = []
    offer_constraints: Json | None = None


class Accept(Message):
    offer_ids: list[OfferID] = []
    operations: list[Operation] = []
    filters: Filters | None = None


class Decline(Message):
    offer_ids: list[OfferID] = []
    filters: Filters | None = None


class Revive(Message):
    roles: list[str] = []


class Suppress(Message):
    roles: list[str] = []


class Kill(Message):
    task_id: TaskID
    agent_id: AgentID | None = None
    kill_policy: KillPolicy | None = None


class Shutdown(Message):
    executor_id: ExecutorID
    agent_id: AgentID


class Acknowledge(Message):
    agent_id: AgentID
    task_id: TaskID
    uuid: bytes


class ReconcileTask(Message):
    task_id: TaskID
    agent_id: AgentID | None = None


class Reconcile(Message):
    tasks: list[ReconcileTask] = []


class FrameworkMessage(Message):
    agent_id: AgentID
    executor_id: ExecutorID
    data: bytes


class RequestCall(Message):
    requests: list[Request] = []


class UpdateFramework(Message):
    framework_info: FrameworkInfo
    suppressed_roles: list[str] = []
    offer_constraints: Json | None = None


class Call(Message):
    type: CallType
    framework_id: FrameworkID | None = None
    subscribe: Subscribe | None = None
    accept: Accept | None = None
    decline: Decline | None = None
    accept_inverse_offers: Json | None = None
    decline_inverse_offers: Json | None = None
    revive: Revive | None = None
    kill: Kill | None = None
    shutdown: Shutdown | None = None
    acknowledge: Acknowledge | None = None
    acknowledge_operation_status: Json | None = None
    reconcile: Reconcile | None = None
    reconcile_operations: Json | None = None
    message: FrameworkMessage | None = None
    request: RequestCall | None = None
    suppress: Suppress | None = None
    update_framework: UpdateFramework | None = None


class EventType(enum.Enum):
    UNKNOWN = "UNKNOWN"
    SUBSCRIBED = "SUBSCRIBED"
    OFFERS = "OFFERS"
    INVERSE_OFFERS = "INVERSE_OFFERS"
    RESCIND = "RESCIND"
    RESCIND_INVERSE_OFFER = "RESCIND_INVERSE_OFFER"
    UPDATE = "UPDATE"
    UPDATE_OPERATION_STATUS = "UPDATE_OPERATION_STATUS"
    MESSAGE = "MESSAGE"
    FAILURE = "FAILURE"
    ERROR = "ERROR"
    HEARTBEAT = "HEARTBEAT"


class Subscribed(Message):
    framework_id: FrameworkID
    heartbeat_interval_seconds: float | None = None
    master_info: MasterInfo | None = None


class Offers(Message):
    offers: list[Offer] = []
    inverse_offers: list[Json] = []


class Rescind(Message):
    offer_id: OfferID


class Update(Message):
    status: TaskStatus


class Failure(Message):
    agent_id: AgentID | None = None
    executor_id: ExecutorID | None = None
    status: int | None = None


class Error(Message):
    message: str


class Event(Message):
    type: EventType
    subscribed: Subscribed | None = None
    offers: Offers | None = None
    rescind: Rescind | None = None
    update: Update | None = None
    message: FrameworkMessage | None = None
    failure: Failure | None = None
    error: Error | None = None
