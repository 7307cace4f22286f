"""The executor's agent API client against a small scripted HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from mesilla.executor import agent_client
from mesilla.executor.agent_client import AgentCallError, AgentClient


class ScriptedAgent:
    """Answers each call with the next scripted (status, body) and records what it got."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.headers: list[str | None] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.calls.append(await request.json())
        self.headers.append(request.headers.get("Authorization"))
        status, body = self.answers.pop(0) if self.answers else (200, {})
        if isinstance(body, str):
            return web.Response(status=status, text=body)
        return web.Response(status=status, body=json.dumps(body), content_type="application/json")


@pytest.fixture
async def scripted(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[ScriptedAgent, AgentClient]]:
    monkeypatch.setattr(agent_client, "WAIT_RETRY_INTERVAL", 0.01)
    agent = ScriptedAgent()
    app = web.Application()
    app.router.add_post("/api/v1", agent.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = AgentClient("127.0.0.1", port, {"Authorization": "Bearer t0ken"})
    try:
        yield agent, client
    finally:
        await client.close()
        await runner.cleanup()


CID = {"value": "c1", "parent": {"value": "exec"}}


async def test_launch_sends_the_container_call_with_the_token(
    scripted: tuple[ScriptedAgent, AgentClient],
) -> None:
    agent, client = scripted
    await client.launch_container(CID, {"value": "true"}, None, [{"name": "cpus"}], {"mem": {"value": 64}})
    assert agent.calls == [
        {
            "type": "LAUNCH_CONTAINER",
            "launch_container": {
                "container_id": CID,
                "resources": [{"name": "cpus"}],
                "command": {"value": "true"},
                "limits": {"mem": {"value": 64}},
            },
        }
    ]
    assert agent.headers == ["Bearer t0ken"]


async def test_launch_refusal_names_the_container_and_reason(
    scripted: tuple[ScriptedAgent, AgentClient],
) -> None:
    agent, client = scripted
    agent.answers = [(400, "Failed to provision image 'nope'")]
    with pytest.raises(
        AgentCallError, match=r"LAUNCH_CONTAINER of container c1 answered 400: Failed to provision"
    ):
        await client.launch_container(CID, None, None, [])


async def test_wait_retries_while_the_agent_recovers(scripted: tuple[ScriptedAgent, AgentClient]) -> None:
    agent, client = scripted
    agent.answers = [
        (503, "Agent has not finished recovery"),
        (200, {"type": "WAIT_CONTAINER", "wait_container": {"exit_status": 256, "state": "TASK_FAILED"}}),
    ]
    assert await client.wait_container(CID) == {"exit_status": 256, "state": "TASK_FAILED"}
    assert [c["type"] for c in agent.calls] == ["WAIT_CONTAINER", "WAIT_CONTAINER"]


async def test_wait_of_an_unknown_container_is_an_empty_termination(
    scripted: tuple[ScriptedAgent, AgentClient],
) -> None:
    agent, client = scripted
    agent.answers = [(404, "not found")]
    result = await client.wait_container(CID)
    assert "exit_status" not in result and "unknown" in result["message"]


async def test_kill_and_remove_tolerate_gone_containers(scripted: tuple[ScriptedAgent, AgentClient]) -> None:
    agent, client = scripted
    agent.answers = [(404, "gone"), (404, "gone"), (500, "Container c1 is running")]
    await client.kill_container(CID, 15)
    await client.remove_container(CID)
    with pytest.raises(AgentCallError, match="REMOVE_CONTAINER of container c1 answered 500"):
        await client.remove_container(CID)
    assert agent.calls[0] == {"type": "KILL_CONTAINER", "kill_container": {"container_id": CID, "signal": 15}}


async def test_unreachable_agent_is_a_connection_error(unused_port: int) -> None:
    client = AgentClient("127.0.0.1", unused_port)
    with pytest.raises(ConnectionError):
        await client.kill_container(CID, 9)
    await client.close()


class HeldSubscription:
    """A subscription that is lost until `resubscribe()`; says when a WAIT waits on it."""

    def __init__(self) -> None:
        self.waited = asyncio.Event()
        self._subscribed = asyncio.Event()

    async def until_subscribed(self) -> None:
        self.waited.set()
        await self._subscribed.wait()

    def resubscribe(self) -> None:
        self._subscribed.set()


async def test_a_lost_wait_asks_again_only_once_subscribed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Mesos's default executor: a WAIT whose connection broke (the agent restarting)
    is sent again after the executor re-subscribes, not on its own while the agent starts."""
    monkeypatch.setattr(agent_client, "WAIT_RETRY_INTERVAL", 0.01)
    requests: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
                      .split(b":")[1])  # fmt: skip
        requests.append(await reader.readexactly(length))
        if len(requests) > 1:
            body = json.dumps({"type": "WAIT_CONTAINER", "wait_container": {"exit_status": 0}}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
            await writer.drain()
        writer.close()  # the first one: the agent went away mid-call

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    subscription = HeldSubscription()
    client = AgentClient("127.0.0.1", port, subscription=subscription)
    try:
        wait = asyncio.create_task(client.wait_container(CID))
        waited = asyncio.create_task(subscription.waited.wait())
        # Without waiting on the subscription the WAIT would be sent again and answered.
        await asyncio.wait({wait, waited}, return_when=asyncio.FIRST_COMPLETED)
        assert waited.done() and not wait.done() and len(requests) == 1
        subscription.resubscribe()
        assert await wait == {"exit_status": 0}
        assert len(requests) == 2
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
