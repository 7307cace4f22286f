"""Mesos's v0 messages (`src/messages/messages.proto`, package ``mesosproto`` in
mesos-go's copy) as v1's JSON form: the same dicts the v1 types convert from,
with v0's 'slave' named 'agent' as in v1."""

from __future__ import annotations

from typing import Any

from mesilla.v1 import proto

INTERNAL = "mesos.internal."  # the message names on the wire
_PACKAGE = "mesosproto."


def renamed(obj: Any, old: str, new: str) -> Any:
    """`obj` with `old` replaced by `new` in member names and in the names of reasons
    and sources (`slave_id`, `REASON_SLAVE_REMOVED`, `SOURCE_SLAVE`)."""
    if isinstance(obj, dict):
        return {k.replace(old, new): renamed(v, old, new) for k, v in obj.items()}
    if isinstance(obj, list):
        return [renamed(v, old, new) for v in obj]
    if isinstance(obj, str) and obj.startswith(("REASON_", "SOURCE_")):
        return obj.replace(old.upper(), new.upper())
    return obj


def decode(name: str, body: bytes) -> dict[str, Any]:
    """The v0 message `name` (``RegisterFrameworkMessage``); BadRequest if it does not decode."""
    cls = proto.message_class(_PACKAGE + name, "v0")
    message: dict[str, Any] = renamed(proto.to_dict(proto.parse(body, cls)), "slave", "agent")
    return message


def encode(name: str, message: dict[str, Any]) -> bytes:
    cls = proto.message_class(_PACKAGE + name, "v0")
    return proto.from_dict(renamed(message, "agent", "slave"), cls).SerializePartialToString()
