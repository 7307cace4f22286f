"""Decoding and encoding of v1 messages at the HTTP boundary.

Decode errors become `BadRequest` carrying msgspec's message, which names the
offending field (``Expected `str`, got `int` - at `$.framework_info.user```),
and that field as its `field` (``framework_info.user``).

A JSON `null` is an unset field, as Mesos reads it (stout's protobuf parser
skips `JSON::Null`): mesos-go writes empty repeated fields as `null`. The typed
decode runs first; only a body it refuses and that holds a null is parsed
again with its nulls dropped, so valid bodies pay nothing.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from mesilla.common import documents
from mesilla.common.errors import BadRequest

T = TypeVar("T")

# Knows `documents.Pieces`, the pre-encoded lists of the large answers.
_encoder = msgspec.json.Encoder(enc_hook=documents.enc_hook)


def decode(data: bytes | str, type_: type[T]) -> T:
    try:
        return msgspec.json.decode(data, type=type_)
    except msgspec.ValidationError as exc:
        if (b"null" in data) if isinstance(data, bytes) else ("null" in data):
            try:
                parsed = msgspec.json.decode(data)
            except msgspec.DecodeError as malformed:
                raise BadRequest(f"Failed to parse body into JSON: {malformed}") from malformed
            return convert(parsed, type_)
        raise _invalid(type_, exc) from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"Failed to parse body into JSON: {exc}") from exc


def convert(obj: Any, type_: type[T]) -> T:
    """Builds a message from already-parsed JSON (dicts, lists, scalars)."""
    try:
        return msgspec.convert(obj, type=type_)
    except msgspec.ValidationError as first:
        try:
            return msgspec.convert(_without_nulls(obj), type=type_)
        except msgspec.ValidationError:
            # The first error names the field as the client wrote it.
            raise _invalid(type_, first) from first


def _invalid(type_: type, exc: msgspec.ValidationError) -> BadRequest:
    # msgspec ends its message with the path: "... - at `$.task_infos[0].task_id`".
    _, at, path = str(exc).rpartition(" - at `$")
    field = path.rstrip("`").lstrip(".") if at else None
    return BadRequest(f"Failed to validate {type_.__name__}: {exc}", field=field or None)


def _without_nulls(obj: Any) -> Any:
    """`obj` with every object member whose value is null left out, at any depth."""
    if isinstance(obj, dict):
        return {k: _without_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_without_nulls(v) for v in obj]
    return obj


def encode(msg: Any) -> bytes:
    """Compact single-line JSON, as Mesos writes its stream records."""
    return _encoder.encode(msg)


def to_builtins(msg: Any) -> Any:
    return msgspec.to_builtins(msg)
