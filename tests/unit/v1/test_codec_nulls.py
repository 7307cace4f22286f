"""JSON `null` is an unset field on every v1 API, as Mesos reads it (mesos-go sends it)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mesilla.common.errors import BadRequest
from mesilla.v1 import agent as agent_api
from mesilla.v1 import codec, scheduler
from mesilla.v1 import executor as executor_api
from mesilla.v1 import master as master_api

RESOURCES = [
    {"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}, "reservations": None},
    {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}},
]
TASK = {
    "name": "t",
    "task_id": {"value": "t1"},
    "agent_id": {"value": "a1"},
    "resources": RESOURCES,
    "command": {"value": "echo hi", "uris": None, "environment": {"variables": None}},
}
VALID: list[tuple[type[Any], dict[str, Any]]] = [
    # What mesos-go 0.0.6 sends in JSON mode, nulls and all.
    (scheduler.Call, {
        "type": "SUBSCRIBE",
        "subscribe": {"framework_info": {"user": "root", "name": "fw", "capabilities": None,
                                         "roles": None, "labels": None}},
    }),
    (scheduler.Call, {
        "type": "ACCEPT",
        "framework_id": {"value": "f1"},
        "accept": {
            "offer_ids": [{"value": "o1"}],
            "operations": [{"type": "LAUNCH", "launch": {"task_infos": [TASK]}}],
            "filters": None,
        },
    }),
    (scheduler.Call, {
        "type": "ACCEPT",
        "framework_id": {"value": "f1"},
        "accept": {"offer_ids": [{"value": "o1"}], "operations": [{
            "type": "LAUNCH_GROUP",
            "launch_group": {
                "executor": {"type": "DEFAULT", "executor_id": {"value": "e"},
                             "resources": RESOURCES, "command": None},
                "task_group": {"tasks": [TASK]},
            },
        }]},
    }),
    (master_api.Call, {"type": "GET_STATE", "get_state": None}),
    (agent_api.Call, {"type": "GET_CONTAINERS", "get_containers": {"show_nested": None}}),
    (executor_api.Call, {
        "type": "SUBSCRIBE",
        "framework_id": {"value": "f1"},
        "executor_id": {"value": "e1"},
        "subscribe": {"unacknowledged_tasks": None, "unacknowledged_updates": None},
    }),
]  # fmt: skip


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


@pytest.mark.parametrize(("type_", "body"), VALID)
def test_a_null_reads_as_an_unset_field(type_: type[Any], body: dict[str, Any]) -> None:
    assert codec.decode(json.dumps(body).encode(), type_) == msgspec.convert(
        without_nulls(body), type_
    )


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every member of every object, at any depth."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            found.append((*prefix, k))
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


def _set_null(body: Any, path: tuple[Any, ...]) -> None:
    for step in path[:-1]:
        body = body[step]
    body[path[-1]] = None


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_nulls_sprinkled_over_valid_calls_mean_unset_or_a_clear_400(data: st.DataObject) -> None:
    type_, body = data.draw(st.sampled_from(VALID))
    body = json.loads(json.dumps(without_nulls(body)))
    paths = _paths(body)
    chosen = data.draw(st.lists(st.sampled_from(paths), max_size=4, unique=True))
    for path in sorted(chosen, key=len, reverse=True):  # deepest first: a parent may go null
        try:
            _set_null(body, path)
        except (TypeError, KeyError, IndexError):
            pass  # its parent is null already
    raw = json.dumps(body).encode()
    try:
        expected = msgspec.convert(without_nulls(body), type_)
    except msgspec.ValidationError:
        # A required field made null is still missing: a 400 that names the field.
        with pytest.raises(BadRequest, match=r"at `\$"):
            codec.decode(raw, type_)
    else:
        assert codec.decode(raw, type_) == expected


def test_a_wrong_type_is_still_refused_with_the_field() -> None:
    raw = b'{"type":"SUBSCRIBE","subscribe":{"framework_info":{"user":3,"name":null}}}'
    with pytest.raises(
        BadRequest, match=r"Expected `str`, got `int` - at `\$.subscribe.framework_info.user`"
    ):
        codec.decode(raw, scheduler.Call)


def test_a_malformed_body_with_a_null_is_still_a_400() -> None:
    # Python's json writes inf as Infinity: not JSON; the null sends it down the second parse.
    raw = b'{"type":"SUBSCRIBE","executor_id":[Infinity],"subscribe":null}'
    with pytest.raises(BadRequest, match="Failed to parse body into JSON"):
        codec.decode(raw, executor_api.Call)
