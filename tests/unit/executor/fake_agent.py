"""A small agent speaking the executor API, below the executor and driver under test.

It answers SUBSCRIBE with a chunked RecordIO stream that starts with
SUBSCRIBED and then carries whatever the test sends; UPDATE and MESSAGE
calls are recorded (and UPDATEs acknowledged when `auto_ack` is set).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from mesilla.common import recordio

CONTAINER_ID = {"value": "executor-container"}


class FakeAgent:
    def __init__(self, port: int, *, capabilities: list[str] | None = None) -> None:
        self.port = port
        self.capabilities = capabilities or []
        self.auto_ack = True
        self.subscribes: list[dict[str, Any]] = []
        self.updates: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.messages: list[str] = []
        self.subscribed = asyncio.Event()
        self._stream: asyncio.Queue[dict[str, Any] | None] | None = None
        self._runner: web.AppRunner | None = None
        self.refuse_subscribe = False
        # Holds each UPDATE's 202 back so that its ACKNOWLEDGED event arrives first.
        self.delay_update_response = 0.0

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def environ(self, **extra: str) -> dict[str, str]:
        return {
            "MESOS_FRAMEWORK_ID": "fw-1",
            "MESOS_EXECUTOR_ID": "exec-1",
            "MESOS_AGENT_ENDPOINT": self.endpoint,
            "MESOS_CHECKPOINT": "1",
            "MESOS_SUBSCRIPTION_BACKOFF_MAX": "100ms",
            "MESOS_RECOVERY_TIMEOUT": "15mins",
            **extra,
        }

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v1/executor", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        self.disconnect()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def send(self, event: dict[str, Any]) -> None:
        assert self._stream is not None, "no executor is subscribed"
        self._stream.put_nowait(event)

    def disconnect(self) -> None:
        """Ends the current event stream (as an agent restart would)."""
        if self._stream is not None:
            self._stream.put_nowait(None)
            self._stream = None
        self.subscribed.clear()

    async def next_update(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.updates.get(), 30)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        call = json.loads(await request.read())
        assert call["framework_id"] == {"value": "fw-1"}
        assert call["executor_id"] == {"value": "exec-1"}
        if call["type"] == "UPDATE":
            status = call["update"]["status"]
            await self.updates.put(status)
            if self.auto_ack and self._stream is not None:
                self.acknowledge(status)
            await asyncio.sleep(self.delay_update_response)
            return web.Response(status=202)
        if call["type"] == "MESSAGE":
            self.messages.append(call["message"]["data"])
            return web.Response(status=202)
        assert call["type"] == "SUBSCRIBE"
        if self.refuse_subscribe:
            return web.Response(status=503, text="Agent has not finished recovery")
        self.subscribes.append(call["subscribe"])
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        stream: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._stream = stream
        await self._write(response, self._subscribed_event())
        self.subscribed.set()
        while (event := await stream.get()) is not None:
            await self._write(response, event)
        return response

    def acknowledge(self, status: dict[str, Any]) -> None:
        self.send({
            "type": "ACKNOWLEDGED",
            "acknowledged": {"task_id": status["task_id"], "uuid": status["uuid"]},
        })  # fmt: skip

    @staticmethod
    async def _write(response: web.StreamResponse, event: dict[str, Any]) -> None:
        await response.write(recordio.encode(json.dumps(event).encode()))

    def _subscribed_event(self) -> dict[str, Any]:
        return {
            "type": "SUBSCRIBED",
            "subscribed": {
                "executor_info": {"executor_id": {"value": "exec-1"}},
                "framework_info": {
                    "user": "root",
                    "name": "test",
                    "id": {"value": "fw-1"},
                    "capabilities": [{"type": c} for c in self.capabilities],
                },
                "agent_info": {"hostname": "localhost", "id": {"value": "agent-1"}},
                "container_id": CONTAINER_ID,
            },
        }


def launch_event(task_id: str, command: dict[str, Any], **task: Any) -> dict[str, Any]:
    return {
        "type": "LAUNCH",
        "launch": {
            "task": {
                "name": task_id,
                "task_id": {"value": task_id},
                "agent_id": {"value": "agent-1"},
                "command": command,
                **task,
            }
        },
    }


def kill_event(task_id: str, grace_secs: float | None = None) -> dict[str, Any]:
    kill: dict[str, Any] = {"task_id": {"value": task_id}}
    if grace_secs is not None:
        kill["kill_policy"] = {"grace_period": {"nanoseconds": int(grace_secs * 1e9)}}
    return {"type": "KILL", "kill": kill}
