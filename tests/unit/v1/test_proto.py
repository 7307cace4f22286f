"""The protobuf encoding: Mesos's messages (compiled from mesos-go's copy of
Mesos's .proto files) convert to and from the same typed v1 objects as JSON."""

from __future__ import annotations

import base64
import enum
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.v1.test_codec_nulls import RESOURCES, TASK, VALID, without_nulls

from mesilla.common.errors import BadRequest
from mesilla.v1 import agent as agent_api
from mesilla.v1 import codec, proto, scheduler
from mesilla.v1 import executor as executor_api
from mesilla.v1 import master as master_api

STATUS = {
    "task_id": {"value": "t1"},
    "state": "TASK_RUNNING",
    "source": "SOURCE_EXECUTOR",
    "agent_id": {"value": "a1"},
    "timestamp": 1700000000.25,
    "uuid": base64.b64encode(b"\x00\xffuuid-bytes\x80").decode(),
    "data": base64.b64encode(b"\x01\x02").decode(),
}
OFFER = {
    "id": {"value": "o1"},
    "framework_id": {"value": "f1"},
    "agent_id": {"value": "a1"},
    "hostname": "h",
    "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 2.5}, "role": "*"}],
}
MESSAGES: list[tuple[type[Any], dict[str, Any]]] = [
    # (mesos-go's agent.Call predates GET_CONTAINERS's `get_containers`: left out)
    *((t, without_nulls(b)) for t, b in VALID if t is not agent_api.Call),
    (scheduler.Call, {"type": "ACKNOWLEDGE", "framework_id": {"value": "f1"}, "acknowledge": {
        "agent_id": {"value": "a1"}, "task_id": {"value": "t1"}, "uuid": STATUS["uuid"]}}),
    (scheduler.Call, {"type": "DECLINE", "framework_id": {"value": "f1"},
                      "decline": {"offer_ids": [{"value": "o1"}], "filters": {"refuse_seconds": 3600.0}}}),
    (scheduler.Call, {"type": "KILL", "framework_id": {"value": "f1"}, "kill": {"task_id": {"value": "t1"}}}),
    (scheduler.Call, {"type": "RECONCILE", "framework_id": {"value": "f1"},
                      "reconcile": {"tasks": [{"task_id": {"value": "t1"}}]}}),
    (scheduler.Call, {"type": "MESSAGE", "framework_id": {"value": "f1"}, "message": {
        "agent_id": {"value": "a1"}, "executor_id": {"value": "e1"}, "data": "aGk="}}),
    (scheduler.Event, {"type": "SUBSCRIBED", "subscribed": {
        "framework_id": {"value": "f1"}, "heartbeat_interval_seconds": 15.0}}),
    (scheduler.Event, {"type": "OFFERS", "offers": {"offers": [OFFER]}}),
    (scheduler.Event, {"type": "UPDATE", "update": {"status": STATUS}}),
    (scheduler.Event, {"type": "FAILURE", "failure": {"agent_id": {"value": "a1"}, "status": -1}}),
    (executor_api.Call, {"type": "UPDATE", "framework_id": {"value": "f1"}, "executor_id": {"value": "e1"},
                         "update": {"status": STATUS}}),
    (executor_api.Event, {"type": "LAUNCH", "launch": {"task": without_nulls(TASK)}}),
    (executor_api.Event, {"type": "ACKNOWLEDGED", "acknowledged": {
        "task_id": {"value": "t1"}, "uuid": STATUS["uuid"]}}),
    (master_api.Response, {"type": "GET_HEALTH", "get_health": {"healthy": True}}),
    (master_api.Response, {"type": "GET_TASKS", "get_tasks": {"tasks": [{
        "name": "t", "task_id": {"value": "t1"}, "framework_id": {"value": "f1"}, "agent_id": {"value": "a1"},
        "state": "TASK_RUNNING", "resources": RESOURCES[1:], "statuses": [STATUS]}]}}),
    (agent_api.Response, {"type": "GET_HEALTH", "get_health": {"healthy": True}}),
    (agent_api.Call, {"type": "KILL_NESTED_CONTAINER", "kill_nested_container": {
        "container_id": {"value": "c2", "parent": {"value": "c1"}}, "signal": 9}}),
]  # fmt: skip


def through_protobuf(type_: type[Any], body: dict[str, Any]) -> Any:
    data = codec.encode(msgspec.convert(body, type_))
    return proto.decode(proto.encode(data, type_), type_)


@pytest.mark.parametrize(("type_", "body"), MESSAGES)
def test_a_message_survives_protobuf_as_the_same_typed_object(type_: type[Any], body: dict[str, Any]) -> None:
    assert through_protobuf(type_, body) == msgspec.convert(body, type_)


def test_bytes_and_64_bit_integers_read_as_mesos_writes_them_in_json() -> None:
    cls = proto.message_class("mesos.scheduler.Event")
    event = proto.from_dict({"type": "UPDATE", "update": {"status": STATUS}}, cls)
    as_json = proto.to_dict(event)
    assert as_json["update"]["status"]["uuid"] == STATUS["uuid"]
    response = proto.from_dict(
        {"type": "GET_AGENTS", "get_agents": {"agents": [{
            "agent_info": {"hostname": "h"}, "active": True, "pid": "slave(1)@h:5051",
            "registered_time": {"nanoseconds": 1_700_000_000_123_456_789}}]}},
        proto.message_class("mesos.master.Response"),
    )  # fmt: skip
    assert proto.to_dict(response)["get_agents"]["agents"][0]["registered_time"] == {
        "nanoseconds": 1_700_000_000_123_456_789
    }


def _enum_names(full_name: str, field: str) -> set[str]:
    enum_type = proto.descriptor(full_name).fields_by_name[field].enum_type
    assert enum_type is not None
    return set(enum_type.values_by_name)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (scheduler.CallType, "mesos.scheduler.Call"),
        (scheduler.EventType, "mesos.scheduler.Event"),
        (executor_api.CallType, "mesos.executor.Call"),
        (executor_api.EventType, "mesos.executor.Event"),
        (master_api.CallType, "mesos.master.Call"),
        (master_api.EventType, "mesos.master.Event"),
        (agent_api.CallType, "mesos.agent.Call"),
    ],
)
def test_every_call_and_event_type_both_sides_know_crosses_protobuf(
    ours: type[enum.Enum], theirs: str
) -> None:
    type_ = next(t for t, name in proto.MESSAGES.items() if name == theirs)
    shared = {member.value for member in ours} & _enum_names(theirs, "type")
    assert len(shared) > 3
    ids = (
        {"framework_id": {"value": "f1"}, "executor_id": {"value": "e1"}}
        if type_ is executor_api.Call
        else {}
    )
    for name in sorted(shared):
        body = {"type": name, **ids}
        assert through_protobuf(type_, body) == msgspec.convert(body, type_)


@pytest.mark.parametrize(
    "body",
    [
        b"\x08",  # truncated varint
        b"\x12\x05ab",  # truncated length-delimited field
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # an over-long varint
        b"\x0a\x03foo",  # the right bytes of the wrong message: no `type`
    ],
)
def test_malformed_protobuf_is_a_400(body: bytes) -> None:
    with pytest.raises(BadRequest):
        proto.decode(body, scheduler.Call)


def test_a_message_of_another_type_is_a_400_naming_what_is_missing() -> None:
    master_call = proto.encode(json.dumps({"type": "GET_STATE"}).encode(), master_api.Call)
    with pytest.raises(BadRequest):
        proto.decode(master_call + b"\x1a\x02\x08\x01", executor_api.Call)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200), type_=st.sampled_from(sorted(proto.MESSAGES, key=str)))
def test_any_bytes_decode_or_are_a_400(body: bytes, type_: type[Any]) -> None:
    try:
        proto.decode(body, type_)
    except BadRequest:
        pass


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_valid_messages_with_bytes_flipped_decode_or_are_a_400(data: st.DataObject) -> None:
    type_, body = data.draw(st.sampled_from(MESSAGES))
    raw = bytearray(proto.encode(codec.encode(msgspec.convert(body, type_)), type_))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        proto.decode(bytes(raw[:cut]), type_)
    except BadRequest:
        pass
