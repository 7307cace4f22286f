"""The agent's HTTP surfaces against a running agent: v1 operator API, v0 JSON, files."""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from tests.integration.agent_fake_master import AgentProcess, FakeMaster

from mesilla.v1.internal import AgentEvent, AgentEventType, RunTask
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    FrameworkID,
    FrameworkInfo,
    TaskID,
    TaskInfo,
)

pytestmark = [pytest.mark.integration]

FRAMEWORK = FrameworkInfo(user="root", name="ep", id=FrameworkID(value="fw-ep"), checkpoint=True)


@pytest.fixture
async def running(tmp_path: Any) -> AsyncIterator[tuple[FakeMaster, AgentProcess]]:
    """An agent with one running command task `t-ep` that printed a line."""
    master = FakeMaster()
    await master.start()
    proc = AgentProcess(
        master, str(tmp_path / "work"), str(tmp_path / "run"), "--attributes=rack:r1",
        f"--log_dir={tmp_path / 'logs'}",
    )
    try:
        await proc.start()
        await master.wait_for(lambda: master.registers)
        task = TaskInfo(
            name="ep",
            task_id=TaskID(value="t-ep"),
            agent_id=AgentID(value=master.agent_id or ""),
            command=CommandInfo(value="echo line-in-stdout; sleep 1000"),
        )
        await master.send(
            AgentEvent(
                type=AgentEventType.RUN_TASK, run_task=RunTask(framework_info=FRAMEWORK, task=task)
            )
        )
        await master.wait_update("t-ep", "TASK_RUNNING")
        yield master, proc
    finally:
        await proc.stop()
        await master.stop()


async def _v1(session: aiohttp.ClientSession, url: str, call: dict[str, Any]) -> Any:
    async with session.post(url + "/api/v1", json=call) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_v1_operator_calls(running: tuple[FakeMaster, AgentProcess]) -> None:
    master, proc = running
    async with aiohttp.ClientSession() as s:
        assert (await _v1(s, proc.url, {"type": "GET_HEALTH"}))["get_health"] == {"healthy": True}
        version = await _v1(s, proc.url, {"type": "GET_VERSION"})
        assert version["get_version"]["version_info"]["version"] == "1.11.0"
        flags = {
            f["name"]: f.get("value")
            for f in (await _v1(s, proc.url, {"type": "GET_FLAGS"}))["get_flags"]["flags"]
        }
        assert flags["master"] == master.address
        state = (await _v1(s, proc.url, {"type": "GET_STATE"}))["get_state"]
        launched = state["get_tasks"]["launched_tasks"]
        assert [t["task_id"]["value"] for t in launched] == ["t-ep"]
        assert launched[0]["state"] == "TASK_RUNNING"
        assert state["get_frameworks"]["frameworks"][0]["framework_info"]["id"]["value"] == "fw-ep"
        assert (
            state["get_executors"]["executors"][0]["executor_info"]["executor_id"]["value"]
            == "t-ep"
        )
        agent = (await _v1(s, proc.url, {"type": "GET_AGENT"}))["get_agent"]["agent_info"]
        assert agent["id"]["value"] == master.agent_id
        containers = (await _v1(s, proc.url, {"type": "GET_CONTAINERS"}))["get_containers"][
            "containers"
        ]
        assert containers[0]["executor_id"]["value"] == "t-ep"
        assert containers[0]["container_status"]["executor_pid"] > 0
        metrics = {
            m["name"]: m.get("value")
            for m in (await _v1(s, proc.url, {"type": "GET_METRICS"}))["get_metrics"]["metrics"]
        }
        assert metrics["slave/tasks_running"] == 1.0

        sandbox = "/frameworks/fw-ep/executors/t-ep/runs/latest"
        listing = await _v1(s, proc.url, {"type": "LIST_FILES", "list_files": {"path": sandbox}})
        paths = [f["path"] for f in listing["list_files"]["file_infos"]]
        assert sandbox + "/stdout" in paths
        read = await _v1(
            s, proc.url, {"type": "READ_FILE", "read_file": {"path": sandbox + "/stdout", "offset": 0}}
        )
        assert b"line-in-stdout" in base64.b64decode(read["read_file"]["data"])

        for body, status, reason in [
            (b"{", 400, "JSON"),
            (b'{"type": "NO_SUCH_CALL"}', 400, "type"),
            (b'{"type": "LIST_FILES"}', 400, "list_files"),
            # Its records are streamed: a JSON body is the wrong media type.
            (b'{"type": "ATTACH_CONTAINER_INPUT"}', 415, "application/recordio"),
        ]:
            async with s.post(
                proc.url + "/api/v1", data=body, headers={"Content-Type": "application/json"}
            ) as r:
                assert r.status == status and reason in await r.text()


async def test_v0_state_and_friends(running: tuple[FakeMaster, AgentProcess]) -> None:
    master, proc = running
    async with aiohttp.ClientSession() as s:
        for path in ("/state", "/state.json", "/slave(1)/state"):
            async with s.get(proc.url + path) as r:
                assert r.status == 200
                state = await r.json()
        assert state["id"] == master.agent_id
        assert state["pid"] == f"slave(1)@{proc.agent.endpoint}"  # type: ignore[union-attr]
        assert state["attributes"] == {"rack": "r1"}
        assert state["resources"]["cpus"] == 2.0
        executor = state["frameworks"][0]["executors"][0]
        assert executor["tasks"][0]["state"] == "TASK_RUNNING"
        assert executor["directory"].endswith("/runs/" + executor["container"])
        async with s.get(proc.url + "/health") as r:
            assert r.status == 200
        async with s.get(proc.url + "/version") as r:
            assert (await r.json())["version"] == "1.11.0"
        async with s.get(proc.url + "/metrics/snapshot") as r:
            snapshot = await r.json()
        assert snapshot["slave/registered"] == 1.0 and "slave/mem_total" in snapshot


async def test_v0_containers_and_monitor_statistics(running: tuple[FakeMaster, AgentProcess]) -> None:
    _master, proc = running
    async with aiohttp.ClientSession() as s:
        async with s.get(proc.url + "/containers") as r:
            assert r.status == 200, await r.text()
            containers = await r.json()
        [container] = containers
        assert container["framework_id"] == "fw-ep" and container["executor_id"] == "t-ep"
        assert container["source"] == "t-ep" and {"executor_name", "container_id"} <= container.keys()
        assert container["status"]["executor_pid"] > 0
        assert container["statistics"]["timestamp"] > 0
        for path in ("/monitor/statistics", "/monitor/statistics.json"):
            async with s.get(proc.url + path) as r:
                assert r.status == 200, await r.text()
                [usage] = await r.json()
            assert usage["framework_id"] == "fw-ep" and usage["executor_id"] == "t-ep"
            assert usage["source"] == container["source"]
            assert usage["statistics"]["timestamp"] > 0
            assert "container_id" not in usage and "status" not in usage


async def test_log_dir_serves_the_agent_log_as_slave_log(running: tuple[FakeMaster, AgentProcess]) -> None:
    _, proc = running
    assert proc.agent is not None
    log_dir = proc.agent.flags.parsed.log_dir
    log = os.path.join(log_dir, "mesos-agent.INFO")
    logging.getLogger("mesilla.test").warning("a line the test logs into the agent's log")
    async with aiohttp.ClientSession() as s:
        async with s.get(proc.url + "/files/debug") as r:
            assert (await r.json())["/slave/log"] == log
        async with s.get(proc.url + "/files/read", params={"path": "/slave/log", "offset": "0"}) as r:
            assert "a line the test logs into the agent's log" in (await r.json())["data"]
        read = await _v1(s, proc.url, {"type": "READ_FILE", "read_file": {"path": "/slave/log", "offset": 0}})
        assert b"the agent's log" in base64.b64decode(read["read_file"]["data"])
        async with s.get(proc.url + "/files/read", params={"path": "/slave/log/x", "offset": "0"}) as r:
            assert r.status == 404
        async with s.get(proc.url + "/state") as r:
            assert (await r.json())["log_dir"] == log_dir


async def test_files_endpoints(running: tuple[FakeMaster, AgentProcess]) -> None:
    _, proc = running
    base = "/frameworks/fw-ep/executors/t-ep/runs/latest"
    async with aiohttp.ClientSession() as s:
        async with s.get(proc.url + "/files/browse", params={"path": base}) as r:
            assert r.status == 200
            listing = {e["path"]: e for e in await r.json()}
        assert base + "/stdout" in listing
        async with s.get(
            proc.url + "/files/read", params={"path": base + "/stdout", "offset": "0"}
        ) as r:
            body = await r.json()
        assert body["offset"] == 0 and "line-in-stdout" in body["data"]
        async with s.get(
            proc.url + "/files/read", params={"path": base + "/stdout", "offset": "-1"}
        ) as r:
            body = await r.json()
        assert body == {"offset": listing[base + "/stdout"]["size"], "data": ""}
        assert body["offset"] > 0
        async with s.get(proc.url + "/files/download", params={"path": base + "/stdout"}) as r:
            assert r.status == 200 and "attachment" in r.headers["Content-Disposition"]
            assert b"line-in-stdout" in await r.read()
        async with s.get(proc.url + "/files/debug") as r:
            assert base in await r.json()
        for params, status in [
            ({}, 400),
            ({"path": base + "/../../../../../../etc/passwd"}, 403),
            ({"path": "/etc/passwd"}, 404),
            ({"path": base + "/stdout", "offset": "x"}, 400),
        ]:
            async with s.get(proc.url + "/files/read", params=params) as r:
                assert r.status == status, (params, await r.text())


# The agent's v0 endpoints' query parameters as Mesos 1.11 reads them (`src/slave/http.cpp`,
# `src/files/files.cpp`, libprocess's `/metrics/snapshot`).
@pytest.mark.parametrize(
    "path, params, status, reason",
    [
        ("/metrics/snapshot", {"timeout": "soon"}, 400, "Invalid timeout 'soon'"),
        ("/metrics/snapshot", {"timeout": "1secs"}, 200, "slave/uptime_secs"),
        ("/files/read", {"path": "/slave/log", "offset": "1.5"}, 400, "Failed to parse offset"),
        ("/files/read", {"path": "/slave/log", "offset": " 1"}, 400, "Failed to parse offset"),
        ("/files/read", {"path": "/slave/log", "offset": "0", "length": "x"}, 400, "Failed to parse length"),
        ("/files/read", {"path": "/slave/log", "offset": "0x0", "length": "0x4"}, 200, '"offset":0'),
        ("/files/read", {"path": "/slave/log", "offset": "-2"}, 400, "Negative offset provided: -2."),
        ("/files/browse", {}, 400, "Expecting 'path=value' in query."),
        ("/containers", {"container_id": "no-such-container"}, 200, "[]"),
    ],
)
async def test_query_parameters_are_parsed_as_mesos(
    running: tuple[FakeMaster, AgentProcess], path: str, params: dict[str, str], status: int, reason: str
) -> None:
    _, proc = running
    async with aiohttp.ClientSession() as s, s.get(proc.url + path, params=params) as r:
        assert r.status == status
        assert reason in await r.text()


async def test_containers_selects_by_container_id(running: tuple[FakeMaster, AgentProcess]) -> None:
    _, proc = running
    async with aiohttp.ClientSession() as s:
        async with s.get(proc.url + "/containers") as r:
            [container] = await r.json()
        async with s.get(proc.url + "/containers", params={"container_id": container["container_id"]}) as r:
            [selected] = await r.json()
        # The same container (its statistics are read again).
        assert {k: v for k, v in selected.items() if k != "statistics"} == {
            k: v for k, v in container.items() if k != "statistics"
        }


@pytest.mark.parametrize(
    "path, params",
    [("/state", {}), ("/flags", {}), ("/containers", {}), ("/monitor/statistics", {}),
     ("/metrics/snapshot", {}), ("/files/debug", {}), ("/files/browse", {"path": "/slave/log"}),
     ("/files/read", {"path": "/slave/log"})],
)  # fmt: skip
async def test_every_v0_endpoint_takes_jsonp(
    running: tuple[FakeMaster, AgentProcess], path: str, params: dict[str, str]
) -> None:
    _, proc = running
    async with aiohttp.ClientSession() as s, s.get(proc.url + path, params={**params, "jsonp": "cb"}) as r:
        assert r.status == 200 and r.content_type == "text/javascript"
        body = await r.text()
    assert body.startswith("cb(") and body.endswith(");")
    json.loads(body[len("cb(") : -len(");")])
