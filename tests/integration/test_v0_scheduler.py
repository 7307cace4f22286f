"""v0 schedulers over libprocess (`master/v0_scheduler.py`): a fake v0 driver (an
HTTP server at its own UPID) registers, launches, acknowledges, reconciles, kills
and unregisters; it shares the cluster with a v1 framework; malformed messages
are dropped with the master healthy."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from tests.integration.master_harness import command_task
from tests.integration.operator_cluster import Cluster, cluster

from mesilla.v1 import proto
from mesilla.v1.proto.v0 import decode as decode_v0
from mesilla.v1.proto.v0 import encode as encode_v0

pytestmark = [pytest.mark.integration]
__all__ = ["cluster"]

Json = dict[str, Any]
TIMEOUT = 20


class V0Driver:
    """The framework side of libprocess: `scheduler(1)@127.0.0.1:<port>`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.received: asyncio.Queue[tuple[str, Json, str]] = asyncio.Queue()
        self.pid = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def receive(request: web.Request) -> web.Response:
            name = request.match_info["name"].removeprefix("mesos.internal.")
            await self.received.put(
                (name, decode_v0(name, await request.read()), request.headers["Libprocess-From"])
            )
            return web.Response(status=202)

        app = web.Application()
        app.router.add_post("/scheduler(1)/{name}", receive)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.pid = f"scheduler(1)@127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def send(
        self, name: str, message: Json, *, raw: bytes | None = None, pid: str | None = None
    ) -> int:
        body = raw if raw is not None else encode_v0(name, message)
        async with self.cluster.session.post(
            f"{self.cluster.base}/master/mesos.internal.{name}",
            data=body,
            headers={"Libprocess-From": pid or self.pid, "Content-Type": "application/x-protobuf"},
        ) as r:
            return r.status

    async def next(self, name: str) -> Json:
        while True:
            got, message, sender = await asyncio.wait_for(self.received.get(), TIMEOUT)
            assert sender == f"master@127.0.0.1:{self.cluster.server.port}"
            if got == name:
                return message


@pytest.fixture
async def driver(cluster: Cluster) -> AsyncIterator[V0Driver]:
    d = V0Driver(cluster)
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


INFO = {"user": "root", "name": "v0-fw", "hostname": "h"}


async def removed(cluster: Cluster, framework_id: Json) -> None:
    """Waits (bounded) for the framework to be among /state's completed ones."""
    for _ in range(100):
        state = await cluster.get("/state")
        if any(f["id"] == framework_id["value"] for f in state.get("completed_frameworks", [])):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"framework {framework_id['value']} was not removed")


async def test_a_v0_framework_runs_a_task_beside_a_v1_framework(cluster: Cluster, driver: V0Driver) -> None:
    agent = cluster.agent()
    await agent.register()
    assert await driver.send("RegisterFrameworkMessage", {"framework": INFO}) == 202
    assert await driver.send("RegisterFrameworkMessage", {"framework": INFO}) == 202  # a driver's retry
    registered = await driver.next("FrameworkRegisteredMessage")
    framework_id = registered["framework_id"]
    assert registered["master_info"]["pid"] == f"master@127.0.0.1:{cluster.server.port}"
    offers = await driver.next("ResourceOffersMessage")
    offer = offers["offers"][0]
    assert len(offers["pids"]) == len(offers["offers"]) and offers["pids"][0].startswith("slave(1)@")
    assert offer["agent_id"] == agent.agent_id

    task = command_task("v0-t1", offer["agent_id"], cpus=1, mem=128)
    launch = {"framework_id": framework_id, "tasks": [task], "filters": {}, "offer_ids": [offer["id"]]}
    assert await driver.send("LaunchTasksMessage", launch) == 202
    await agent.next_event("RUN_TASK")
    status_uuid = await agent.send_status(framework_id["value"], "v0-t1", "TASK_RUNNING")
    update = await driver.next("StatusUpdateMessage")
    assert update["update"]["status"]["state"] == "TASK_RUNNING"
    assert base64.b64encode(base64.b64decode(update["update"]["uuid"])).decode() == status_uuid
    assert update["pid"].startswith("slave(1)@")  # acknowledge this one
    ack = {"agent_id": offer["agent_id"], "framework_id": framework_id, "task_id": {"value": "v0-t1"},
           "uuid": status_uuid}  # fmt: skip
    assert await driver.send("StatusUpdateAcknowledgementMessage", ack) == 202
    await agent.next_event("ACKNOWLEDGE", skip=("*",))

    # A v1 framework on the same agent: one cluster, one set of operator views.
    v1 = cluster.scheduler()
    await v1.subscribe({"name": "v1-fw"})
    state = await cluster.get("/state")
    names = sorted(f["name"] for f in state["frameworks"])
    assert names == ["v0-fw", "v1-fw"]  # the retried registration registered once
    v0_tasks = next(f["tasks"] for f in state["frameworks"] if f["name"] == "v0-fw")
    assert [t["id"] for t in v0_tasks] == ["v0-t1"]

    reconcile = {
        "framework_id": framework_id,
        "statuses": [{"task_id": {"value": "v0-t1"}, "state": "TASK_RUNNING"}],
    }
    assert await driver.send("ReconcileTasksMessage", reconcile) == 202
    reconciled = await driver.next("StatusUpdateMessage")
    assert reconciled["update"]["status"]["reason"] == "REASON_RECONCILIATION"
    assert reconciled.get("pid", "") == ""  # nothing to acknowledge

    message = {"agent_id": offer["agent_id"], "framework_id": framework_id,
               "executor_id": {"value": "v0-t1"}, "data": base64.b64encode(b"ping").decode()}  # fmt: skip
    assert await driver.send("FrameworkToExecutorMessage", message) == 202
    await agent.next_event("FRAMEWORK_MESSAGE", skip=("*",))
    assert await driver.send("ReviveOffersMessage", {"framework_id": framework_id}) == 202
    assert (
        await driver.send("KillTaskMessage", {"framework_id": framework_id, "task_id": {"value": "v0-t1"}})
        == 202
    )
    await agent.next_event("KILL_TASK", skip=("*",))
    assert await driver.send("UnregisterFrameworkMessage", {"framework_id": framework_id}) == 202
    await removed(cluster, framework_id)


async def test_a_removed_agent_is_lost_to_every_framework(cluster: Cluster, driver: V0Driver) -> None:
    """Mesos's `sendSlaveLost`: LostSlaveMessage to v0 drivers, FAILURE with the agent alone to
    v1 schedulers (their `slaveLost`), whether or not they had tasks there."""
    agent = cluster.agent()
    await agent.register()
    v1 = cluster.scheduler()
    await v1.subscribe({"name": "v1-fw"})
    offer = await v1.offer()
    await v1.launch(offer, command_task("v1-t1", offer["agent_id"], cpus=1, mem=128))
    await agent.next_event("RUN_TASK")
    assert await driver.send("RegisterFrameworkMessage", {"framework": INFO}) == 202
    await driver.next("FrameworkRegisteredMessage")

    gone = {"type": "MARK_AGENT_GONE", "mark_agent_gone": {"agent_id": agent.agent_id}}
    assert (await cluster.post("/api/v1", gone)).status == 200

    lost = await driver.next("LostSlaveMessage")
    assert lost == {"agent_id": agent.agent_id}
    assert (await v1.update("v1-t1"))["state"] == "TASK_LOST"  # not PARTITION_AWARE
    failure = await v1.next_event("FAILURE", skip=("HEARTBEAT", "OFFERS", "RESCIND"))
    assert failure["failure"] == {"agent_id": agent.agent_id}


async def test_malformed_or_stray_messages_are_dropped_and_the_master_stays_healthy(
    cluster: Cluster, driver: V0Driver
) -> None:
    for name, raw in [
        ("RegisterFrameworkMessage", b"\x0a\x05ab"),  # truncated
        ("RegisterFrameworkMessage", b""),  # a required field missing
        ("LaunchTasksMessage", b"\xff" * 64),  # garbage
        (
            "KillTaskMessage",
            encode_v0("KillTaskMessage", {"framework_id": {"value": "nobody"}, "task_id": {"value": "t"}}),
        ),
    ]:
        assert await driver.send(name, {}, raw=raw) == 202, name
    assert await driver.send("KillTaskMessage", {}, raw=b"", pid="not a pid") == 400
    async with cluster.session.post(
        f"{cluster.base}/master/mesos.internal.KillTaskMessage", data=b"\x08\x01"
    ) as r:
        assert r.status == 400  # not a libprocess message: no sender
    assert (await cluster.call("GET_HEALTH"))["get_health"]["healthy"] is True
    assert driver.received.empty()
    # It still registers afterwards.
    assert await driver.send("RegisterFrameworkMessage", {"framework": INFO}) == 202
    await driver.next("FrameworkRegisteredMessage")


async def test_scheduler_calls_over_libprocess(cluster: Cluster, driver: V0Driver) -> None:
    """`mesos.scheduler.Call`, what today's libmesos driver sends, on the same endpoint."""
    call_class = proto.message_class("mesos.scheduler.Call")

    async def call(body: Json) -> None:
        async with cluster.session.post(
            f"{cluster.base}/master/mesos.scheduler.Call",
            data=proto.from_dict(body, call_class).SerializeToString(),
            headers={"Libprocess-From": driver.pid},
        ) as r:
            assert r.status == 202

    await call({"type": "SUBSCRIBE", "subscribe": {"framework_info": INFO}})
    framework_id = (await driver.next("FrameworkRegisteredMessage"))["framework_id"]
    await call({"type": "TEARDOWN", "framework_id": framework_id})
    await removed(cluster, framework_id)
