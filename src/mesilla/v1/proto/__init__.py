"""The protobuf encoding of the v1 APIs, by Mesos's own messages.

A protobuf body converts to the dict of Mesos's JSON form and then through the
same typed decode as a JSON body (`mesilla.v1.codec.convert`), and an answer is
encoded to JSON first and parsed into the protobuf message, so both encodings
share one code path and one set of typed objects. The messages are loaded from
the descriptor sets `build` compiles from Mesos's .proto files (built here
when missing). Fields or enum values newer than those files are left out of
protobuf answers, as a client built from them could not read them either.
"""

from __future__ import annotations

import base64
import functools
import os
import threading
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from mesilla.common.errors import BadRequest
from mesilla.v1 import agent, codec, executor, master, scheduler
from mesilla.v1.proto import build

T = TypeVar("T")

# The v1 types with a protobuf form, by their message in the compiled files.
MESSAGES: dict[type, str] = {
    scheduler.Call: "mesos.scheduler.Call",
    scheduler.Event: "mesos.scheduler.Event",
    executor.Call: "mesos.executor.Call",
    executor.Event: "mesos.executor.Event",
    master.Call: "mesos.master.Call",
    master.Response: "mesos.master.Response",
    master.Event: "mesos.master.Event",
    agent.Call: "mesos.agent.Call",
    agent.Response: "mesos.agent.Response",
}

_lock = threading.Lock()


@functools.cache
def pool(name: str) -> descriptor_pool.DescriptorPool:
    """The messages of descriptor set `name` ("v1" or "v0"), compiled first if missing."""
    with _lock:
        path = build.path(name)
        if not os.path.exists(path):
            build.build(name)
        with open(path, "rb") as f:
            files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    result = descriptor_pool.DescriptorPool()
    for file in files.file:
        result.Add(file)
    return result


def message_class(full_name: str, set_name: str = "v1") -> type[Message]:
    return message_factory.GetMessageClass(pool(set_name).FindMessageTypeByName(full_name))


def supports(type_: type) -> bool:
    return type_ in MESSAGES


def decode(body: bytes, type_: type[T]) -> T:
    """A protobuf body as the v1 object `type_`; every failure is a 400."""
    name = MESSAGES[type_]
    return codec.convert(to_dict(parse(body, message_class(name))), type_)


def parse(body: bytes, cls: type[Message]) -> Message:
    msg = cls()
    try:
        msg.ParseFromString(body)
    except (DecodeError, RuntimeError) as exc:
        raise BadRequest(f"Failed to parse body into {cls.DESCRIPTOR.name}: {exc}") from None
    if not msg.IsInitialized():
        # Every concrete message has it; types-protobuf declares it on none.
        missing = ", ".join(msg.FindInitializationErrors())  # type: ignore[attr-defined]
        raise BadRequest(
            f"Failed to parse body into {cls.DESCRIPTOR.name}: missing required fields {missing}"
        )
    return msg


def encode(data: bytes, type_: type) -> bytes:
    """The JSON form `data` of a `type_` message, as protobuf."""
    return from_dict(msgspec.json.decode(data), message_class(MESSAGES[type_])).SerializePartialToString()


def to_dict(msg: Message) -> dict[str, Any]:
    """Mesos's JSON form of `msg` (stout's `JSON::protobuf`): set fields only, proto
    field names, enums by name, bytes in base64, 64-bit integers as numbers."""
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        if field.is_extension:
            continue
        if field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        else:
            out[field.name] = _value(field, value)
    return out


def _value(field: FieldDescriptor, value: Any) -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return to_dict(value)
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if kind == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


def from_dict(data: dict[str, Any], cls: type[Message]) -> Message:
    """The message of Mesos's JSON form `data`; fields and enum values the compiled
    files do not have are left out."""
    msg = cls()
    _fill(msg, data)
    return msg


_SKIP = object()
_INTEGERS = {
    FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}  # fmt: skip


def _fill(msg: Message, data: dict[str, Any]) -> None:
    # types-protobuf types DESCRIPTOR of the base Message loosely.
    fields: Mapping[str, FieldDescriptor] = msg.DESCRIPTOR.fields_by_name  # type: ignore[assignment]
    for key, value in data.items():
        field = fields.get(key)
        if field is None or value is None:
            continue
        message = field.type == FieldDescriptor.TYPE_MESSAGE
        if field.is_repeated:
            target = getattr(msg, key)
            for item in value:
                if message:
                    _fill(target.add(), item)
                elif (scalar := _scalar(field, item)) is not _SKIP:
                    target.append(scalar)
        elif message:
            # Present even when empty, as in JSON (`"get_containers": {}`).
            sub = getattr(msg, key)
            sub.SetInParent()
            _fill(sub, value)
        elif (scalar := _scalar(field, value)) is not _SKIP:
            setattr(msg, key, scalar)


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        known = field.enum_type.values_by_name.get(value) if isinstance(value, str) else None
        return known.number if known is not None else _SKIP
    if kind == FieldDescriptor.TYPE_BYTES:
        return base64.b64decode(value)
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return float(value)
    if kind in _INTEGERS:
        return int(value)
    return value


def descriptor(full_name: str, set_name: str = "v1") -> Descriptor:
    return pool(set_name).FindMessageTypeByName(full_name)
