"""The local authorizer (--acls) on the agent: the nested container ACLs (and the seed's
manage_nested_containers), access_sandboxes, access_mesos_logs, view_flags, and the view
ACLs filtering /state, GET_STATE, GET_TASKS and GET_CONTAINERS."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.agent_fake_master import AgentProcess, FakeMaster

from mesilla.common.authentication import basic_authorization
from mesilla.v1.internal import AgentEvent, AgentEventType, RunTask
from mesilla.v1.mesos import AgentID, CommandInfo, FrameworkID, FrameworkInfo, TaskID, TaskInfo

pytestmark = [pytest.mark.integration]

USERS = {"ops": "ops-secret", "blind": "blind-secret"}
NONE, ANY = {"type": "NONE"}, {"type": "ANY"}
BLIND = {"values": ["blind"]}
ACLS = {
    "manage_nested_containers": [
        {"principals": {"values": ["ops"]}, "users": ANY},
        {"principals": ANY, "users": NONE},
    ],
    "remove_nested_containers": [{"principals": BLIND, "users": NONE}],
    "view_tasks": [{"principals": BLIND, "users": NONE}],
    "view_executors": [{"principals": BLIND, "users": NONE}],
    "view_frameworks": [{"principals": BLIND, "users": NONE}],
    "view_containers": [{"principals": BLIND, "users": NONE}],
    "access_sandboxes": [{"principals": BLIND, "users": NONE}],
    "view_flags": [{"principals": BLIND, "flags": NONE}],
    # The opposite of access_sandboxes: the log is guarded by its own ACL.
    "access_mesos_logs": [{"principals": {"values": ["ops"]}, "logs": NONE}],
}


def auth(who: str) -> dict[str, str]:
    return {"Authorization": basic_authorization(who, USERS[who])}


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[tuple[AgentProcess, str, str]]:
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({"credentials": [{"principal": p, "secret": s} for p, s in USERS.items()]}))
    creds.chmod(0o600)
    master = FakeMaster()
    await master.start()
    proc = AgentProcess(
        master, str(tmp_path / "work"), str(tmp_path / "run"),
        "--authenticate_http_readonly", "--authenticate_http_readwrite", f"--http_credentials={creds}",
        f"--acls={json.dumps(ACLS)}", f"--log_dir={tmp_path / 'logs'}",
    )
    try:
        agent = await proc.start()
        await master.wait_for(lambda: master.registers)
        framework = FrameworkInfo(user="root", name="fw", id=FrameworkID(value="fw-z"), checkpoint=True)
        task = TaskInfo(
            name="t", task_id=TaskID(value="t-z"), agent_id=AgentID(value=master.agent_id or ""),
            command=CommandInfo(value="echo in-sandbox; sleep 1000"),
        )
        await master.send(
            AgentEvent(type=AgentEventType.RUN_TASK, run_task=RunTask(framework_info=framework, task=task))
        )
        await master.wait_update("t-z", "TASK_RUNNING")
        executor = agent.frameworks["fw-z"].executors["t-z"]
        yield proc, executor.container_id.value, executor.directory
    finally:
        await proc.stop()
        await master.stop()


async def _call(
    session: aiohttp.ClientSession, proc: AgentProcess, call: dict[str, Any], who: str
) -> tuple[int, Any]:
    assert proc.agent is not None
    async with session.post(f"http://{proc.agent.endpoint}/api/v1", json=call, headers=auth(who)) as r:
        text = await r.text()
        return r.status, json.loads(text) if r.status == 200 and text else text


def _has_task(document: Any) -> bool:
    return "t-z" in json.dumps(document)


async def test_nested_container_acls(agent: tuple[AgentProcess, str, str]) -> None:
    proc, cid, _ = agent
    child = {"value": "c1", "parent": {"value": cid}}
    launch = {
        "type": "LAUNCH_NESTED_CONTAINER",
        "launch_nested_container": {"container_id": child, "command": {"value": "sleep 1000"}},
    }
    kill = {"type": "KILL_NESTED_CONTAINER", "kill_nested_container": {"container_id": child}}
    wait = {"type": "WAIT_NESTED_CONTAINER", "wait_nested_container": {"container_id": child}}
    remove = {"type": "REMOVE_NESTED_CONTAINER", "remove_nested_container": {"container_id": child}}
    async with aiohttp.ClientSession() as s:
        status, text = await _call(s, proc, launch, "blind")
        assert (
            status == 403 and "launch_nested_containers_under_parent_with_user" in text and "'root'" in text
        )
        assert (
            proc.agent is not None
            and proc.agent.containerizer.config(proc.agent.frameworks["fw-z"].executors["t-z"].container_id)
            is not None
        )
        assert (await _call(s, proc, launch, "ops"))[0] == 200
        for call in (kill, wait):
            assert (await _call(s, proc, call, "blind"))[0] == 403
        assert (await _call(s, proc, kill, "ops"))[0] == 200
        assert (await _call(s, proc, wait, "ops"))[0] == 200
        assert (await _call(s, proc, remove, "blind"))[0] == 403
        assert (await _call(s, proc, remove, "ops"))[0] == 200


async def test_views_sandboxes_and_flags(agent: tuple[AgentProcess, str, str]) -> None:
    proc, cid, sandbox = agent
    assert proc.agent is not None
    base = f"http://{proc.agent.endpoint}"
    async with aiohttp.ClientSession() as s:
        for who, sees in (("ops", True), ("blind", False)):
            async with s.get(base + "/state", headers=auth(who)) as r:
                assert r.status == 200 and _has_task(await r.json()) is sees
            for call, marker in (
                ("GET_STATE", "t-z"),
                ("GET_TASKS", "t-z"),
                ("GET_FRAMEWORKS", "fw-z"),
                ("GET_EXECUTORS", "t-z"),
            ):
                status, body = await _call(s, proc, {"type": call}, who)
                assert status == 200 and (marker in json.dumps(body)) is sees, (who, call, body)
            status, body = await _call(s, proc, {"type": "GET_CONTAINERS"}, who)
            assert status == 200 and (cid in json.dumps(body)) is sees
            async with s.get(base + "/containers", headers=auth(who)) as r:
                assert r.status == 200 and (cid in await r.text()) is sees
            status, body = await _call(
                s, proc, {"type": "READ_FILE", "read_file": {"path": f"{sandbox}/stdout", "offset": 0}}, who
            )
            assert status == (200 if sees else 403), body
            async with s.get(
                base + "/files/read", params={"path": f"{sandbox}/stdout", "offset": "0"}, headers=auth(who)
            ) as r:
                assert r.status == (200 if sees else 403)
                if sees:
                    assert "in-sandbox" in (await r.json())["data"]
            async with s.get(base + "/flags", headers=auth(who)) as r:
                assert r.status == (200 if sees else 403)
            status, body = await _call(
                s, proc, {"type": "READ_FILE", "read_file": {"path": "/slave/log", "offset": 0}}, who
            )
            assert status == (403 if sees else 200), body
            async with s.get(
                base + "/files/read", params={"path": "/slave/log", "offset": "0"}, headers=auth(who)
            ) as r:
                assert r.status == (403 if sees else 200)
            assert (await _call(s, proc, {"type": "GET_FLAGS"}, who))[0] == (200 if sees else 403)
