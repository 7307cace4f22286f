"""The master's v1 APIs in protobuf, Mesos's other encoding: every scheduler call and
operator query with `Content-Type`/`Accept: application/x-protobuf`, event streams
in the encoding `Accept` (or `Message-Accept`) chose, malformed bodies a 4xx."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import aiohttp
import pytest
from tests.integration.master_harness import command_task
from tests.integration.operator_cluster import Cluster, cluster, running_task

from mesilla.common import recordio
from mesilla.master.operator_api import _READ_ONLY
from mesilla.v1 import master as m
from mesilla.v1 import proto
from mesilla.v1 import scheduler as sched

pytestmark = [pytest.mark.integration]
__all__ = ["cluster"]

Json = dict[str, Any]
PROTOBUF = "application/x-protobuf"
TIMEOUT = 20


def pb(type_: type, body: Json) -> bytes:
    return proto.from_dict(body, proto.message_class(proto.MESSAGES[type_])).SerializeToString()


def unpb(type_: type, data: bytes) -> Json:
    return proto.to_dict(proto.message_class(proto.MESSAGES[type_]).FromString(data))


class ProtobufStream:
    def __init__(self, response: aiohttp.ClientResponse, type_: type) -> None:
        self.response = response
        self.type = type_
        self._decoder = recordio.Decoder()
        self._pending: list[Json] = []

    async def next(self, *types: str) -> Json:
        while True:
            while not self._pending:
                chunk = await asyncio.wait_for(self.response.content.readany(), TIMEOUT)
                if not chunk:
                    raise EOFError("stream ended")
                self._pending.extend(unpb(self.type, r) for r in self._decoder.feed(chunk))
            event = self._pending.pop(0)
            if not types or event.get("type") in types:
                return event


async def post_pb(
    cluster: Cluster, path: str, type_: type, body: Json, **headers: str
) -> aiohttp.ClientResponse:
    response = await cluster.session.post(
        cluster.base + path, data=pb(type_, body), headers={"Content-Type": PROTOBUF, **headers}
    )
    return response


def projected(type_: type, answer: Json) -> Json:
    """A JSON answer as protobuf can carry it (only the compiled files' fields)."""
    return proto.to_dict(proto.from_dict(answer, proto.message_class(proto.MESSAGES[type_])))


async def test_every_operator_query_answers_in_protobuf_as_in_json(cluster: Cluster) -> None:
    await running_task(cluster)
    call_types = proto.descriptor("mesos.master.Call").fields_by_name["type"].enum_type
    assert call_types is not None
    known = set(call_types.values_by_name)
    queries = [t.value for t in _READ_ONLY if t.value in known]
    assert "GET_STATE" in queries and "GET_TASKS" in queries
    for name in queries:
        async with await post_pb(cluster, "/api/v1", m.Call, {"type": name}, Accept=PROTOBUF) as r:
            assert r.status == 200, (name, await r.text())
            assert r.headers["Content-Type"] == PROTOBUF
            answer = unpb(m.Response, await r.read())
        assert answer["type"] == name
        if name != "GET_METRICS":  # counters move between the two calls
            assert answer == projected(m.Response, await cluster.call(name)), name


async def test_accept_picks_the_answer_encoding_whatever_the_body(cluster: Cluster) -> None:
    async with await post_pb(cluster, "/api/v1", m.Call, {"type": "GET_HEALTH"}) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "application/json"  # Mesos's default
        assert await r.json() == {"type": "GET_HEALTH", "get_health": {"healthy": True}}
    async with cluster.session.post(
        cluster.base + "/api/v1", json={"type": "GET_HEALTH"}, headers={"Accept": PROTOBUF}
    ) as r:
        assert r.headers["Content-Type"] == PROTOBUF
        assert unpb(m.Response, await r.read())["get_health"] == {"healthy": True}
    for headers, status in [
        ({"Accept": "text/html"}, 406),
        ({"Content-Type": "text/plain"}, 415),
        ({"Accept": f"{PROTOBUF};q=0, application/json;q=0"}, 406),
    ]:
        async with cluster.session.post(
            cluster.base + "/api/v1", data=b'{"type": "GET_HEALTH"}', headers=headers
        ) as r:
            assert r.status == status, headers


async def test_operator_subscribe_in_recordio_of_protobuf_messages(cluster: Cluster) -> None:
    async with cluster.session.post(
        cluster.base + "/api/v1",
        json={"type": "SUBSCRIBE"},
        headers={"Accept": "application/recordio", "Message-Accept": PROTOBUF},
    ) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "application/recordio"
        assert r.headers["Message-Content-Type"] == PROTOBUF
        stream = ProtobufStream(r, m.Event)
        subscribed = await stream.next("SUBSCRIBED")
        assert "get_state" in subscribed["subscribed"]
        agent = cluster.agent()
        await agent.register()
        added = await stream.next("AGENT_ADDED")
        assert added["agent_added"]["agent"]["agent_info"]["id"] == agent.agent_id
    async with cluster.session.post(
        cluster.base + "/api/v1",
        json={"type": "SUBSCRIBE"},
        headers={"Accept": "application/recordio", "Message-Accept": "text/html"},
    ) as r:
        assert r.status == 406


async def test_a_scheduler_speaks_protobuf_for_every_call(cluster: Cluster) -> None:
    agent = cluster.agent()
    await agent.register()
    url = "/api/v1/scheduler"
    subscribe = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "root", "name": "pb"}}}
    response = await post_pb(cluster, url, sched.Call, subscribe, Accept=PROTOBUF)
    try:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"] == PROTOBUF
        stream_id = response.headers["Mesos-Stream-Id"]
        events = ProtobufStream(response, sched.Event)
        framework_id = (await events.next("SUBSCRIBED"))["subscribed"]["framework_id"]
        offer = (await events.next("OFFERS"))["offers"]["offers"][0]

        async def call(type_: str, body: Json | None = None, expect: int = 202) -> None:
            message: Json = {"type": type_, "framework_id": framework_id}
            if body is not None:
                message[type_.lower()] = body
            async with await post_pb(
                cluster, url, sched.Call, message, **{"Mesos-Stream-Id": stream_id}
            ) as r:
                assert r.status == expect, (type_, await r.text())

        task = command_task("pb1", offer["agent_id"], cpus=1, mem=128)
        await call("ACCEPT", {"offer_ids": [offer["id"]],
                              "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task]}}]})
        await agent.next_event("RUN_TASK")
        uuid = await agent.send_status(framework_id["value"], "pb1", "TASK_RUNNING")
        status = (await events.next("UPDATE"))["update"]["status"]
        assert status["state"] == "TASK_RUNNING" and status["uuid"] == uuid
        await call("ACKNOWLEDGE", {"agent_id": offer["agent_id"], "task_id": {"value": "pb1"}, "uuid": uuid})
        await call("RECONCILE", {"tasks": [{"task_id": {"value": "pb1"}}]})
        reconciled = (await events.next("UPDATE"))["update"]["status"]
        assert reconciled["reason"] == "REASON_RECONCILIATION"
        await call("MESSAGE", {"agent_id": offer["agent_id"], "executor_id": {"value": "pb1"},
                               "data": base64.b64encode(b"\x00hi").decode()})  # fmt: skip
        await call("DECLINE", {"offer_ids": [{"value": "gone"}]})
        await call("REVIVE")
        await call("SUPPRESS")
        await call("REQUEST", {"requests": []})
        await call("KILL", {"task_id": {"value": "pb1"}})
        await agent.next_event("KILL_TASK", skip=("*",))
        await call("TEARDOWN")
        frameworks = await cluster.call("GET_FRAMEWORKS")
        assert [
            f["framework_info"]["id"] for f in frameworks["get_frameworks"].get("completed_frameworks", [])
        ] == [framework_id]
    finally:
        response.close()


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/api/v1", b"\x08", 400),  # truncated
        ("/api/v1", b"\x0a\xff\xff\xff\xff\x0f", 400),  # a length past the end
        ("/api/v1/scheduler", b"\x08\x01", 400),  # SUBSCRIBE without its `subscribe`
        ("/api/v1/scheduler", pb(m.Call, {"type": "GET_STATE", "get_state": {}}), 400),  # another message
        ("/api/v1", b"\x08\x01" + b"\x92\x01" + b"\xff\xff\xff\x07" + b"x" * 17_000_000, 413),  # huge
    ],
)
async def test_malformed_protobuf_is_a_4xx_and_the_master_stays_healthy(
    cluster: Cluster, path: str, body: bytes, status: int
) -> None:
    async with cluster.session.post(cluster.base + path, data=body, headers={"Content-Type": PROTOBUF}) as r:
        assert r.status == status, await r.text()
    assert (await cluster.call("GET_HEALTH"))["get_health"]["healthy"] is True
