"""`EventStream.wait_closed`: how the master's streams notice that their clients left."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from mesilla.common.http import EventStream

pytestmark = pytest.mark.integration

TIMEOUT = 20


class Server:
    """Streams a HEARTBEAT to each client, then holds the stream until it closes."""

    def __init__(self) -> None:
        self.streams: list[EventStream] = []
        self.ended: asyncio.Queue[EventStream] = asyncio.Queue()
        self.url = ""

    async def handler(self, request: web.Request) -> web.StreamResponse:
        stream = await EventStream.open(request)
        self.streams.append(stream)
        await stream.send({"type": "HEARTBEAT"})
        await stream.wait_closed()
        self.ended.put_nowait(stream)
        return stream.response


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    s = Server()
    app = web.Application()
    app.router.add_post("/stream", s.handler)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    s.url = f"http://127.0.0.1:{port}/stream"
    try:
        yield s
    finally:
        for stream in s.streams:
            stream.close()
        await runner.cleanup()


def watch_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "peer-watch" and not t.done()]


async def test_streams_end_when_their_clients_leave(server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        responses = [await session.post(server.url) for _ in range(20)]
        for response in responses:
            assert b"HEARTBEAT" in await asyncio.wait_for(response.content.readany(), TIMEOUT)
        assert len(watch_tasks()) == 1  # one check for all of them

        for response in responses[:10]:
            response.close()
        ended = {await asyncio.wait_for(server.ended.get(), TIMEOUT) for _ in range(10)}

        assert all(s.closed.is_set() for s in ended)
        assert len(ended) == 10
        assert server.ended.empty()  # the other ten still stream
        for response in responses[10:]:
            response.close()
        for _ in range(10):
            await asyncio.wait_for(server.ended.get(), TIMEOUT)
    # Nobody waits any more: the shared check is gone too.
    for _ in range(50):
        if not watch_tasks():
            break
        await asyncio.sleep(0.05)
    assert watch_tasks() == []


async def test_a_stream_closed_by_the_server_ends_at_once(server: Server) -> None:
    async with aiohttp.ClientSession() as session, session.post(server.url) as response:
        await asyncio.wait_for(response.content.readany(), TIMEOUT)
        [stream] = server.streams

        stream.close()

        assert await asyncio.wait_for(server.ended.get(), TIMEOUT) is stream
