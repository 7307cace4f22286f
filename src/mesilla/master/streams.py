"""Holding a streaming response open until either side ends it.

aiohttp does not cancel a handler when its client goes away, so a stream
handler watches its transport as well as `EventStream.closed` (set when the
master closes the stream or a write fails).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from mesilla.common.http import EventStream

# How often a held stream checks that its client is still connected.
_POLL_SECONDS = 0.5


async def hold(request: web.Request, stream: EventStream) -> None:
    """Returns when the stream is closed by the master or the peer disconnects."""
    # asyncio.wait, unlike wait_for on Python 3.11, never swallows a cancellation.
    closed = asyncio.ensure_future(stream.closed.wait())
    try:
        while not closed.done():
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            await asyncio.wait({closed}, timeout=_POLL_SECONDS)
    finally:
        closed.cancel()
        stream.close()
