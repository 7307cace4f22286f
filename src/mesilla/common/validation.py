"""Validation of the identifiers that come from outside, by Mesos's rules.

Ids become file and directory names (sandboxes, checkpoints, runtime state),
so an id is checked before anything is looked up or touched by it, at every
entry point: the v1 calls of every API, the agent<->master protocol, and the
names read back from a work directory at recovery.

* `validate_id` is Mesos's `common::validation::validateID`: not empty, no
  '/', '\\' or control character; Mesilla also refuses '.' and '..' and more
  than NAME_MAX (255) bytes, which no file name can be.
* `validate_container_id` adds Mesos's `validateContainerId` rules: no '.' or
  space, at most MAX_CONTAINER_ID_LENGTH bytes, every parent valid too.
* `validate_ids` finds every id (FrameworkID, AgentID, ExecutorID, TaskID,
  OfferID, OperationID, ContainerID) anywhere in a decoded message and names
  the first invalid one by its field path, as Mesos does:
  ``'remove_container.container_id' is invalid: ...``. It follows the typed
  fields only, and only those whose type can hold an id (computed once per
  message type); parts kept as plain JSON are passed through, never read as ids.

Every function returns None when the input is valid, else raises `BadRequest`
whose message is the reason (Mesos's words) and whose `field` is the id's field
path where it has one; callers put their own prefix in front of the message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
import msgspec.inspect as mi

from mesilla.common.errors import BadRequest
from mesilla.v1.mesos import (
    AgentID,
    ContainerID,
    ExecutorID,
    FrameworkID,
    OfferID,
    OperationID,
    TaskID,
)

# Mesos's MAX_CONTAINER_ID_LENGTH: a container id, with its run's prefix, must fit in a path component.
MAX_CONTAINER_ID_LENGTH = 242
# NAME_MAX: the longest file name, so the longest id that can become one.
MAX_ID_LENGTH = 255

# Path separators, control characters (Unicode's Cc: C0, DEL and C1) and lone surrogates,
# which no file name can encode.
_INVALID_CHARACTERS = re.compile(r"[/\\\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _shown(value: str) -> str:
    """The value as an error message can carry it (control characters escaped)."""
    return value if value.isprintable() else value.encode("unicode_escape").decode("ascii")


def validate_id(value: str) -> None:
    """Raises `BadRequest` saying why `value` is not a valid Mesos id."""
    if not value:
        raise BadRequest("ID must be non-empty")
    if value in (".", ".."):
        raise BadRequest(f"'{value}' is not a valid ID: it names a directory")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_ID_LENGTH:
        raise BadRequest(f"'{_shown(value)}' exceeds the maximum length ({MAX_ID_LENGTH})")
    if _INVALID_CHARACTERS.search(value):
        raise BadRequest(f"'{_shown(value)}' contains invalid characters")


def validate_container_id(container_id: ContainerID) -> None:
    """Raises `BadRequest` saying why `container_id` (or one of its parents) is not a valid ContainerID."""
    value = container_id.value
    validate_id(value)
    if len(value.encode("utf-8", "surrogatepass")) > MAX_CONTAINER_ID_LENGTH:
        raise BadRequest(
            f"'ContainerID.value' '{_shown(value)}' exceeds the maximum length "
            f"({MAX_CONTAINER_ID_LENGTH})"
        )
    # '.' joins the parts of a container id's string form; spaces confuse logs and paths.
    if "." in value or " " in value:
        raise BadRequest(f"'ContainerID.value' '{_shown(value)}' contains invalid characters")
    if container_id.parent is not None:
        try:
            validate_container_id(container_id.parent)
        except BadRequest as exc:
            raise BadRequest(f"'ContainerID.parent' is invalid: {exc.reason}") from exc


def _value_id(message: Any) -> None:
    validate_id(message.value)


_CHECKS: dict[type, Callable[[Any], None]] = {
    FrameworkID: _value_id,
    AgentID: _value_id,
    ExecutorID: _value_id,
    TaskID: _value_id,
    OfferID: _value_id,
    OperationID: _value_id,
    ContainerID: validate_container_id,
}


def validate_ids(message: Any) -> None:
    """Raises `BadRequest` for the first invalid id anywhere in `message`, named by its field path."""
    found = _walk(message)
    if found is not None:
        error, steps = found
        path = "".join(reversed(steps)).lstrip(".")
        raise BadRequest(f"'{path}' is invalid: {error.reason}", field=path) from error


_SEQUENCES = (list, tuple, set, frozenset)


def _walk(value: Any) -> tuple[BadRequest, list[str]] | None:
    """(error, the path's steps from the id up) of the first invalid id; paths built only then."""
    kind = type(value)
    check = _CHECKS.get(kind)
    if check is not None:
        try:
            check(value)
        except BadRequest as exc:
            return exc, []
        return None
    if kind in _SEQUENCES:
        for i, item in enumerate(value):
            found = _walk(item)
            if found is not None:
                found[1].append(f"[{i}]")
                return found
        return None
    if kind is dict:
        for key, item in value.items():
            found = _walk(item)
            if found is not None:
                found[1].append(f".{key}")
                return found
        return None
    for name, encode_name in _walked_fields(kind):
        item = getattr(value, name)
        if item is not None:
            found = _walk(item)
            if found is not None:
                found[1].append(f".{encode_name}")
                return found
    return None


# Per message type, computed once; a dict, as mypy does not take a class for
# functools.cache's Hashable argument.
_WALKED_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}


def _walked_fields(cls: type) -> tuple[tuple[str, str], ...]:
    """(attribute, JSON name) of the fields of message type `cls` whose values may hold an id."""
    fields = _WALKED_FIELDS.get(cls)
    if fields is None:
        fields = ()
        if issubclass(cls, msgspec.Struct):
            info = mi.type_info(cls)
            assert isinstance(info, mi.StructType)
            fields = tuple(
                (f.name, f.encode_name) for f in info.fields if _may_hold_ids(f.type, set())
            )
        _WALKED_FIELDS[cls] = fields
    return fields


def _may_hold_ids(t: mi.Type, seen: set[type]) -> bool:
    if isinstance(t, mi.StructType):
        if t.cls in _CHECKS:
            return True
        if t.cls in seen:
            return False
        seen.add(t.cls)
        return any(_may_hold_ids(f.type, seen) for f in t.fields)
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return _may_hold_ids(t.item_type, seen)
    if isinstance(t, mi.TupleType):
        return any(_may_hold_ids(item, seen) for item in t.item_types)
    if isinstance(t, mi.DictType):
        return _may_hold_ids(t.value_type, seen)
    if isinstance(t, mi.UnionType):
        return any(_may_hold_ids(member, seen) for member in t.types)
    return False
