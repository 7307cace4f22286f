"""`mesilla network`: the network service alone, at ``/`` (Neutron's port is 9696).

The same service the master serves at ``/network/`` with ``--network_service``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from mesilla.common.flags import Flag, Flags
from mesilla.common.http import listen
from mesilla.network.fabric import FABRIC_FLAGS, start_fabric
from mesilla.network.ovs import OvsError
from mesilla.network.service import NetworkService
from mesilla.network.store import BookError

log = logging.getLogger(__name__)

NETWORK_FLAGS: list[Flag] = [
    Flag("ip", "IP address to listen on.", "127.0.0.1"),
    Flag("port", "Port to listen on (0 picks a free one).", 9696, "int"),
    Flag("work_dir", "Where the network book (network.db) lives.", required=True),
    Flag("logging_level", "Log level: INFO, WARNING or ERROR.", "INFO"),
    *FABRIC_FLAGS,
]


class NetworkStartError(RuntimeError):
    """The service cannot start (its port is taken, its book unreadable); the message says why."""


@asynccontextmanager
async def serve(flags: Flags) -> AsyncIterator[int]:
    """Serves until the block exits; yields the port it listens on."""
    try:
        service = await NetworkService.in_work_dir(flags.work_dir)
    except BookError as exc:
        raise NetworkStartError(str(exc)) from None
    runner = web.AppRunner(service.app(), access_log=None, shutdown_timeout=1.0)
    fabric = None
    try:
        try:
            fabric = await start_fabric(flags, service.book)
        except OvsError as exc:
            raise NetworkStartError(f"The fabric cannot start: {exc}") from None
        await runner.setup()
        port = await listen(runner, flags.ip, flags.port, NetworkStartError)
        log.info("network service listening on http://%s:%d/", flags.ip, port)
        yield port
    finally:
        await runner.cleanup()
        if fabric is not None:
            await fabric.close()
        await service.close()


async def run(flags: Flags) -> None:
    try:
        async with serve(flags):
            await asyncio.Event().wait()
    except NetworkStartError as exc:
        log.error("%s", exc)
        raise SystemExit(1) from None
