"""A v0 custom executor, as Mesos's `MesosExecutorDriver` speaks to the agent: started
by the agent, it serves `executor(1)@127.0.0.1:<port>`, registers at MESOS_SLAVE_PID,
and for each task sends TASK_RUNNING, a framework message and TASK_FINISHED
(each update carries a uuid the agent acknowledges), except a task named `hold`,
which runs until KillTask (TASK_KILLED). A restarted agent's ReconnectExecutor
is answered with ReregisterExecutor (its running tasks). It exits 0 on
ShutdownExecutor."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from typing import Any

import aiohttp
from aiohttp import web

from mesilla.v1.proto import v0

ENV = os.environ
AGENT = ENV["MESOS_SLAVE_PID"]
FRAMEWORK_ID = {"value": ENV["MESOS_FRAMEWORK_ID"]}
EXECUTOR_ID = {"value": ENV["MESOS_EXECUTOR_ID"]}


async def main() -> None:
    done = asyncio.Event()
    acked: list[str] = []
    running: dict[str, Any] = {}
    session = aiohttp.ClientSession()
    agent_id = {"value": ENV["MESOS_SLAVE_ID"]}
    pid = ""

    async def send(name: str, message: dict[str, Any]) -> None:
        host = AGENT.split("@", 1)[1]
        async with session.post(
            f"http://{host}/slave(1)/mesos.internal.{name}",
            data=v0.encode(name, message),
            headers={"Libprocess-From": pid},
        ) as r:
            assert r.status == 202, r.status

    async def update(task_id: dict[str, str], state: str) -> None:
        status = {"task_id": task_id, "state": state, "source": "SOURCE_EXECUTOR"}
        update = {"framework_id": FRAMEWORK_ID, "executor_id": EXECUTOR_ID, "agent_id": agent_id,
                  "status": status, "timestamp": 1.0, "uuid": _uuid()}  # fmt: skip
        await send("StatusUpdateMessage", {"update": update, "pid": pid})

    async def receive(request: web.Request) -> web.Response:
        name = request.match_info["name"].removeprefix(v0.INTERNAL)
        message = v0.decode(name, await request.read())
        print(f"received {name}", flush=True)
        if name == "RunTaskMessage":
            task_id = message["task"]["task_id"]
            await update(task_id, "TASK_RUNNING")
            if message["task"]["name"] == "hold":
                running[task_id["value"]] = message["task"]
                return web.Response(status=202)
            data = {"agent_id": agent_id, "framework_id": FRAMEWORK_ID, "executor_id": EXECUTOR_ID,
                    "data": _b64(b"hello from v0")}  # fmt: skip
            await send("ExecutorToFrameworkMessage", data)
            await update(task_id, "TASK_FINISHED")
        elif name == "KillTaskMessage":
            if running.pop(message["task_id"]["value"], None) is not None:
                await update(message["task_id"], "TASK_KILLED")
        elif name == "ReconnectExecutorMessage":
            reregister = {
                "framework_id": FRAMEWORK_ID,
                "executor_id": EXECUTOR_ID,
                "tasks": list(running.values()),
            }
            await send("ReregisterExecutorMessage", reregister)
        elif name == "StatusUpdateAcknowledgementMessage":
            acked.append(message["task_id"]["value"])
        elif name == "ShutdownExecutorMessage":
            done.set()
        return web.Response(status=202)

    app = web.Application()
    app.router.add_post("/executor(1)/{name}", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    pid = f"executor(1)@127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    await send("RegisterExecutorMessage", {"framework_id": FRAMEWORK_ID, "executor_id": EXECUTOR_ID})
    await asyncio.wait_for(done.wait(), 120)
    print(f"acknowledged {len(acked)}", flush=True)
    await session.close()
    await runner.cleanup()


def _uuid() -> str:
    return _b64(uuid.uuid4().bytes)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
