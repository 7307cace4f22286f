"""The chaos harness's link to the master: it relays, a partition cuts it, a heal mends
it, a delay keeps the bytes in order, and removing it leaves no namespace behind."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator

import pytest

from mesilla.testing.chaos.network import Link, Network

pytestmark = [pytest.mark.root]


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1 << 16):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def link() -> AsyncIterator[Link]:
    """A link to an echo server standing in for the master."""
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    network = Network(server.sockets[0].getsockname()[1], agents=1)
    try:
        network.create()
        await network.start()
        yield network.links[0]
    finally:
        await network.stop()
        network.remove()
        server.close()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert network.links[0].agent_side not in names and network.links[0].master_side not in names


async def roundtrip(link: Link, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
    try:
        writer.write(data)
        await writer.drain()
        return await reader.readexactly(len(data))
    except asyncio.IncompleteReadError as exc:
        return exc.partial
    finally:
        writer.close()


async def test_a_link_relays_and_a_partition_cuts_it_until_healed(link: Link) -> None:
    assert await roundtrip(link, b"hello") == b"hello"
    await link.drop()
    assert await roundtrip(link, b"cut off") == b""  # the relay gives up, as on a dead host
    await link.heal()
    assert await roundtrip(link, b"back") == b"back"


async def test_a_slow_link_keeps_every_byte_in_order(link: Link) -> None:
    link.delay = 0.2
    data = bytes(range(256)) * 4096  # 1 MiB, many chunks
    assert await roundtrip(link, data) == data
