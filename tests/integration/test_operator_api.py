"""The master's operator API (``POST /api/v1``) and its v0 JSON endpoints, against a real master.

The master runs in-process on a free port; a scheduler speaks the v1
scheduler API and a fake agent the internal agent protocol (a fake below the
interface under test), both over real HTTP.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.integration import operator_cluster
from tests.integration.master_harness import command_task
from tests.integration.operator_cluster import Cluster, agent_id, running_task

cluster = operator_cluster.cluster  # the fixture

pytestmark = pytest.mark.integration

Json = dict[str, object]


# --- read-only calls ---------------------------------------------------------------------


READ_ONLY = [
    "GET_HEALTH", "GET_VERSION", "GET_FLAGS", "GET_METRICS", "GET_STATE", "GET_AGENTS",
    "GET_FRAMEWORKS", "GET_EXECUTORS", "GET_TASKS", "GET_ROLES", "GET_MASTER", "GET_WEIGHTS",
    "GET_LOGGING_LEVEL", "GET_OPERATIONS",
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
    assert agent_entry["agent_info"]["id"]["value"] == agent_id(agent)
    assert agent_entry["pid"] == "slave(1)@127.0.0.1:5051"
    assert agent_entry["active"] is True
    allocated = {r["name"]: r for r in agent_entry["allocated_resources"]}
    assert allocated["cpus"]["scalar"]["value"] == 1
    [framework] = state["get_frameworks"]["frameworks"]
    assert framework["framework_info"]["id"]["value"] == scheduler.framework_id
    assert framework["connected"] is True and framework["active"] is True
    [task] = state["get_tasks"]["tasks"]
    assert task["task_id"]["value"] == "t1"
    assert task["state"] == "TASK_RUNNING"
    assert [s["state"] for s in task["statuses"]] == ["TASK_RUNNING"]
    assert state["get_tasks"] == (await cluster.call("GET_TASKS"))["get_tasks"]


async def test_set_logging_level_then_it_reverts_after_the_duration(cluster: Cluster) -> None:
    assert (await cluster.call("GET_LOGGING_LEVEL"))["get_logging_level"] == {"level": 0}
    assert (await cluster.call("GET_OPERATIONS"))["get_operations"] == {}
    long = {"level": 2, "duration": {"nanoseconds": 600 * 10**9}}
    set_call: Json = {"type": "SET_LOGGING_LEVEL", "set_logging_level": long}
    assert (await cluster.post("/api/v1", set_call)).status == 200
    assert (await cluster.call("GET_LOGGING_LEVEL"))["get_logging_level"] == {"level": 1}
    # A later call's duration replaces the earlier one's, as in Mesos.
    short = {"level": 1, "duration": {"nanoseconds": 10**6}}
    set_call = {"type": "SET_LOGGING_LEVEL", "set_logging_level": short}
    assert (await cluster.post("/api/v1", set_call)).status == 200
    for _ in range(500):
        if (await cluster.call("GET_LOGGING_LEVEL"))["get_logging_level"] == {"level": 0}:
            break
        await asyncio.sleep(0.01)
    assert (await cluster.call("GET_LOGGING_LEVEL"))["get_logging_level"] == {"level": 0}


async def test_get_roles_lists_the_framework_role_and_its_resources(cluster: Cluster) -> None:
    _agent, scheduler = await running_task(cluster)

    roles = {r["name"]: r for r in (await cluster.call("GET_ROLES"))["get_roles"]["roles"]}

    assert roles["*"]["weight"] == 1.0
    assert roles["*"]["frameworks"] == [{"value": scheduler.framework_id}]
    cpus = [r for r in roles["*"]["resources"] if r["name"] == "cpus"]
    assert cpus and cpus[0]["scalar"]["value"] >= 1


async def test_get_metrics_reports_mesos_names(cluster: Cluster) -> None:
    await running_task(cluster)

    metrics = {
        m["name"]: m.get("value") for m in (await cluster.call("GET_METRICS"))["get_metrics"]["metrics"]
    }

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
        "/api/v1",
        {"type": "UPDATE_WEIGHTS", "update_weights": {"weight_infos": [{"role": "web", "weight": 2.5}]}},
    )
    assert response.status == 200
    weights = (await cluster.call("GET_WEIGHTS"))["get_weights"]["weight_infos"]
    assert weights == [{"weight": 2.5, "role": "web"}]
    roles = {r["name"] for r in (await cluster.call("GET_ROLES"))["get_roles"]["roles"]}
    assert "web" in roles


async def test_teardown_kills_the_frameworks_tasks(cluster: Cluster) -> None:
    _agent, scheduler = await running_task(cluster)

    response = await cluster.post(
        "/api/v1", {"type": "TEARDOWN", "teardown": {"framework_id": {"value": scheduler.framework_id}}}
    )

    assert response.status == 200
    frameworks = (await cluster.call("GET_FRAMEWORKS"))["get_frameworks"]
    assert frameworks.get("frameworks", []) == []
    [completed] = frameworks["completed_frameworks"]
    assert completed["framework_info"]["id"]["value"] == scheduler.framework_id
    [task] = (await cluster.call("GET_TASKS"))["get_tasks"]["completed_tasks"]
    assert task["state"] == "TASK_KILLED"


async def test_the_v0_weights_endpoint_reads_and_updates_the_same_weights(cluster: Cluster) -> None:
    url = cluster.base + "/weights"
    async with cluster.session.put(url, json=[{"role": "web", "weight": 3.0}]) as response:
        assert response.status == 200
    assert await cluster.get("/weights") == [{"weight": 3.0, "role": "web"}]
    weights = (await cluster.call("GET_WEIGHTS"))["get_weights"]["weight_infos"]
    assert weights == [{"weight": 3.0, "role": "web"}]
    for body, reason in (("{", "Failed to parse"), ('[{"role": "web", "weight": 0}]', "must be positive")):
        async with cluster.session.put(url, data=body) as response:
            assert response.status == 400
            assert reason in await response.text()
    assert await cluster.get("/weights") == [{"weight": 3.0, "role": "web"}]


async def test_the_v0_teardown_endpoint_tears_a_framework_down(cluster: Cluster) -> None:
    _agent, scheduler = await running_task(cluster)
    url = cluster.base + "/teardown"
    # As Mesos: the framework id in a form body; a missing or unknown one is 400 and changes nothing.
    for data, reason in (("", "Missing 'frameworkId'"), ("frameworkId=nope", "No framework found")):
        async with cluster.session.post(url, data=data) as response:
            assert response.status == 400
            assert reason in await response.text()
    assert len((await cluster.call("GET_FRAMEWORKS"))["get_frameworks"]["frameworks"]) == 1

    async with cluster.session.post(url, data={"frameworkId": scheduler.framework_id}) as response:
        assert response.status == 200

    frameworks = (await cluster.call("GET_FRAMEWORKS"))["get_frameworks"]
    assert frameworks.get("frameworks", []) == []
    [task] = (await cluster.call("GET_TASKS"))["get_tasks"]["completed_tasks"]
    assert task["state"] == "TASK_KILLED"


async def test_mark_agent_gone_removes_it_and_its_tasks(cluster: Cluster) -> None:
    agent, scheduler = await running_task(cluster)

    response = await cluster.post(
        "/api/v1", {"type": "MARK_AGENT_GONE", "mark_agent_gone": {"agent_id": {"value": agent_id(agent)}}}
    )

    assert response.status == 200
    assert (await cluster.call("GET_AGENTS"))["get_agents"].get("agents", []) == []
    assert (await scheduler.update("t1"))["state"] in ("TASK_GONE_BY_OPERATOR", "TASK_LOST")
    # Marking it again is fine; the agent is told to shut down.
    again = await cluster.post(
        "/api/v1", {"type": "MARK_AGENT_GONE", "mark_agent_gone": {"agent_id": {"value": agent_id(agent)}}}
    )
    assert again.status == 200
    assert (await agent.next_event("SHUTDOWN", skip=("*",)))["type"] == "SHUTDOWN"


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
        ({"type": "SET_LOGGING_LEVEL"}, 400, "set_logging_level"),
        ({"type": "SET_LOGGING_LEVEL", "set_logging_level": {"level": 1}}, 400, "duration"),
        (
            {"type": "UPDATE_WEIGHTS", "update_weights": {"weight_infos": [{"role": "a", "weight": -1}]}},
            400,
            "weight",
        ),
        ({"type": "UPDATE_WEIGHTS", "update_weights": {"weight_infos": [{"weight": 2}]}}, 400, "role"),
        (
            {"type": "UPDATE_WEIGHTS", "update_weights": {"weight_infos": [{"role": "a/../b", "weight": 2}]}},
            400,
            "'..'",
        ),
        (
            {"type": "UPDATE_WEIGHTS", "update_weights": {"weight_infos": [{"role": "-a", "weight": 2}]}},
            400,
            "-a",
        ),
    ],
)
async def test_bad_calls_get_4xx_with_a_reason(
    cluster: Cluster, body: Json, status: int, reason: str
) -> None:
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
        cluster.base + "/api/v1", data=b"\x08\x01", headers={"Content-Type": "text/plain"}
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
    operator, response = await cluster.subscribe()
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
    assert added["agent_added"]["agent"]["agent_info"]["id"]["value"] == agent_id(agent)
    framework = await operator.next_of("FRAMEWORK_ADDED")
    assert (
        framework["framework_added"]["framework"]["framework_info"]["id"]["value"] == scheduler.framework_id
    )
    task = await operator.next_of("TASK_ADDED")
    assert task["task_added"]["task"]["task_id"]["value"] == "t1"
    assert task["task_added"]["task"]["state"] == "TASK_STAGING"
    updated = await operator.next_of("TASK_UPDATED")
    assert updated["task_updated"]["framework_id"]["value"] == scheduler.framework_id
    assert updated["task_updated"]["state"] == "TASK_RUNNING"
    assert updated["task_updated"]["status"]["state"] == "TASK_RUNNING"

    info = {"user": "root", "name": "renamed", "id": {"value": scheduler.framework_id}}
    response = await scheduler.call("UPDATE_FRAMEWORK", {"framework_info": info})
    assert response.status == 200, await response.text()
    renamed = await operator.next_of("FRAMEWORK_UPDATED")
    assert renamed["framework_updated"]["framework"]["framework_info"]["name"] == "renamed"

    await cluster.post(
        "/api/v1", {"type": "TEARDOWN", "teardown": {"framework_id": {"value": scheduler.framework_id}}}
    )
    removed = await operator.next_of("FRAMEWORK_REMOVED")
    assert removed["framework_removed"]["framework_info"]["id"]["value"] == scheduler.framework_id

    await cluster.post(
        "/api/v1", {"type": "MARK_AGENT_GONE", "mark_agent_gone": {"agent_id": {"value": agent_id(agent)}}}
    )
    gone = await operator.next_of("AGENT_REMOVED")
    assert gone["agent_removed"]["agent_id"]["value"] == agent_id(agent)


async def test_subscriber_that_leaves_is_forgotten(cluster: Cluster) -> None:
    operator, _ = await cluster.subscribe()
    await operator.next_of("SUBSCRIBED")
    operator.close()
    for _ in range(100):
        metrics = await cluster.get("/metrics/snapshot")
        if metrics["master/operator_event_stream_subscribers"] == 0:
            break
        await asyncio.sleep(0.1)
    assert metrics["master/operator_event_stream_subscribers"] == 0


async def test_get_executors_lists_custom_executors_with_their_agent(cluster: Cluster) -> None:
    agent = cluster.agent()
    await agent.register()
    scheduler = cluster.scheduler()
    await scheduler.subscribe()
    offer = await scheduler.offer()
    executor = {
        "executor_id": {"value": "exec-1"},
        "type": "CUSTOM",
        "command": {"value": "./my-executor"},
        "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}}],
    }
    task = command_task("t-custom", offer["agent_id"])
    del task["command"]
    task["executor"] = executor
    response = await scheduler.launch(offer, task)
    assert response.status == 202, await response.text()
    await agent.next_event("RUN_TASK")

    executors = (await cluster.call("GET_EXECUTORS"))["get_executors"]["executors"]

    assert [(e["executor_info"]["executor_id"]["value"], e["agent_id"]["value"]) for e in executors] == [
        ("exec-1", agent_id(agent))
    ]
    [framework] = (await cluster.get("/frameworks"))["frameworks"]
    [v0] = framework["executors"]
    assert v0["executor_id"] == "exec-1"
    assert v0["slave_id"] == agent_id(agent)
    assert v0["command"]["value"] == "./my-executor"
    assert v0["resources"]["cpus"] == 0.1
