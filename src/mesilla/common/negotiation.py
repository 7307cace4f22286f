"""Content negotiation of the v1 APIs: JSON or protobuf, as Mesos chooses.

* A request body's encoding is its ``Content-Type``: ``application/json`` (also
  when absent) or ``application/x-protobuf``; anything else is a 415.
* An answer's encoding, and a scheduler's or executor's event stream's, is what
  ``Accept`` allows: JSON first (also for no ``Accept``, ``*/*``), then protobuf;
  neither is a 406.
* An operator stream asked for with ``Accept: application/recordio`` is
  RecordIO of messages in the encoding of ``Message-Accept`` (the same rules),
  named by ``Message-Content-Type``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from aiohttp import web

from mesilla.common.errors import BadRequest, NotAcceptable, UnsupportedMediaType
from mesilla.v1 import codec, proto

T = TypeVar("T")

JSON = "application/json"
PROTOBUF = "application/x-protobuf"
RECORDIO = "application/recordio"


@dataclass(frozen=True)
class Encoding:
    content_type: str

    @property
    def protobuf(self) -> bool:
        return self.content_type == PROTOBUF

    def decode(self, body: bytes, type_: type[T]) -> T:
        if self.protobuf:
            return proto.decode(body, type_)
        return codec.decode(body, type_)

    def encode(self, data: bytes, type_: type) -> bytes:
        """`data`, the JSON of a `type_` message, in this encoding."""
        return proto.encode(data, type_) if self.protobuf else data


JSON_ENCODING = Encoding(JSON)
PROTOBUF_ENCODING = Encoding(PROTOBUF)


def request_encoding(request: web.Request, type_: type) -> Encoding:
    header = request.headers.get("Content-Type")
    ctype = request.content_type
    if ctype == PROTOBUF:
        if not proto.supports(type_):
            raise UnsupportedMediaType(f"Expecting 'Content-Type' of {JSON} for this endpoint")
        return PROTOBUF_ENCODING
    if ctype in (JSON, "application/octet-stream") or not header:
        return JSON_ENCODING
    raise UnsupportedMediaType(f"Expecting 'Content-Type' of {JSON} or {PROTOBUF}, got '{header}'")


def _accepted(header: str) -> dict[str, float]:
    """The media ranges of an Accept-style header with their q-values."""
    ranges: dict[str, float] = {}
    for part in header.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        if not media:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    raise BadRequest(f"Invalid q-value in '{header}'") from None
        ranges[media.lower()] = q
    return ranges


def accepts(header: str | None, media_type: str) -> bool:
    if header is None or not header.strip():
        return True
    ranges = _accepted(header)
    kind = media_type.split("/")[0]
    for candidate in (media_type, f"{kind}/*", "*/*"):
        if candidate in ranges:
            return ranges[candidate] > 0
    return False


def _choose(header: str | None, name: str, type_: type | None) -> Encoding:
    if accepts(header, JSON):
        return JSON_ENCODING
    if accepts(header, PROTOBUF):
        if type_ is None or not proto.supports(type_):
            raise NotAcceptable(f"Expecting '{name}' to allow '{JSON}'")
        return PROTOBUF_ENCODING
    raise NotAcceptable(f"Expecting '{name}' to allow '{JSON}' or '{PROTOBUF}'")


def response_encoding(request: web.Request, type_: type | None, *, streaming: bool = False) -> Encoding:
    """The encoding of the answer, a `type_` (or a stream of them); a stream asked for
    as RecordIO alone is JSON."""
    header = request.headers.get("Accept")
    if streaming and header and set(_accepted(header)) == {RECORDIO}:
        return JSON_ENCODING
    return _choose(header, "Accept", type_)


def wants_recordio(request: web.Request) -> bool:
    """Whether an operator stream is asked for as RecordIO (its messages' encoding
    then chosen by `message_encoding`)."""
    header = request.headers.get("Accept", "")
    return bool(header.strip()) and _accepted(header).get(RECORDIO, 0) > 0


def message_encoding(request: web.Request, type_: type) -> Encoding:
    return _choose(request.headers.get("Message-Accept"), "Message-Accept", type_)
