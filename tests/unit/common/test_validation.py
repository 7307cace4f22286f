"""Mesos's id rules (`common::validation::validateID`, `validateContainerId`) and the walk
that finds every id of a message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from mesilla.common.errors import BadRequest
from mesilla.common.validation import (
    MAX_CONTAINER_ID_LENGTH,
    MAX_ID_LENGTH,
    validate_container_id,
    validate_id,
    validate_ids,
)
from mesilla.v1 import agent, executor, internal, master, scheduler
from mesilla.v1.mesos import ContainerID

BAD_IDS = ["", ".", "..", "../x", "a/b", "/", "a\\b", "a\0b", "a\nb", "\x7f", "\x85", "x" * 256]


@pytest.mark.parametrize("value", BAD_IDS)
def test_bad_ids(value: str) -> None:
    with pytest.raises(BadRequest):
        validate_id(value)


@pytest.mark.parametrize("value", ["task-1.2_x", "a b", "\u2024\u2024", "\uff0f", "x" * MAX_ID_LENGTH])
def test_good_ids(value: str) -> None:
    """What Mesos accepts: lookalikes of '.' and '/' are ordinary characters in a file name."""
    validate_id(value)


def _reason(validate: Callable[[Any], None], value: Any) -> str:
    with pytest.raises(BadRequest) as caught:
        validate(value)
    return caught.value.reason


def test_messages_follow_mesos() -> None:
    assert _reason(validate_id, "") == "ID must be non-empty"
    assert _reason(validate_id, "a/b") == "'a/b' contains invalid characters"
    assert _reason(validate_container_id, ContainerID(value="a.b")) == (
        "'ContainerID.value' 'a.b' contains invalid characters"
    )
    assert _reason(validate_container_id, ContainerID(value="c", parent=ContainerID(value=".."))) == (
        "'ContainerID.parent' is invalid: '..' is not a valid ID: it names a directory"
    )


@pytest.mark.parametrize("value", ["a.b", "a b", "x" * (MAX_CONTAINER_ID_LENGTH + 1)])
def test_container_ids_have_rules_of_their_own(value: str) -> None:
    if len(value) <= MAX_ID_LENGTH:
        validate_id(value)
    with pytest.raises(BadRequest):
        validate_container_id(ContainerID(value=value))


def test_every_parent_is_checked() -> None:
    deep = ContainerID(value="a", parent=ContainerID(value="b", parent=ContainerID(value="a/b")))
    assert "'ContainerID.parent' is invalid: 'ContainerID.parent' is invalid" in _reason(
        validate_container_id, deep
    )


@pytest.mark.parametrize(
    ("type_", "message", "where"),
    [
        (
            agent.Call,
            {"type": "REMOVE_CONTAINER", "remove_container": {"container_id": {"value": "../../v"}}},
            "remove_container.container_id",
        ),
        (
            scheduler.Call,
            {
                "type": "ACCEPT",
                "framework_id": {"value": "f"},
                "accept": {
                    "offer_ids": [{"value": "o"}],
                    "operations": [{"type": "LAUNCH", "id": {"value": "a/b"}}],
                },
            },
            "accept.operations[0].id",
        ),
        (
            executor.Call,
            {"type": "HEARTBEAT", "framework_id": {"value": "f"}, "executor_id": {"value": ".."}},
            "executor_id",
        ),
        (
            master.Call,
            {"type": "TEARDOWN", "teardown": {"framework_id": {"value": "a\\b"}}},
            "teardown.framework_id",
        ),
        (
            internal.AgentEvent,
            {
                "type": "KILL_TASK",
                "kill_task": {"framework_id": {"value": "f"}, "task_id": {"value": "../t"}},
            },
            "kill_task.task_id",
        ),
    ],
)
def test_the_walk_names_the_field(type_: type, message: dict[str, Any], where: str) -> None:
    with pytest.raises(BadRequest) as caught:
        validate_ids(msgspec.convert(message, type_))
    assert caught.value.reason.startswith(f"'{where}' is invalid: "), caught.value.reason
    assert caught.value.field == where


def test_parts_kept_as_plain_json_are_not_read_as_ids() -> None:
    """Mesilla reads ids from typed fields only; JSON it passes through is not its concern."""
    call = msgspec.convert(
        {"type": "DRAIN_AGENT", "drain_agent": {"agent_id": {"value": "/"}}}, master.Call
    )
    validate_ids(call)


def test_valid_messages_pass() -> None:
    call = msgspec.convert(
        {
            "type": "LAUNCH_CONTAINER",
            "launch_container": {
                "container_id": {"value": "c", "parent": {"value": "p"}},
                "command": {"value": "true"},
            },
        },
        agent.Call,
    )
    validate_ids(call)
