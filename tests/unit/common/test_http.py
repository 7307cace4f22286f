import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from mesilla.common.documents import CHUNK
from mesilla.common.errors import BadRequest
from mesilla.common.http import Router, make_app, numify, read_message
from mesilla.v1.scheduler import Call


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text=request.path)


async def _call(request: web.Request) -> web.Response:
    call = await read_message(request, Call)
    if call.framework_id is None:
        raise BadRequest("Expecting 'framework_id' to be present")
    return web.Response(status=202)


def test_libprocess_routing() -> None:
    router = Router("master")
    router.add("/api/v1", _ok)
    router.add("/state", _ok)
    router.add("/state.json", _ok)
    assert router.resolve("/master/state").path == "/state"
    assert router.resolve("/state/").path == "/state"
    assert router.resolve("/state.json").path == "/state.json"
    assert router.resolve("/api/v1/operator").path == "/api/v1"
    assert router.resolve("/master/api/v1/").path == "/api/v1"
    assert router.resolve("/nothing") is None


async def test_errors_become_plain_text_4xx() -> None:
    router = Router("master")
    router.add("/api/v1/scheduler", _call, methods=("POST",))
    async with TestClient(TestServer(make_app(router))) as client:
        resp = await client.post(
            "/api/v1/scheduler", data=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert resp.status == 400
        assert "JSON" in await resp.text()
        resp = await client.post("/api/v1/scheduler", json={"type": "NOPE"})
        assert resp.status == 400
        assert "$.type" in await resp.text()
        resp = await client.post("/api/v1/scheduler", json={"type": "TEARDOWN"})
        assert resp.status == 400
        assert "framework_id" in await resp.text()
        resp = await client.post(
            "/api/v1/scheduler", json={"type": "TEARDOWN", "framework_id": {"value": "x"}, "extra": 1}
        )
        assert resp.status == 202  # unknown fields are ignored
        resp = await client.get("/api/v1/scheduler")
        assert resp.status == 405
        resp = await client.post("/nowhere")
        assert resp.status == 404
        # Protobuf is spoken (Mesos's encodings); a truncated body is a 400, other types 415.
        resp = await client.post(
            "/api/v1/scheduler", data=b"\x08", headers={"Content-Type": "application/x-protobuf"}
        )
        assert resp.status == 400
        assert "Failed to parse body into Call" in await resp.text()
        resp = await client.post("/api/v1/scheduler", data=b"x", headers={"Content-Type": "text/plain"})
        assert resp.status == 415


@pytest.mark.parametrize(
    "text, value",
    [("5", 5), ("+5", 5), ("-1", -1), ("0x10", 16), ("0X1f", 31), ("-0x1", -1), ("007", 7),
     ("2147483647", 2**31 - 1), ("-2147483648", -(2**31))],
)  # fmt: skip
def test_numify_reads_integers_as_stout(text: str, value: int) -> None:
    assert numify(text) == value


@pytest.mark.parametrize(
    "text", ["", " 5", "5 ", "1_0", "1.5", "abc", "0x", "+0x1", "0x1.8", "2147483648", "1e3", "٣"]
)
def test_numify_refuses_what_stout_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        numify(text)


def test_numify_takes_wider_types() -> None:
    assert numify("99999999999", 64) == 99999999999


async def test_a_large_answer_arrives_whole_in_slices() -> None:
    # Bodies over a slice are written piecewise (the loop is handed back between
    # pieces); what the client reads is the same answer: status, headers, bytes.
    body = bytes(range(256)) * (3 * CHUNK // 256 + 7)

    async def large(request: web.Request) -> web.Response:
        return web.Response(
            status=203, body=body, content_type="application/json", headers={"X-Mark": "1"}
        )

    router = Router("master")
    router.add("/large", large)
    router.add("/small", _ok)
    async with TestClient(TestServer(make_app(router))) as client:
        resp = await client.get("/large")
        assert resp.status == 203
        assert resp.headers["Content-Type"] == "application/json"
        assert resp.headers["X-Mark"] == "1"
        assert resp.headers["Content-Length"] == str(len(body))
        assert await resp.read() == body
        resp = await client.head("/large")
        assert resp.status == 203
        assert resp.headers["Content-Length"] == str(len(body))
        resp = await client.get("/small")
        assert await resp.text() == "/small"
