"""The master's v0 JSON endpoints, in Mesos's shapes, against a real master."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from tests.integration import operator_cluster
from tests.integration.master_harness import command_task
from tests.integration.operator_cluster import Cluster, agent_id, running_task

pytestmark = pytest.mark.integration

cluster = operator_cluster.cluster  # the fixture


async def test_state_has_mesos_top_level_fields(cluster: Cluster) -> None:
    agent, scheduler = await running_task(cluster)

    state = await cluster.get("/state")

    for key in (
        "version", "build_date", "build_time", "build_user", "start_time", "elected_time", "id", "pid",
        "hostname", "activated_slaves", "deactivated_slaves", "unreachable_slaves", "leader", "leader_info",
        "flags", "slaves", "recovered_slaves", "frameworks", "completed_frameworks", "orphan_tasks",
        "unregistered_frameworks",
    ):
        assert key in state, key
    assert state["pid"] == f"master@127.0.0.1:{cluster.server.port}"
    assert state["leader"] == state["pid"]
    assert state["activated_slaves"] == 1
    assert state["flags"]["allocation_interval"] == "50ms"
    [slave] = state["slaves"]
    assert slave["id"] == agent_id(agent)
    [framework] = state["frameworks"]
    assert framework["id"] == scheduler.framework_id
    assert await cluster.get("/state.json") == await cluster.get("/master/state")


async def test_slaves_shape(cluster: Cluster) -> None:
    agent, _scheduler = await running_task(cluster)

    [slave] = (await cluster.get("/slaves"))["slaves"]

    assert slave["pid"] == "slave(1)@127.0.0.1:5051"
    assert slave["hostname"] == "agent.test"
    assert slave["port"] == 5051
    assert slave["resources"]["cpus"] == 4.0
    assert slave["resources"]["mem"] == 4096.0
    assert slave["used_resources"]["cpus"] == 1.0
    assert slave["unreserved_resources"]["cpus"] == 4.0
    assert slave["reserved_resources"] == {}
    assert slave["active"] is True
    assert isinstance(slave["registered_time"], float)
    assert (await cluster.get(f"/slaves?slave_id={agent_id(agent)}"))["slaves"] == [slave]
    assert (await cluster.get("/slaves?slave_id=other"))["slaves"] == []


async def test_frameworks_shape(cluster: Cluster) -> None:
    _agent, scheduler = await running_task(cluster)

    frameworks = await cluster.get("/frameworks")

    [framework] = frameworks["frameworks"]
    assert frameworks["completed_frameworks"] == []
    assert framework["id"] == scheduler.framework_id
    assert framework["role"] == "*"
    assert framework["active"] is True and framework["connected"] is True
    assert framework["used_resources"]["cpus"] == 1.0
    [task] = framework["tasks"]
    assert task["id"] == "t1"
    assert task["state"] == "TASK_RUNNING"
    assert task["slave_id"] == framework["tasks"][0]["slave_id"]
    assert task["resources"]["mem"] == 128.0
    assert task["statuses"] == [{"state": "TASK_RUNNING", "timestamp": 1000.0}]
    assert task["role"] == "*"  # the allocation role of a framework without roles, as Mesos


@pytest.mark.parametrize(
    "framework_info", [{"role": "web"}, {"roles": ["web"], "capabilities": [{"type": "MULTI_ROLE"}]}]
)
async def test_a_task_has_the_role_it_was_launched_under(
    cluster: Cluster, framework_info: dict[str, Any]
) -> None:
    """Mesos injects the offer's allocation_info into the launched task's resources (the
    scheduler's TaskInfo has none here): the task's `role` everywhere is that role."""
    agent = cluster.agent()
    await agent.register()
    events, _ = await cluster.subscribe()
    scheduler = cluster.scheduler()
    await scheduler.subscribe(framework_info)
    offer = await scheduler.offer()
    await scheduler.launch(offer, command_task("t1", offer["agent_id"], cpus=1, mem=128))
    run_task = (await agent.next_event("RUN_TASK"))["run_task"]
    # The agent is sent the task so: its own /state and GET_TASKS show the same role.
    task_resources = run_task["task"]["resources"]
    assert {r["allocation_info"]["role"] for r in task_resources} == {"web"}

    [v0] = (await cluster.get("/tasks"))["tasks"]
    assert v0["role"] == "web"
    [framework] = (await cluster.get("/state"))["frameworks"]
    assert [t["role"] for t in framework["tasks"]] == ["web"]
    [task] = (await cluster.call("GET_TASKS"))["get_tasks"]["tasks"]
    assert {r["allocation_info"]["role"] for r in task["resources"]} == {"web"}
    [task] = (await cluster.call("GET_STATE"))["get_state"]["get_tasks"]["tasks"]
    assert {r["allocation_info"]["role"] for r in task["resources"]} == {"web"}
    added = (await events.next_of("TASK_ADDED"))["task_added"]["task"]
    assert {r["allocation_info"]["role"] for r in added["resources"]} == {"web"}


async def test_tasks_paging_order_and_filter(cluster: Cluster) -> None:
    agent, scheduler = await running_task(cluster)
    assert scheduler.framework_id is not None
    offer = await scheduler.offer()
    await scheduler.launch(
        offer,
        command_task("t2", offer["agent_id"], cpus=1, mem=128),
        command_task("t3", offer["agent_id"], cpus=1, mem=128),
    )
    await agent.send_status(scheduler.framework_id, "t2", "TASK_RUNNING", timestamp=2000.0)
    await scheduler.update("t2")

    async def ids(query: str) -> list[str]:
        return [t["id"] for t in (await cluster.get("/tasks" + query))["tasks"]]

    # Descending by first status time by default; t3 has no status yet and comes last.
    assert await ids("") == ["t2", "t1", "t3"]
    assert await ids("?order=asc") == ["t3", "t1", "t2"]
    assert await ids("?limit=1") == ["t2"]
    assert await ids("?limit=1&offset=1") == ["t1"]
    assert await ids("?task_id=t1") == ["t1"]
    assert await ids(f"?framework_id={scheduler.framework_id}&limit=10") == ["t2", "t1", "t3"]
    assert await ids("?framework_id=other") == []
    # As Mesos (an int cast to size_t): a negative limit is none, a negative offset past the end.
    assert await ids("?limit=-1") == ["t2", "t1", "t3"]
    assert await ids("?offset=-1") == []


# Every v0 endpoint's query parameters as Mesos 1.11 reads them (`src/master/readonly_handler.cpp`,
# libprocess's `/metrics/snapshot`): what each accepts, its default, how a bad value is answered.
# Mesos takes the default for an unparsable number; Mesilla answers 400 naming it.
@pytest.mark.parametrize(
    "path, params, status, reason",
    [
        ("/tasks", {"limit": "abc"}, 400, "limit"),
        ("/tasks", {"offset": "x"}, 400, "offset"),
        ("/tasks", {"limit": "1.5"}, 400, "limit"),
        ("/tasks", {"limit": " 5"}, 400, "limit"),
        ("/tasks", {"limit": "1_0"}, 400, "limit"),
        ("/tasks", {"limit": "0x"}, 400, "limit"),
        ("/tasks", {"offset": "99999999999"}, 400, "out of range"),  # numify<int>
        ("/tasks", {"limit": ""}, 400, "limit"),
        ("/metrics/snapshot", {"timeout": "soon"}, 400, "Invalid timeout 'soon'"),
        ("/metrics/snapshot", {"timeout": "5"}, 400, "Invalid timeout '5'"),
        ("/metrics/snapshot", {"timeout": "5secs"}, 200, "master/uptime_secs"),
        ("/tasks", {"limit": "0x10", "offset": "+0", "order": "whatever"}, 200, "t1"),
    ],
)
async def test_query_parameters_are_parsed_as_mesos(
    cluster: Cluster, path: str, params: dict[str, str], status: int, reason: str
) -> None:
    await running_task(cluster)
    async with cluster.session.get(cluster.base + path, params=params) as response:
        assert response.status == status
        assert reason in await response.text()


@pytest.mark.parametrize(
    "path, params, key, expected",
    [
        ("/tasks", {"task_id": ""}, "tasks", []),  # an empty id matches no task, as IDAcceptor
        ("/tasks", {"framework_id": ""}, "tasks", []),
        ("/tasks", {"limit": "0"}, "tasks", []),
        ("/tasks", {"limit": "-0x1"}, "tasks", ["t1"]),  # negative (hex too): no limit
        ("/tasks", {"offset": "1"}, "tasks", []),
        ("/tasks", {"task_id": "t1", "order": "asc"}, "tasks", ["t1"]),
        ("/frameworks", {"framework_id": "other"}, "frameworks", []),
        ("/frameworks", {"framework_id": ""}, "frameworks", []),
        ("/slaves", {"slave_id": "other"}, "slaves", []),
        ("/slaves", {"slave_id": ""}, "slaves", []),
    ],
)
async def test_filters_select_as_mesos(
    cluster: Cluster, path: str, params: dict[str, str], key: str, expected: list[str]
) -> None:
    await running_task(cluster)
    body = await cluster.get(path + "?" + "&".join(f"{k}={v}" for k, v in params.items()))
    assert [item["id"] for item in body[key]] == expected


@pytest.mark.parametrize(
    "path",
    ["/state", "/state.json", "/slaves", "/frameworks", "/tasks", "/state-summary", "/roles", "/flags",
     "/version", "/metrics/snapshot", "/files/debug"],
)  # fmt: skip
async def test_every_v0_endpoint_takes_jsonp(cluster: Cluster, path: str) -> None:
    async with cluster.session.get(cluster.base + path, params={"jsonp": "cb"}) as response:
        assert response.status == 200
        assert response.content_type == "text/javascript"
        body = await response.text()
    assert body.startswith("cb(") and body.endswith(");")
    json.loads(body[len("cb(") : -len(");")])


async def test_version_is_purely_numeric(cluster: Cluster) -> None:
    version = await cluster.get("/version")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version["version"])
    assert {"build_date", "build_time", "build_user"} <= set(version)


async def test_health_redirect_flags(cluster: Cluster) -> None:
    async with cluster.session.get(cluster.base + "/health") as response:
        assert response.status == 200
        assert await response.read() == b""
    async with cluster.session.get(cluster.base + "/master/redirect", allow_redirects=False) as response:
        assert response.status == 307
        assert response.headers["Location"] == f"//127.0.0.1:{cluster.server.port}"
    flags = (await cluster.get("/flags"))["flags"]
    assert flags["registry"] == "in_memory"


async def test_metrics_snapshot(cluster: Cluster) -> None:
    await running_task(cluster)

    metrics = await cluster.get("/metrics/snapshot")

    assert metrics["master/elected"] == 1
    assert metrics["master/tasks_running"] == 1
    assert metrics["master/tasks_staging"] == 0
    assert metrics["master/slaves_connected"] == 1
    assert metrics["master/mem_total"] == 4096
    assert metrics["master/mem_used"] == 128
    assert metrics["master/outstanding_offers"] >= 0
    assert metrics["master/valid_status_updates"] >= 1
    assert metrics["allocator/mesos/allocation_runs"] >= 1
    assert metrics["allocator/mesos/allocation_run_ms/count"] >= 1
    assert all(isinstance(v, (int, float)) for v in metrics.values())
    # Also under the master's process id, trailing slash ignored.
    assert set(await cluster.get("/master/metrics/snapshot/")) == set(metrics)


async def test_jsonp_wraps_the_body(cluster: Cluster) -> None:
    async with cluster.session.get(cluster.base + "/slaves?jsonp=cb") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/javascript")
        body = await response.text()
    assert body.startswith("cb(") and body.endswith(");")


async def test_v0_endpoints_answer_get_and_post_only(cluster: Cluster) -> None:
    async with cluster.session.post(cluster.base + "/slaves") as response:
        assert response.status == 200
        assert (await response.json())["slaves"] == []
    async with cluster.session.delete(cluster.base + "/state") as response:
        assert response.status == 405


async def test_state_summary_counts_tasks_per_agent_and_framework(cluster: Cluster) -> None:
    agent, scheduler = await running_task(cluster)

    summary = await cluster.get("/state-summary")

    assert summary["hostname"] == "127.0.0.1"
    [slave] = summary["slaves"]
    assert slave["id"] == agent_id(agent)
    assert slave["TASK_RUNNING"] == 1 and slave["TASK_STAGING"] == 0
    assert slave["framework_ids"] == [scheduler.framework_id]
    [framework] = summary["frameworks"]
    assert framework["id"] == scheduler.framework_id
    assert framework["TASK_RUNNING"] == 1
    assert framework["slave_ids"] == [agent_id(agent)]
    assert "tasks" not in framework  # a summary, not the full framework


async def test_roles_show_weight_frameworks_and_allocation(cluster: Cluster) -> None:
    _agent, scheduler = await running_task(cluster)
    await cluster.post(
        "/api/v1",
        {"type": "UPDATE_WEIGHTS", "update_weights": {"weight_infos": [{"role": "batch", "weight": 3}]}},
    )

    roles = {r["name"]: r for r in (await cluster.get("/roles"))["roles"]}

    assert roles["batch"]["weight"] == 3.0
    assert roles["batch"]["frameworks"] == []
    star = roles["*"]
    assert star["frameworks"] == [scheduler.framework_id]
    assert star["allocated"]["cpus"] + star["offered"].get("cpus", 0.0) == star["resources"]["cpus"]
    assert star["resources"]["cpus"] >= 1
    assert star["quota"]["role"] == "*"
