"""Large JSON answers (`/state`, GET_STATE) built from pre-encoded pieces and sent in chunks.

At 10,000 agents such an answer is tens of megabytes. Rendering it item by item
already hands the event loop back (the master's `rendered`); this module keeps the
last steps from holding the loop too: encoding the whole document (a copy of every
byte) and searching it for secrets are replaced by encoding its small skeleton, and
the bytes go out in slices as the socket drains.

A `Pieces` is a JSON array whose items are already encoded and redacted. It encodes
as that array wherever msgspec meets it through `enc_hook` (`mesilla.v1.codec` uses
it), so a document that holds one can still be encoded whole (protobuf answers, the
ACL-filtered views); `chunks` is the piecewise way.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
from aiohttp import web

from mesilla.common import secrets

# About this many bytes are joined and written per turn of the event loop.
CHUNK = 1 << 20


class Pieces:
    """A JSON array of items encoded (and redacted) one by one."""

    __slots__ = ("items",)

    def __init__(self, items: list[bytes]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def joined(self) -> bytes:
        return b"[" + b",".join(self.items) + b"]"


def enc_hook(obj: Any) -> Any:
    """msgspec's hook for what it does not know: a `Pieces` encodes as its array."""
    if isinstance(obj, Pieces):
        return msgspec.Raw(obj.joined())
    raise NotImplementedError(f"Objects of type {type(obj).__name__} are not supported")


def chunks(document: Any) -> Iterator[bytes]:
    """The JSON of `document`, redacted, as bytes to send one after the other: the
    skeleton is encoded (and redacted) alone, each `Pieces` it holds is spliced in
    (its items and the commas between them are chunks of their own: nothing is copied)."""
    return _spliced(_parts(document))


def _spliced(parts: list[bytes | Pieces]) -> Iterator[bytes]:
    for part in parts:
        if isinstance(part, Pieces):
            yield b"["
            for position, item in enumerate(part.items):
                if position:
                    yield b","
                yield item
            yield b"]"
        else:
            yield part


def _length(parts: list[bytes | Pieces]) -> int:
    return sum(
        len(part) if isinstance(part, bytes) else sum(map(len, part.items)) + max(len(part) - 1, 0) + 2
        for part in parts
    )


def _parts(document: Any) -> list[bytes | Pieces]:
    """The skeleton's bytes, encoded and redacted, split where each `Pieces` goes."""
    found: list[Pieces] = []
    token = uuid.uuid4().hex

    def marker(index: int) -> bytes:
        return f'"{token}-{index}"'.encode()

    def hook(obj: Any) -> Any:
        if isinstance(obj, Pieces):
            found.append(obj)
            return msgspec.Raw(marker(len(found) - 1))
        return enc_hook(obj)

    rest = secrets.redact(msgspec.json.Encoder(enc_hook=hook).encode(document))
    parts: list[bytes | Pieces] = []
    for index, pieces in enumerate(found):
        before, _, rest = rest.partition(marker(index))
        parts += [before, pieces]
    parts.append(rest)
    return parts


async def answer(
    request: web.Request,
    document: Any,
    *,
    content_type: str = "application/json",
    jsonp: str | None = None,
) -> web.StreamResponse:
    """`document` sent as the JSON answer to `request` (wrapped in `jsonp(...)` if
    asked), about `CHUNK` bytes per write, each write waiting for the socket to drain."""
    parts = _parts(document)
    if jsonp:
        parts = [jsonp.encode() + b"(", *parts, b");"]
        content_type = "text/javascript"
    response = web.StreamResponse(headers={"Content-Type": content_type})
    return await send(request, response, _length(parts), _spliced(parts))


async def send(
    request: web.Request,
    response: web.StreamResponse,
    length: int,
    parts: Iterable[bytes | memoryview],
) -> web.StreamResponse:
    """`response` prepared with `length` and, unless `request` is a HEAD, `parts` written
    joined about `CHUNK` bytes at a time, each write waiting for the socket to drain."""
    response.content_length = length
    await response.prepare(request)
    if request.method != "HEAD":
        batch: list[bytes | memoryview] = []
        size = 0
        for part in parts:
            batch.append(part)
            size += len(part)
            if size >= CHUNK:
                await response.write(batch[0] if len(batch) == 1 else b"".join(batch))
                batch, size = [], 0
        if batch:
            await response.write(b"".join(batch))
    await response.write_eof()
    return response
