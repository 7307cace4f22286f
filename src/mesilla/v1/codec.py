"""Decoding and encoding of v1 messages at the HTTP boundary.

Decode errors become `BadRequest` carrying msgspec's message, which names the
offending field (``Expected `str`, got `int` - at `$.framework_info.user```).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from mesilla.common.errors import BadRequest

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


def decode(data: bytes | str, type_: type[T]) -> T:
    try:
        return msgspec.json.decode(data, type=type_)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"Failed to validate {type_.__name__}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"Failed to parse body into JSON: {exc}") from None


def convert(obj: Any, type_: type[T]) -> T:
    """Builds a message from already-parsed JSON (dicts, lists, scalars)."""
    try:
        return msgspec.convert(obj, type=type_)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"Failed to validate {type_.__name__}: {exc}") from None


def encode(msg: Any) -> bytes:
    """Compact single-line JSON, as Mesos writes its stream records."""
    return _encoder.encode(msg)


def to_builtins(msg: Any) -> Any:
    return msgspec.to_builtins(msg)
