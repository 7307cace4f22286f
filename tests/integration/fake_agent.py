"""A small agent on 127.0.0.1 for testing executors through their real interfaces.

It speaks the executor API (`/api/v1/executor`: SUBSCRIBE stream, UPDATE,
MESSAGE; events SUBSCRIBED, LAUNCH_GROUP, KILL, ACKNOWLEDGED, SHUTDOWN) and the
agent API container calls an executor makes (`/api/v1`: LAUNCH_CONTAINER,
WAIT_CONTAINER, KILL_CONTAINER, REMOVE_CONTAINER,
LAUNCH_NESTED_CONTAINER_SESSION), running each container as a real local
process in its own session, with its sandbox at
``<executor sandbox>/containers/<id>/`` as the real agent lays them out.
It is a fake below the interface under test (the executor): no isolation.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from aiohttp import web

Json = dict[str, Any]


def recordio(record: Json) -> bytes:
    data = json.dumps(record).encode()
    return b"%d\n%s" % (len(data), data)


def output_files(sandbox: Path) -> tuple[BinaryIO, BinaryIO]:
    """The sandbox's stdout and stderr files, opened for appending."""
    return open(sandbox / "stdout", "ab"), open(sandbox / "stderr", "ab")


@dataclass
class FakeContainer:
    container_id: Json
    process: asyncio.subprocess.Process
    sandbox: Path
    command: Json
    # Set to make WAIT report a limitation instead of what the process did.
    limitation: Json | None = None
    waited: asyncio.Future[int] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    async def reap(self) -> None:
        code = await self.process.wait()
        # A raw wait(2) status, as the agent API reports it.
        self.waited.set_result(-code if code < 0 else code << 8)


class FakeAgent:
    def __init__(self, sandbox: Path, *, capabilities: tuple[str, ...] = (), token: str | None = None,
                 auto_acknowledge: bool = True) -> None:
        self.sandbox = sandbox
        self.capabilities = capabilities
        self.token = token
        self.auto_acknowledge = auto_acknowledge
        self.framework_id = "fw-" + uuid.uuid4().hex[:8]
        self.executor_id = "ex-" + uuid.uuid4().hex[:8]
        self.container_id: Json = {"value": "exec-" + uuid.uuid4().hex[:8]}
        self.updates: list[Json] = []
        self.calls: list[str] = []
        self.containers: dict[str, FakeContainer] = {}
        self.removed: list[str] = []
        # Commands whose LAUNCH_CONTAINER starts the container, then cuts the
        # connection without an answer: an agent that dies in the middle of the call.
        self.cut_launches: set[str] = set()
        self.unauthorized = 0
        self._stream: web.StreamResponse | None = None
        self._subscriber: asyncio.BaseTransport | None = None
        self._pending_events: list[Json] = []
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.subscriptions = 0

    # --- lifecycle ---

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v1/executor", self._executor_api)
        app.router.add_post("/api/v1", self._agent_api)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close(self) -> None:
        for container in self.containers.values():
            if container.process.returncode is None:
                try:
                    os.killpg(container.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            await container.process.wait()
        if self._runner is not None:
            await self._runner.cleanup()

    def environment(self, *, checkpoint: bool = False) -> dict[str, str]:
        """The Mesos executor environment for an executor of this agent."""
        env = {
            "MESOS_FRAMEWORK_ID": self.framework_id,
            "MESOS_EXECUTOR_ID": self.executor_id,
            "MESOS_AGENT_ENDPOINT": f"127.0.0.1:{self.port}",
            "MESOS_DIRECTORY": str(self.sandbox),
            "MESOS_SANDBOX": str(self.sandbox),
            "MESOS_CHECKPOINT": "1" if checkpoint else "0",
            "MESOS_SUBSCRIPTION_BACKOFF_MAX": "100ms",
            "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": "5secs",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        if self.token:
            env["MESOS_EXECUTOR_AUTHENTICATION_TOKEN"] = self.token
        return env

    # --- what tests do ---

    async def send(self, event: Json) -> None:
        if self._stream is not None:
            try:
                await self._stream.write(recordio(event))
                return
            except ConnectionError:
                self._stream = None
        self._pending_events.append(event)

    async def launch_group(self, *tasks: Json) -> None:
        await self.send({"type": "LAUNCH_GROUP", "launch_group": {"task_group": {"tasks": list(tasks)}}})

    async def kill(self, task_id: str, grace_seconds: float | None = None) -> None:
        kill: Json = {"task_id": {"value": task_id}}
        if grace_seconds is not None:
            kill["kill_policy"] = {"grace_period": {"nanoseconds": int(grace_seconds * 1e9)}}
        await self.send({"type": "KILL", "kill": kill})

    async def shutdown(self) -> None:
        await self.send({"type": "SHUTDOWN"})

    def drop_subscription(self) -> None:
        """Closes the executor's event stream, as an agent restart would."""
        if self._stream is not None and self._subscriber is not None:
            self._subscriber.close()
            self._stream = None

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    def states(self, task_id: str) -> list[str]:
        return [u["state"] for u in self.updates if u["task_id"]["value"] == task_id]

    def last(self, task_id: str) -> Json:
        return [u for u in self.updates if u["task_id"]["value"] == task_id][-1]

    def terminal(self, *task_ids: str) -> Callable[[], bool]:
        ends = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST"}
        return lambda: all(any(s in ends for s in self.states(t)) for t in task_ids)

    def reached(self, task_id: str, state: str, count: int = 1) -> Callable[[], bool]:
        return lambda: self.states(task_id).count(state) >= count

    def running(self, *task_ids: str) -> Callable[[], bool]:
        """True once every one of `task_ids` has reported TASK_RUNNING."""
        return lambda: all("TASK_RUNNING" in self.states(t) for t in task_ids)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # --- the executor API ---

    def _authorized(self, request: web.Request) -> bool:
        if self.token is None or request.headers.get("Authorization") == f"Bearer {self.token}":
            return True
        self.unauthorized += 1
        return False

    async def _executor_api(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return web.Response(status=401)
        call = await request.json()
        if call["type"] == "SUBSCRIBE":
            return await self._subscribe(request)
        if call["type"] == "UPDATE":
            status = call["update"]["status"]
            if "uuid" not in status:
                return web.Response(status=400, text="Expecting 'uuid' in an executor's update")
            self.updates.append(status)
            await self._notify()
            if self.auto_acknowledge:
                await self.send(
                    {
                        "type": "ACKNOWLEDGED",
                        "acknowledged": {"task_id": status["task_id"], "uuid": status["uuid"]},
                    }
                )
            return web.Response(status=202)
        return web.Response(status=202)

    async def _subscribe(self, request: web.Request) -> web.StreamResponse:
        self.subscriptions += 1
        stream = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        stream.enable_chunked_encoding()
        await stream.prepare(request)
        await stream.write(
            recordio(
                {
                    "type": "SUBSCRIBED",
                    "subscribed": {
                        "executor_info": {"executor_id": {"value": self.executor_id}, "type": "DEFAULT"},
                        "framework_info": {
                            "id": {"value": self.framework_id},
                            "user": "root",
                            "name": "fake",
                            "capabilities": [{"type": c} for c in self.capabilities],
                        },
                        "agent_info": {"hostname": "127.0.0.1"},
                        "container_id": self.container_id,
                    },
                }
            )
        )
        self._stream = stream
        self._subscriber = request.transport
        pending, self._pending_events = self._pending_events, []
        for event in pending:
            await stream.write(recordio(event))
        await self._notify()
        try:
            # The stream stays open until the executor goes away.
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.05)
        finally:
            if self._stream is stream:
                self._stream = None
        return stream

    # --- the agent API ---

    async def _agent_api(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return web.Response(status=401)
        call = await request.json()
        kind = call["type"]
        self.calls.append(kind)
        body = call.get(kind.lower(), {})
        container_id = body.get("container_id", {})
        value = container_id.get("value", "")
        if kind in ("LAUNCH_CONTAINER", "LAUNCH_NESTED_CONTAINER_SESSION"):
            if value in self.containers:
                return web.Response(status=202)
            try:
                launched = await self._launch(container_id, body.get("command", {}))
            except OSError as exc:
                return web.Response(status=400, text=f"Failed to launch container {value}: {exc}")
            if launched.command.get("value") in self.cut_launches:
                assert request.transport is not None
                request.transport.abort()
                return web.Response()  # never reaches the executor
            if kind == "LAUNCH_CONTAINER":
                return web.json_response({})
            return await self._session(request, launched)
        container = self.containers.get(value)
        if container is None:
            return web.Response(status=404, text=f"Container {value} not found")
        if kind == "WAIT_CONTAINER":
            status = await asyncio.shield(container.waited)
            result: Json = {"exit_status": status}
            if container.limitation:
                result.update(container.limitation)
            return web.json_response({"type": "WAIT_CONTAINER", "wait_container": result})
        if kind == "KILL_CONTAINER":
            if container.process.returncode is None:
                try:
                    os.killpg(container.process.pid, body.get("signal", signal.SIGKILL))
                except ProcessLookupError:
                    pass
            return web.json_response({})
        if kind == "REMOVE_CONTAINER":
            if container.process.returncode is None:
                return web.Response(status=500, text=f"Container {value} is running")
            del self.containers[value]
            self.removed.append(value)
            shutil.rmtree(container.sandbox, ignore_errors=True)
            return web.json_response({})
        return web.Response(status=400, text=f"Unsupported call {kind}")

    def _sandbox_of(self, container_id: Json) -> Path:
        chain = []
        while container_id.get("parent") is not None:
            chain.append(container_id["value"])
            container_id = container_id["parent"]
        path = self.sandbox
        for value in reversed(chain):
            path = path / "containers" / value
        return path

    async def _launch(self, container_id: Json, command: Json) -> FakeContainer:
        sandbox = self._sandbox_of(container_id)
        sandbox.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MESOS_SANDBOX": str(sandbox)}
        for variable in (command.get("environment") or {}).get("variables", []):
            env[variable["name"]] = variable.get("value", "")
        if command.get("shell", True):
            argv = ["/bin/sh", "-c", command.get("value", "")]
        else:
            argv = [command["value"], *command.get("arguments", [])[1:]]
        out, err = output_files(sandbox)
        with out, err:
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=sandbox, env=env, stdout=out, stderr=err, stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        container = FakeContainer(container_id, process, sandbox, command)
        self.containers[container_id["value"]] = container
        asyncio.get_running_loop().create_task(container.reap())
        return container

    async def _session(self, request: web.Request, container: FakeContainer) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/recordio",
                                                           "Message-Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await asyncio.shield(container.waited)
        data = base64.b64encode(b"").decode()
        await response.write(recordio({"type": "DATA", "data": {"type": "STDOUT", "data": data}}))
        await response.write_eof()
        return response
