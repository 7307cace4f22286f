"""The master's operator API (``POST /api/v1``) and its v0 JSON endpoints, against a real master.

The master runs in-process on a free port; a scheduler speaks the v1
scheduler API and a fake agent the internal agent protocol (a fake below the
interface under test), both over real HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mesilla.common import flags as flags_module
from mesilla.common.recordio import Decoder
from mesilla.master.main import MASTER_FLAGS, MasterServer, serve

pytestmark = pytest.mark.integration

Json = dict[str, Any]
AGENT_RESOURCES = [
    {"name": "cpus", "type": "SCALAR", "scalar": {"value": 4}},
    {"name": "mem", "type": "SCALAR", "scalar": {"value": 4096}},
    {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 31000, "end": 31099}]}},
]
TIMEOUT = 20


class Stream:
    """The events of a RecordIO response, as JSON objects."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self._decoder = Decoder()
        self._pending: list[Json] = []

    async def next(self) -> Json:
        while not self._pending:
            chunk = await asyncio.wait_for(self.response.content.readany(), TIMEOUT)
            if not chunk:
                raise EOFError("stream ended")
            self._pending.extend(json.loads(r) for r in self._decoder.feed(chunk))
        return self._pending.pop(0)

    async def next_of(self, *types: str) -> Json:
        """The next event of one of `types`, skipping the others (heartbeats, offers...)."""
        while True:
            event = await self.next()
            if event["type"] in types:
                return event

    def close(self) -> None:
        self.response.close()


class Cluster:
    def __init__(self, server: MasterServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session
        self.base = f"http://127.0.0.1:{server.port}"
        self.streams: list[Stream] = []

    async def post(self, path: str, body: Json, headers: dict[str, str] | None = None) -> aiohttp.ClientResponse:
        response = await self.session.post(self.base + path, json=body, headers=headers)
        await response.read()
        return response

    async def open(self, path: str, body: Json) -> tuple[Stream, aiohttp.ClientResponse]:
        response = await self.session.post(self.base + path, json=body)
        assert response.status == 200, await response.text()
        stream = Stream(response)
        self.streams.append(stream)
        return stream, response

    async def call(self, call_type: str, **fields: Any) -> Json:
        response = await self.post("/api/v1", {"type": call_type, **fields})
        assert response.status == 200, await response.text()
        return await response.json()

    async def get(self, path: str) -> Json:
        async with self.session.get(self.base + path) as response:
            assert response.status == 200, await response.text()
            return await response.json()


class FakeAgent:
    """Registers over ``/internal/agent`` and reports task states when told."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.id = ""
        self.stream_id = ""
        self.events: Stream | None = None

    async def register(self, port: int = 5051) -> None:
        body = {
            "type": "REGISTER",
            "register": {"agent_info": {"hostname": "agent-host", "port": port, "resources": AGENT_RESOURCES}},
        }
        self.events, response = await self.cluster.open("/internal/agent", body)
        self.stream_id = response.headers["Mesos-Stream-Id"]
        registered = await self.events.next_of("REGISTERED")
        self.id = registered["registered"]["agent_id"]["value"]

    async def run_task(self) -> Json:
        assert self.events is not None
        event = await self.events.next_of("RUN_TASK")
        return event["run_task"]

    async def update(self, framework_id: str, task_id: str, state: str) -> None:
        status = {
            "task_id": {"value": task_id},
            "state": state,
            "source": "SOURCE_EXECUTOR",
            "agent_id": {"value": self.id},
            "timestamp": 1000.0,
            "uuid": base64.b64encode(uuid.uuid4().bytes).decode(),
        }
        body = {
            "type": "STATUS_UPDATE",
            "agent_id": {"value": self.id},
            "status_update": {"framework_id": {"value": framework_id}, "status": status},
        }
        response = await self.cluster.post("/internal/agent", body, {"Mesos-Stream-Id": self.stream_id})
        assert response.status == 202, await response.text()


class Scheduler:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.id = ""
        self.stream_id = ""
        self.events: Stream | None = None

    async def subscribe(self, role: str = "*") -> None:
        body = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "test", "name": "ops", "role": role}}}
        self.events, response = await self.cluster.open("/api/v1/scheduler", body)
        self.stream_id = response.headers["Mesos-Stream-Id"]
        subscribed = await self.events.next_of("SUBSCRIBED")
        self.id = subscribed["subscribed"]["framework_id"]["value"]

    async def launch(self, task_id: str) -> None:
        assert self.events is not None
        offer = (await self.events.next_of("OFFERS"))["offers"]["offers"][0]
        task = {
            "name": task_id,
            "task_id": {"value": task_id},
            "agent_id": offer["agent_id"],
            "resources": [
                {"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}},
                {"name": "mem", "type": "SCALAR", "scalar": {"value": 128}},
            ],
            "command": {"value": "sleep 1000"},
        }
        body = {
            "type": "ACCEPT",
            "framework_id": {"value": self.id},
            "accept": {"offer_ids": [offer["id"]], "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task]}}]},
        }
        response = await self.cluster.post("/api/v1/scheduler", body, {"Mesos-Stream-Id": self.stream_id})
        assert response.status == 202, await response.text()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    flags = flags_module.parse(
        MASTER_FLAGS,
        [f"--work_dir={tmp_path}", "--port=0", "--allocation_interval=50ms", "--registry=in_memory"],
        environ={},
    )
    async with serve(flags) as server, aiohttp.ClientSession() as session:
        c = Cluster(server, session)
        try:
            yield c
        finally:
            for stream in c.streams:
                stream.close()


async def running_task(cluster: Cluster) -> tuple[FakeAgent, Scheduler]:
    """An agent, a framework and its task `t1`, reported TASK_RUNNING."""
    agent = FakeAgent(cluster)
    await agent.register()
    scheduler = Scheduler(cluster)
    await scheduler.subscribe()
    await scheduler.launch("t1")
    await agent.run_task()
    await agent.update(scheduler.id, "t1", "TASK_RUNNING")
    assert scheduler.events is not None
    update = await scheduler.events.next_of("UPDATE")
    assert update["update"]["status"]["state"] == "TASK_RUNNING"
    return agent, scheduler


# --- read-only calls ---------------------------------------------------------------------


READ_ONLY = [
    "GET_HEALTH", "GET_VERSION", "GET_FLAGS", "GET_METRICS", "GET_STATE", "GET_AGENTS",
    "GET_FRAMEWORKS", "GET_EXECUTORS", "GET_TASKS", "GET_ROLES", "GET_MASTER", "GET_WEIGHTS",
]


@pytest.mark.parametrize("call_type", READ_ONLY)
async def test_read_only_calls_answer_their_response_type(cluster: Cluster, call_type: str) -> None:
    response = await cluster.call(call_type)
    assert response["type"] == call_type
    assert call_type.lower() in response


async def test_get_health_version_flags_master(cluster: Cluster) -> None:
    assert (await cluster.call("GET_HEALTH"))["get_health"] == {"healthy": True}
    version = (await cluster.call("GET_VERSION"))["get_version"]["version_info"]
    assert version["version"] == "1.11.0"
    flags = {f["name"]: f.get("value") for f in (await cluster.call("GET_FLAGS"))["get_flags"]["flags"]}
    assert flags["allocation_interval"] == "50ms"
    master = (await cluster.call("GET_MASTER"))["get_master"]
    assert master["master_info"]["port"] == cluster.server.port
    assert master["start_time"] <= master["elected_time"]


async def test_get_state_shows_agents_frameworks_and_tasks(cluster: Cluster) -> None:
    agent, scheduler = await running_task(cluster)

    state = (await cluster.call("GET_STATE"))["get_state"]

    [agent_entry] = state["get_agents"]["agents"]
    assert agent_entry["agent_info"]["id"]["value"] == agent.id
    assert agent_entry["pid"] == "slave(1)@127.0.0.1:5051"
    assert agent_entry["active"] is True
    allocated = {r["name"]: r for r in agent_entry["allocated_resources"]}
    assert allocated["cpus"]["scalar"]["value"] == 1
    [framework] = state["get_frameworks"]["frameworks"]
    assert framework["framework_info"]["id"]["value"] == scheduler.id
    assert framework["connected"] is True and framework["active"] is True
    [task] = state["get_tasks"]["tasks"]
    assert task["task_id"]["value"] == "t1"
    assert task["state"] == "TASK_RUNNING"
    assert [s["state"] for s in task["statuses"]] == ["TASK_RUNNING"]
    assert state["get_tasks"] == (await cluster.call("GET_TASKS"))["get_tasks"]


async def test_get_roles_lists_the_framework_role_and_its_resources(cluster: Cluster) -> None:
    _agent, scheduler = await running_task(cluster)

    roles = {r["name"]: r for r in (await cluster.call("GET_ROLES"))["get_roles"]["roles"]}

    assert roles["*"]["weight"] == 1.0
    assert roles["*"]["frameworks"] == [{"value": scheduler.id}]
    cpus = [r for r in roles["*"]["resources"] if r["name"] == "cpus"]
    assert cpus and cpus[0]["scalar"]["value"] >= 1


async def test_get_metrics_reports_mesos_names(cluster: Cluster) -> None:
    await running_task(cluster)

    metrics = {m["name"]: m.get("value") for m in (await cluster.call("GET_METRICS"))["get_metrics"]["metrics"]}

    assert metrics["master/tasks_running"] == 1
    assert metrics["master/slaves_active"] == 1
    assert metrics["master/frameworks_connected"] == 1
    assert metrics["master/cpus_total"] == 4
    assert metrics["master/cpus_used"] == 1
    assert metrics["allocator/mesos/allocation_runs"] >= 1
    assert "allocator/mesos/allocation_run_ms/p50" in metrics


# --- write calls -----------------------------------------------------------------------------


async def test_update_weights_then_get_weights(cluster: Cluster) -> None:
    response = await cluster.post(
        "/api/v1", {"type": "UPDATE_WEIGHTS", "update_weights": {"weight_infos": [{"role": "web", "weight": 2.5}]}}
    )
    assert response.status == 200
    weights = (await cluster.call("GET_WEIGHTS"))["get_weights"]["weight_infos"]
    assert weights == [{"weight": 2.5, "role": "web"}]
    roles = {r["name"] for r in (await cluster.call("GET_ROLES"))["get_roles"]["roles"]}
    assert "web" in roles


async def test_teardown_kills_the_frameworks_tasks(cluster: Cluster) -> None:
    _agent, scheduler = await running_task(cluster)

    response = await cluster.post("/api/v1", {"type": "TEARDOWN", "teardown": {"framework_id": {"value": scheduler.id}}})

    assert response.status == 200
    frameworks = (await cluster.call("GET_FRAMEWORKS"))["get_frameworks"]
    assert frameworks.get("frameworks", []) == []
    [completed] = frameworks["completed_frameworks"]
    assert completed["framework_info"]["id"]["value"] == scheduler.id
    [task] = (await cluster.call("GET_TASKS"))["get_tasks"]["completed_tasks"]
    assert task["state"] == "TASK_KILLED"


async def test_mark_agent_gone_removes_it_and_its_tasks(cluster: Cluster) -> None:
    agent, scheduler = await running_task(cluster)

    response = await cluster.post("/api/v1", {"type": "MARK_AGENT_GONE", "mark_agent_gone": {"agent_id": {"value": agent.id}}})

    assert response.status == 200
    assert (await cluster.call("GET_AGENTS"))["get_agents"].get("agents", []) == []
    assert scheduler.events is not None
    update = await scheduler.events.next_of("UPDATE")
    assert update["update"]["status"]["state"] in ("TASK_GONE_BY_OPERATOR", "TASK_LOST")
    # Marking it again is fine; the agent is told to shut down.
    again = await cluster.post("/api/v1", {"type": "MARK_AGENT_GONE", "mark_agent_gone": {"agent_id": {"value": agent.id}}})
    assert again.status == 200
    assert agent.events is not None
    assert (await agent.events.next_of("SHUTDOWN"))["type"] == "SHUTDOWN"


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"type": "NO_SUCH_CALL"}, 400, "$.type"),
        ({}, 400, "type"),
        ({"type": "UNKNOWN"}, 400, "type"),
        ({"type": "RESERVE_RESOURCES"}, 400, "RESERVE_RESOURCES"),
        ({"type": "TEARDOWN"}, 400, "teardown"),
        ({"type": "TEARDOWN", "teardown": {"framework_id": {"value": "nope"}}}, 400, "nope"),
        ({"type": "TEARDOWN", "teardown": {"framework_id": {"value": 7}}}, 400, "framework_id"),
        ({"type": "MARK_AGENT_GONE", "mark_agent_gone": {"agent_id": {"value": "nope"}}}, 404, "nope"),
        ({"type": "UPDATE_WEIGHTS", "update_weights": {"weight_infos": [{"role": "a", "weight": -1}]}}, 400, "weight"),
        ({"type": "UPDATE_WEIGHTS", "update_weights": {"weight_infos": [{"weight": 2}]}}, 400, "role"),
    ],
)
async def test_bad_calls_get_4xx_with_a_reason(cluster: Cluster, body: Json, status: int, reason: str) -> None:
    response = await cluster.post("/api/v1", body)
    assert response.status == status
    assert reason in await response.text()


async def test_malformed_bodies_and_methods(cluster: Cluster) -> None:
    async with cluster.session.post(
        cluster.base + "/api/v1", data=b"{not json", headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 400
        assert "JSON" in await r.text()
    async with cluster.session.post(
        cluster.base + "/api/v1", data=b"\x08\x01", headers={"Content-Type": "application/x-protobuf"}
    ) as r:
        assert r.status == 415
    async with cluster.session.post(
        cluster.base + "/api/v1", json={"type": "GET_HEALTH"}, headers={"Accept": "text/html"}
    ) as r:
        assert r.status == 406
    async with cluster.session.get(cluster.base + "/api/v1") as r:
        assert r.status == 405


async def test_operator_path_variants_reach_the_api(cluster: Cluster) -> None:
    for path in ("/api/v1/", "/master/api/v1", "/api/v1/operator"):
        async with cluster.session.post(cluster.base + path, json={"type": "GET_HEALTH"}) as r:
            assert r.status == 200, path
            assert (await r.json())["type"] == "GET_HEALTH"


# --- SUBSCRIBE -----------------------------------------------------------------------------------------


async def test_subscribe_streams_state_then_events(cluster: Cluster) -> None:
    operator, response = await cluster.open("/api/v1", {"type": "SUBSCRIBE"})
    assert response.headers["Content-Type"].startswith("application/json")
    subscribed = await operator.next()
    assert subscribed["type"] == "SUBSCRIBED"
    assert subscribed["subscribed"]["heartbeat_interval_seconds"] == 15
    assert "get_state" in subscribed["subscribed"]
    assert (await operator.next())["type"] == "HEARTBEAT"
    metrics = await cluster.get("/metrics/snapshot")
    assert metrics["master/operator_event_stream_subscribers"] == 1

    agent, scheduler = await running_task(cluster)

    added = await operator.next_of("AGENT_ADDED")
    assert added["agent_added"]["agent"]["agent_info"]["id"]["value"] == agent.id
    framework = await operator.next_of("FRAMEWORK_ADDED")
    assert framework["framework_added"]["framework"]["framework_info"]["id"]["value"] == scheduler.id
    task = await operator.next_of("TASK_ADDED")
    assert task["task_added"]["task"]["task_id"]["value"] == "t1"
    assert task["task_added"]["task"]["state"] == "TASK_STAGING"
    updated = await operator.next_of("TASK_UPDATED")
    assert updated["task_updated"]["framework_id"]["value"] == scheduler.id
    assert updated["task_updated"]["state"] == "TASK_RUNNING"
    assert updated["task_updated"]["status"]["state"] == "TASK_RUNNING"

    await cluster.post("/api/v1", {"type": "TEARDOWN", "teardown": {"framework_id": {"value": scheduler.id}}})
    removed = await operator.next_of("FRAMEWORK_REMOVED")
    assert removed["framework_removed"]["framework_info"]["id"]["value"] == scheduler.id

    await cluster.post("/api/v1", {"type": "MARK_AGENT_GONE", "mark_agent_gone": {"agent_id": {"value": agent.id}}})
    gone = await operator.next_of("AGENT_REMOVED")
    assert gone["agent_removed"]["agent_id"]["value"] == agent.id


async def test_subscriber_that_leaves_is_forgotten(cluster: Cluster) -> None:
    operator, _ = await cluster.open("/api/v1", {"type": "SUBSCRIBE"})
    await operator.next_of("SUBSCRIBED")
    operator.close()
    for _ in range(100):
        metrics = await cluster.get("/metrics/snapshot")
        if metrics["master/operator_event_stream_subscribers"] == 0:
            break
        await asyncio.sleep(0.1)
    assert metrics["master/operator_event_stream_subscribers"] == 0
