"""Holding a streaming response open until either side ends it.

aiohttp does not cancel a handler when its client goes away, so a stream
handler watches its transport as well as `EventStream.closed` (set when the
master closes the stream or a write fails).
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from mesilla.common.http import EventStream

# How often a held stream checks that its client is still connected.
_POLL_SECONDS = 0.5


async def hold(request: web.Request, stream: EventStream) -> None:
    """Returns when the stream is closed by the master or the peer disconnects."""
    while not stream.closed.is_set():
        transport = request.transport
        if transport is None or transport.is_closing():
            break
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stream.closed.wait(), _POLL_SECONDS)
    stream.close()
