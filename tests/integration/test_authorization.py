"""The local authorizer (--acls) on the master: register_frameworks, run_tasks, the view ACLs
filtering every read endpoint and call, view_flags, update_weights, teardown_frameworks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.master_harness import FakeAgent, Scheduler, base_url, command_task, running_master

from mesilla.common import recordio
from mesilla.common.authentication import basic_authorization
from mesilla.master.main import MasterServer

pytestmark = [pytest.mark.integration]

USERS = {"ops": "ops-secret", "blind": "blind-secret", "fw": "fw-secret", "rogue": "rogue-secret"}
NONE, ANY = {"type": "NONE"}, {"type": "ANY"}
ACLS = {
    "permissive": True,
    "register_frameworks": [
        {"principals": {"values": ["fw"]}, "roles": {"values": ["*", "web"]}},
        {"principals": ANY, "roles": NONE},
    ],
    "run_tasks": [
        {"principals": {"values": ["fw"]}, "users": {"values": ["root"]}},
        {"principals": ANY, "users": NONE},
    ],
    "view_tasks": [{"principals": {"values": ["blind"]}, "users": NONE}],
    "view_executors": [{"principals": {"values": ["blind"]}, "users": NONE}],
    "view_flags": [{"principals": {"values": ["blind"]}, "flags": NONE}],
    "access_mesos_logs": [{"principals": {"values": ["blind"]}, "logs": NONE}],
    "get_endpoints": [{"principals": {"values": ["blind"]}, "paths": NONE}],
    "update_weights": [{"principals": {"values": ["ops"]}, "roles": ANY}, {"principals": ANY, "roles": NONE}],
    "teardown_frameworks": [
        {"principals": {"values": ["ops"]}, "framework_principals": ANY},
        {"principals": ANY, "framework_principals": NONE},
    ],
}


def auth(principal: str) -> dict[str, str]:
    return {"Authorization": basic_authorization(principal, USERS[principal])}


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[MasterServer]:
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({"credentials": [{"principal": p, "secret": s} for p, s in USERS.items()]}))
    creds.chmod(0o600)
    acls = tmp_path / "acls.json"
    acls.write_text(json.dumps(ACLS))
    async with running_master(
        tmp_path / "m", "--offer_timeout=1hrs",
        "--authenticate_http_readonly", "--authenticate_http_readwrite", "--authenticate_http_frameworks",
        f"--credentials={creds}", f"--acls=file://{acls}", f"--log_dir={tmp_path / 'logs'}",
    ) as server:
        yield server


async def _subscribe_status(
    session: aiohttp.ClientSession, server: MasterServer, info: dict[str, Any], who: str
) -> tuple[int, str]:
    call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "root", "name": "x", **info}}}
    async with session.post(base_url(server) + "/api/v1/scheduler", json=call, headers=auth(who)) as r:
        return r.status, (await r.text()) if r.status != 200 else ""


async def _operator(
    session: aiohttp.ClientSession, server: MasterServer, call: dict[str, Any], who: str
) -> tuple[int, Any]:
    async with session.post(base_url(server) + "/api/v1", json=call, headers=auth(who)) as r:
        text = await r.text()
        return r.status, json.loads(text) if r.status == 200 and text else text


async def _get(session: aiohttp.ClientSession, server: MasterServer, path: str, who: str) -> Any:
    async with session.get(base_url(server) + path, headers=auth(who)) as r:
        assert r.status == 200, await r.text()
        return await r.json()


def _task_ids(document: Any) -> set[str]:
    """Every task id anywhere in a document, v0 or v1."""
    found: set[str] = set()

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            if "task_id" in node and isinstance(node["task_id"], dict) and "state" in node:
                found.add(node["task_id"]["value"])
            if (
                key in ("tasks", "completed_tasks", "unreachable_tasks")
                and "id" in node
                and "statuses" in node
            ):
                found.add(node["id"])
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)

    walk(document)
    return found


async def _first_operator_event(session: aiohttp.ClientSession, server: MasterServer, who: str) -> Any:
    async with session.post(base_url(server) + "/api/v1", json={"type": "SUBSCRIBE"}, headers=auth(who)) as r:
        assert r.status == 200
        decoder = recordio.Decoder()
        while True:
            records = decoder.feed(await r.content.readany())
            if records:
                return json.loads(records[0])


async def test_acls_decide_and_views_filter(master: MasterServer) -> None:
    async with aiohttp.ClientSession(headers=auth("fw")) as fw_session, aiohttp.ClientSession() as session:
        agent = FakeAgent(fw_session, base_url(master))
        await agent.register()
        # register_frameworks: fw for its roles only, anyone else not at all (403, nothing registered).
        assert (await _subscribe_status(session, master, {"principal": "rogue"}, "rogue"))[0] == 403
        status, text = await _subscribe_status(
            session, master, {"roles": ["db"], "capabilities": [{"type": "MULTI_ROLE"}]}, "fw"
        )
        assert status == 403 and "register_frameworks" in text and "'db'" in text
        assert not master.master.frameworks
        scheduler = Scheduler(fw_session, base_url(master))
        await scheduler.subscribe({"principal": "fw"})
        try:
            offer = await scheduler.offer()
            # run_tasks: as root yes, as another user TASK_ERROR (REASON_TASK_UNAUTHORIZED).
            ok = command_task("as-root", offer["agent_id"])
            bad = command_task("as-nobody", offer["agent_id"], command={"value": "true", "user": "nobody"})
            response = await scheduler.launch(offer, ok, bad)
            assert response.status == 202
            refused = await scheduler.update("as-nobody")
            assert refused["state"] == "TASK_ERROR" and refused["reason"] == "REASON_TASK_UNAUTHORIZED"
            assert "as-nobody" not in master.master.frameworks[scheduler.framework_id or ""].tasks

            # ops sees the task everywhere; blind (no view_tasks) nowhere, and the rest stays.
            for who, expected in (("ops", {"as-root"}), ("blind", set())):
                documents = [
                    await _get(session, master, "/state", who),
                    await _get(session, master, "/tasks", who),
                ]
                for call in ("GET_STATE", "GET_TASKS"):
                    status, body = await _operator(session, master, {"type": call}, who)
                    assert status == 200, body
                    documents.append(body)
                documents.append(await _first_operator_event(session, master, who))
                for document in documents:
                    assert _task_ids(document) == expected, (who, document)
                status, executors = await _operator(session, master, {"type": "GET_EXECUTORS"}, who)
                assert status == 200 and executors["get_executors"].get("executors", []) == []
                state = await _get(session, master, "/state", who)
                assert [f["id"] for f in state["frameworks"]] == [scheduler.framework_id]

            # view_flags, update_weights: 403 with the reason, nothing changed.
            async with session.get(base_url(master) + "/flags", headers=auth("blind")) as r:
                assert r.status == 403 and "view_flags" in await r.text()
            assert (await _operator(session, master, {"type": "GET_FLAGS"}, "blind"))[0] == 403
            assert (await _operator(session, master, {"type": "GET_FLAGS"}, "ops"))[0] == 200
            update = {
                "type": "UPDATE_WEIGHTS",
                "update_weights": {"weight_infos": [{"role": "web", "weight": 2.0}]},
            }
            status, text = await _operator(session, master, update, "blind")
            assert status == 403 and "update_weights" in text
            assert (await _operator(session, master, {"type": "GET_WEIGHTS"}, "ops"))[1]["get_weights"].get(
                "weight_infos", []
            ) == []
            # teardown_frameworks: only ops.
            teardown = {"type": "TEARDOWN", "teardown": {"framework_id": {"value": scheduler.framework_id}}}
            assert (await _operator(session, master, teardown, "blind"))[0] == 403
            assert scheduler.framework_id in master.master.frameworks
            assert (await _operator(session, master, teardown, "ops"))[0] == 200
        finally:
            await scheduler.close()
            await agent.disconnect()


def test_bad_acls_refuse_to_start(tmp_path: Path) -> None:
    from mesilla.common.authorization import Authorizer
    from mesilla.common.flags import FlagError

    for text in ("[]", '{"run_tasks": {}}', '{"nope": []}', '{"run_tasks": [{"users": {"type": "SOME"}}]}'):
        with pytest.raises(FlagError, match="Invalid --acls"):
            Authorizer.parse(text)


async def test_access_mesos_logs_guards_the_master_log(master: MasterServer) -> None:
    read = {"type": "READ_FILE", "read_file": {"path": "/master/log", "offset": 0}}
    listing = {"type": "LIST_FILES", "list_files": {"path": "/master/log"}}
    params = {"path": "/master/log", "offset": "0"}
    async with aiohttp.ClientSession() as session:
        for who, expected in (("ops", 200), ("blind", 403)):
            for call in (read, listing):
                status, _ = await _operator(session, master, call, who)
                assert status == expected, (who, call["type"])
            for endpoint in ("/files/read", "/files/browse", "/files/download"):
                async with session.get(base_url(master) + endpoint, params=params, headers=auth(who)) as r:
                    assert r.status == expected, (who, endpoint)
            # /files/debug is an endpoint as any other: get_endpoints.
            async with session.get(base_url(master) + "/files/debug", headers=auth(who)) as r:
                assert r.status == expected, (who, "/files/debug")
        async with session.get(base_url(master) + "/files/debug") as r:
            assert r.status == 401  # --authenticate_http_readonly
