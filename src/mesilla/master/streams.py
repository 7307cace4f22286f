"""Holding streaming responses open until either side ends them.

aiohttp does not cancel a handler when its client goes away, so the master
watches the transports of all its held streams (schedulers' and agents'
subscriptions) with one periodic check, rather than a timer per stream, and
closes the streams whose peer has left. A stream also ends when the master
closes it or a write to it fails (`EventStream.closed`).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from mesilla.common.http import EventStream
from mesilla.common.tasks import Loop, TaskOwner


class StreamWatch:
    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self._held: dict[EventStream, web.Request] = {}
        self._loop = Loop("stream watch", self._run)

    def start(self, owner: TaskOwner) -> None:
        """Runs the periodic check, as a task of `owner`, until `stop`."""
        self._loop.start(owner)

    async def stop(self) -> None:
        await self._loop.stop()
        for stream in list(self._held):
            stream.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            for stream, request in list(self._held.items()):
                transport = request.transport
                if transport is None or transport.is_closing():
                    stream.close()

    async def hold(self, request: web.Request, stream: EventStream) -> None:
        """Returns when the stream is closed by the master or the peer disconnects."""
        self._held[stream] = request
        try:
            await stream.closed.wait()
        finally:
            self._held.pop(stream, None)
            stream.close()
