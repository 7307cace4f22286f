"""The agent's v1 operator and executor APIs in protobuf, against a running agent
with one command task (`tests.integration.test_agent_endpoints`'s `running`)."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import aiohttp
import pytest
from tests.integration.agent_fake_master import AgentProcess, FakeMaster
from tests.integration.test_agent_endpoints import running

from mesilla.v1 import agent as agent_api
from mesilla.v1 import executor as executor_api
from mesilla.v1 import proto

pytestmark = [pytest.mark.integration]
__all__ = ["running"]

Json = dict[str, Any]
PROTOBUF = "application/x-protobuf"
SANDBOX = "/frameworks/fw-ep/executors/t-ep/runs/latest"


def _class(type_: type) -> Any:
    return proto.message_class(proto.MESSAGES[type_])


def pb(type_: type, body: Json) -> bytes:
    return proto.from_dict(body, _class(type_)).SerializeToString()


def unpb(type_: type, data: bytes) -> Json:
    return proto.to_dict(_class(type_).FromString(data))


async def test_agent_calls_in_protobuf_answer_as_in_json(running: tuple[FakeMaster, AgentProcess]) -> None:
    _, proc = running
    calls: list[Json] = [
        {"type": name}
        for name in ("GET_HEALTH", "GET_FLAGS", "GET_VERSION", "GET_LOGGING_LEVEL", "GET_STATE",
                     "GET_FRAMEWORKS", "GET_EXECUTORS", "GET_TASKS", "GET_AGENT", "GET_CONTAINERS")
    ] + [
        {"type": "LIST_FILES", "list_files": {"path": SANDBOX}},
        {"type": "READ_FILE", "read_file": {"path": SANDBOX + "/stdout", "offset": 0}},
        {"type": "GET_METRICS", "get_metrics": {}},
    ]  # fmt: skip
    async with aiohttp.ClientSession() as s:
        for call in calls:
            async with s.post(
                proc.url + "/api/v1",
                data=pb(agent_api.Call, call),
                headers={"Content-Type": PROTOBUF, "Accept": PROTOBUF},
            ) as r:
                assert r.status == 200, (call, await r.text())
                assert r.headers["Content-Type"] == PROTOBUF
                answer = unpb(agent_api.Response, await r.read())
            assert answer["type"] == call["type"]
            if call["type"] in ("GET_METRICS", "GET_CONTAINERS"):  # statistics move
                continue
            async with s.post(proc.url + "/api/v1", json=call) as r:
                as_json = await r.json()
            assert answer == proto.to_dict(proto.from_dict(as_json, _class(agent_api.Response))), call
        for body in (b"\x08", b"\x08\xe7\x07", b"\x12\x05ab"):
            async with s.post(proc.url + "/api/v1", data=body, headers={"Content-Type": PROTOBUF}) as r:
                assert r.status == 400, body
        async with s.post(proc.url + "/api/v1", json={"type": "GET_HEALTH"}) as r:
            assert r.status == 200


async def test_executor_calls_in_protobuf(running: tuple[FakeMaster, AgentProcess]) -> None:
    master, proc = running
    ids = {"framework_id": {"value": "fw-ep"}, "executor_id": {"value": "t-ep"}}
    url = proc.url + "/api/v1/executor"
    async with aiohttp.ClientSession() as s:
        for call, status in [
            ({"type": "MESSAGE", **ids, "message": {"data": "AGhp"}}, 202),
            (
                {
                    "type": "UPDATE",
                    **ids,
                    "update": {
                        "status": {
                            "task_id": {"value": "t-ep"},
                            "state": "TASK_RUNNING",
                            "source": "SOURCE_EXECUTOR",
                            "uuid": base64.b64encode(uuid.uuid4().bytes).decode(),
                            "message": "again, in protobuf",
                        }
                    },
                },
                202,
            ),
            (
                {
                    "type": "SUBSCRIBE",
                    "framework_id": {"value": "fw-ep"},
                    "executor_id": {"value": "nope"},
                    "subscribe": {},
                },
                400,
            ),
        ]:
            async with s.post(
                url, data=pb(executor_api.Call, call), headers={"Content-Type": PROTOBUF, "Accept": PROTOBUF}
            ) as r:
                assert r.status == status, (call, await r.text())
        async with s.post(url, data=b"\x0a\x05", headers={"Content-Type": PROTOBUF}) as r:
            assert r.status == 400
    await master.wait_for(
        lambda: any(
            c.executor_message is not None and c.executor_message.data == b"\x00hi" for c in master.calls
        )
    )
    await master.wait_for(
        lambda: [u for u in master.updates("t-ep") if u.status.message == "again, in protobuf"]
    )
