"""Large answers from pre-encoded pieces: the same bytes as encoding the whole, redacted,
sent in chunks (`mesilla.common.documents`)."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from mesilla.common import documents, secrets
from mesilla.common.documents import Pieces
from mesilla.v1 import codec


def _pieces(items: list[Any]) -> Pieces:
    return Pieces([secrets.redact(codec.encode(item)) for item in items])


SECRET = {"type": "VALUE", "value": {"data": base64.b64encode(b"hunter2").decode()}}


def _document() -> tuple[dict[str, Any], dict[str, Any]]:
    """A document holding pieces (nested, empty, with a secret) and its plain twin."""
    tasks = [{"id": i, "env": {"name": "X", "secret": SECRET} if i == 3 else {}} for i in range(7)]
    plain = {
        "type": "GET_STATE",
        "secret": SECRET,
        "get_state": {"tasks": tasks, "none": [], "frameworks": [{"id": "f", "tasks": tasks}]},
    }
    with_pieces = {
        "type": "GET_STATE",
        "secret": SECRET,
        "get_state": {
            "tasks": _pieces(tasks),
            "none": _pieces([]),
            "frameworks": _pieces([{"id": "f", "tasks": _pieces(tasks)}]),
        },
    }
    return with_pieces, plain


def test_chunks_join_to_the_whole_redacted() -> None:
    with_pieces, plain = _document()
    whole = secrets.redact(msgspec.json.encode(plain))
    assert b"".join(documents.chunks(with_pieces)) == whole
    assert codec.encode(with_pieces) == msgspec.json.encode(
        msgspec.json.decode(codec.encode(with_pieces))
    )
    assert secrets.redact(codec.encode(with_pieces)) == whole
    assert b"aHVudGVyMg" not in whole  # base64 of the secret


def test_chunks_are_the_pieces() -> None:
    # Each item is a chunk of its own, the very bytes object rendered: nothing copies the
    # whole document.
    pieces = _pieces([{"n": i} for i in range(1000)])
    parts = list(documents.chunks({"items": pieces}))
    assert parts[:2] == [b'{"items":', b"["] and parts[-2:] == [b"]", b"}"]
    assert parts[2:-2:2] == pieces.items
    assert all(part is item for part, item in zip(parts[2:-2:2], pieces.items, strict=True))
    assert set(parts[3:-2:2]) == {b","}


async def test_answer_sends_the_document(monkeypatch: Any) -> None:
    monkeypatch.setattr(documents, "CHUNK", 64)  # many writes
    with_pieces, plain = _document()
    whole = secrets.redact(msgspec.json.encode(plain))

    async def handler(request: web.Request) -> web.StreamResponse:
        return await documents.answer(request, with_pieces, jsonp=request.query.get("jsonp"))

    app = web.Application()
    app.router.add_route("*", "/state", handler)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/state")
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/json"
        assert resp.headers["Content-Length"] == str(len(whole))
        assert await resp.read() == whole
        resp = await client.get("/state", params={"jsonp": "cb"})
        assert resp.headers["Content-Type"] == "text/javascript"
        assert await resp.read() == b"cb(" + whole + b");"
        resp = await client.head("/state")
        assert resp.status == 200
        assert resp.headers["Content-Length"] == str(len(whole))
        assert await resp.read() == b""
