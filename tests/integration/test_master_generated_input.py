"""Generated input at the master's scheduler and agent endpoints never gets a 5xx.

The master runs on its own event loop in a thread; hypothesis drives it with a
blocking client, reading only each response's status line (a successful
SUBSCRIBE or REGISTER answers a stream that never ends by itself).

Ids that climb out of their directory (`tests.integration.traversal`), in
every id field of every call, get a 400 naming the field, and a canary tree
planted beside the master's work directory stays as it was.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.master_harness import (
    agent_and_scheduler,
    command_task,
    running_master,
)
from tests.integration.traversal import Canary, Drawn, ids

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCHEDULER_CALLS = [
    "SUBSCRIBE",
    "TEARDOWN",
    "ACCEPT",
    "DECLINE",
    "REVIVE",
    "SUPPRESS",
    "KILL",
    "SHUTDOWN",
    "ACKNOWLEDGE",
    "RECONCILE",
    "MESSAGE",
    "REQUEST",
    "UPDATE_FRAMEWORK",
    "UNKNOWN",
    "BOGUS",
]
AGENT_CALLS = [
    "REGISTER",
    "STATUS_UPDATE",
    "EXECUTOR_MESSAGE",
    "EXITED_EXECUTOR",
    "UNREGISTER",
    "BOGUS",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


def calls(types: list[str]) -> st.SearchStrategy[Any]:
    """Call-shaped objects: a known type, and that type's field filled with anything."""
    return st.builds(
        lambda type_, fields, extra: {
            "type": type_,
            type_.lower(): fields,
            **extra,
        },
        st.sampled_from(types),
        json_values,
        st.dictionaries(
            st.sampled_from(["framework_id", "agent_id", "x"]), json_values, max_size=2
        ),
    )


def bodies(types: list[str]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=64),
        json_values.map(lambda v: json.dumps(v).encode()),
        calls(types).map(lambda v: json.dumps(v).encode()),
    )


class Cluster:
    """A master with a subscribed framework and a registered agent, on another thread."""

    port: int
    framework_id: str
    stream_id: str
    agent_id: dict[str, str]
    offer_id: dict[str, str]
    canary: Canary


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ready = threading.Event()
    stop: dict[str, Any] = {}
    cluster = Cluster()

    async def serve(work_dir: Path) -> None:
        async with (
            running_master(work_dir) as server,
            aiohttp.ClientSession() as session,
        ):
            agent, scheduler = await agent_and_scheduler(session, server)
            offer = await scheduler.offer()
            await scheduler.launch(
                offer,
                command_task("t", offer["agent_id"]),
                filters={"refuse_seconds": 0},
            )
            cluster.port, cluster.agent_id = server.port, agent.agent_id or {}
            cluster.framework_id = scheduler.framework_id or ""
            cluster.stream_id = scheduler.stream.stream_id if scheduler.stream else ""
            cluster.offer_id = (await scheduler.offer())["id"]
            stop["event"] = asyncio.Event()
            stop["loop"] = asyncio.get_running_loop()
            ready.set()
            await stop["event"].wait()
            await scheduler.close()
            await agent.disconnect()

    top = tmp_path_factory.mktemp("master")
    work_dir = top / "a" / "b" / "work"
    cluster.canary = Canary(top, [work_dir])
    thread = threading.Thread(target=asyncio.run, args=(serve(work_dir),))
    thread.start()
    assert ready.wait(30), "the master did not start"
    yield cluster
    stop["loop"].call_soon_threadsafe(stop["event"].set)
    thread.join(30)


def post_status(port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(
            "POST",
            path,
            body=body,
            headers={"Content-Type": "application/json", **headers},
        )
        return connection.getresponse().status
    finally:
        connection.close()


SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(body=bodies(SCHEDULER_CALLS), stream_id=st.sampled_from([None, "", "x" * 40]))
def test_scheduler_endpoint_answers_generated_input_without_5xx(
    cluster: Cluster, body: bytes, stream_id: str | None
) -> None:
    headers = {} if stream_id is None else {"Mesos-Stream-Id": stream_id}
    assert post_status(cluster.port, "/api/v1/scheduler", body, headers) < 500, body


def framework_calls(cluster: Cluster) -> st.SearchStrategy[bytes]:
    """Calls of the subscribed framework with generated payloads (some built from real ids)."""
    ids = st.sampled_from(
        [cluster.agent_id, {"value": "t"}, cluster.offer_id, {"value": 1}, {}]
    )
    payload = st.one_of(
        json_values,
        st.dictionaries(
            st.sampled_from(
                [
                    "offer_ids",
                    "operations",
                    "task_id",
                    "agent_id",
                    "executor_id",
                    "uuid",
                    "tasks",
                    "roles",
                    "filters",
                    "data",
                    "framework_info",
                    "kill_policy",
                ]
            ),
            st.one_of(json_values, ids, st.lists(ids, max_size=2)),
            max_size=4,
        ),
    )
    return st.builds(
        lambda type_, body: json.dumps(
            {
                "type": type_,
                "framework_id": {"value": cluster.framework_id},
                type_.lower(): body,
            }
        ).encode(),
        st.sampled_from(
            [t for t in SCHEDULER_CALLS if t not in ("SUBSCRIBE", "TEARDOWN")]
        ),
        payload,
    )


@SETTINGS
@given(data=st.data())
def test_calls_of_a_subscribed_framework_never_get_5xx(
    cluster: Cluster, data: st.DataObject
) -> None:
    body = data.draw(framework_calls(cluster))
    status = post_status(
        cluster.port, "/api/v1/scheduler", body, {"Mesos-Stream-Id": cluster.stream_id}
    )
    assert status < 500, body


@SETTINGS
@given(body=bodies(AGENT_CALLS))
def test_agent_endpoint_answers_generated_input_without_5xx(
    cluster: Cluster, body: bytes
) -> None:
    assert post_status(cluster.port, "/internal/agent", body, {}) < 500, body


# --- ids that climb out ----------------------------------------------------------------------


def post_answer(port: int, path: str, body: Any, headers: dict[str, str]) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(
            "POST",
            path,
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **headers},
        )
        response = connection.getresponse()
        return response.status, response.read(4096).decode(errors="replace")
    finally:
        connection.close()


UUID = "AAAAAAAAAAAAAAAAAAAAAA=="


def scheduler_calls(cluster: Cluster, bad: dict[str, str]) -> dict[str, Any]:
    """One call (type -> body) for each id field of each call of a subscribed framework.

    No call names a real offer: a valid id must not launch anything either.
    """
    agent, fw = cluster.agent_id, {"value": cluster.framework_id}

    def call(type_: str, part: Any, framework_id: dict[str, str] = fw) -> dict[str, Any]:
        return {"type": type_, "framework_id": framework_id, type_.lower(): part}

    def task(**ids: Any) -> dict[str, Any]:
        return {**command_task("t2", agent), **ids}

    accept = {"offer_ids": [{"value": "no-offer"}]}
    return {
        "framework_id": call("REVIVE", {}, bad),
        "decline.offer_ids": call("DECLINE", {"offer_ids": [bad]}),
        "accept.offer_ids": call("ACCEPT", {"offer_ids": [bad]}),
        "accept...task_id": call(
            "ACCEPT",
            {**accept, "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task(task_id=bad)]}}]},
        ),
        "accept...agent_id": call(
            "ACCEPT",
            {**accept, "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task(agent_id=bad)]}}]},
        ),
        "accept...executor_id": call(
            "ACCEPT",
            {
                **accept,
                "operations": [
                    {
                        "type": "LAUNCH_GROUP",
                        "launch_group": {
                            "executor": {"type": "DEFAULT", "executor_id": bad},
                            "task_group": {"tasks": [task()]},
                        },
                    }
                ],
            },
        ),
        "accept.operations.id": call("ACCEPT", {**accept, "operations": [{"type": "LAUNCH", "id": bad}]}),
        "kill.task_id": call("KILL", {"task_id": bad, "agent_id": agent}),
        "kill.agent_id": call("KILL", {"task_id": {"value": "t"}, "agent_id": bad}),
        "shutdown.executor_id": call("SHUTDOWN", {"executor_id": bad, "agent_id": agent}),
        "shutdown.agent_id": call("SHUTDOWN", {"executor_id": {"value": "e"}, "agent_id": bad}),
        "acknowledge.task_id": call("ACKNOWLEDGE", {"agent_id": agent, "task_id": bad, "uuid": UUID}),
        "acknowledge.agent_id": call(
            "ACKNOWLEDGE", {"agent_id": bad, "task_id": {"value": "t"}, "uuid": UUID}
        ),
        "reconcile.tasks.task_id": call("RECONCILE", {"tasks": [{"task_id": bad}]}),
        "reconcile.tasks.agent_id": call(
            "RECONCILE", {"tasks": [{"task_id": {"value": "t"}, "agent_id": bad}]}
        ),
        "message.agent_id": call("MESSAGE", {"agent_id": bad, "executor_id": {"value": "e"}, "data": ""}),
        "message.executor_id": call("MESSAGE", {"agent_id": agent, "executor_id": bad, "data": ""}),
        "update_framework.framework_info.id": call(
            "UPDATE_FRAMEWORK", {"framework_info": {"user": "u", "name": "n", "id": bad}}
        ),
    }


def _refused(status: int, text: str, what: object) -> None:
    assert status == 400 and "is invalid" in text, (status, text, what)


@SETTINGS
@given(data=st.data(), drawn=ids())
def test_scheduler_calls_with_ids_that_climb_are_refused(
    cluster: Cluster, data: st.DataObject, drawn: Drawn
) -> None:
    calls = scheduler_calls(cluster, {"value": drawn.value})
    body = calls[data.draw(st.sampled_from(sorted(calls)), label="field")]
    status, text = post_answer(
        cluster.port, "/api/v1/scheduler", body, {"Mesos-Stream-Id": cluster.stream_id}
    )
    field = next(name for name, each in calls.items() if each is body)
    if drawn.refused and field in LAUNCHED:
        # As Mesos: the ACCEPT is taken (202) and each task with a bad id ends TASK_ERROR.
        assert status == 202, (status, text, body)
    elif drawn.refused:
        _refused(status, text, body)
    else:  # what Mesos accepts names nothing known: dropped tasks, ignored calls, or a 4xx
        assert status < 500, (status, text, body)
    cluster.canary.assert_intact(body)


# Ids inside the tasks and executors an ACCEPT launches: validated with each task.
LAUNCHED = {"accept...task_id", "accept...agent_id", "accept...executor_id"}


@SETTINGS
@given(drawn=ids().filter(lambda d: d.refused), where=st.sampled_from(["both", "info"]))
def test_subscribe_with_an_id_that_climbs_is_refused(
    cluster: Cluster, drawn: Drawn, where: str
) -> None:
    """Only refused ids: an accepted one would subscribe, and its answer is a stream."""
    bad = {"value": drawn.value}
    body = {
        "type": "SUBSCRIBE",
        "subscribe": {"framework_info": {"user": "u", "name": "n", "id": bad}},
        **({"framework_id": bad} if where == "both" else {}),
    }
    status, text = post_answer(cluster.port, "/api/v1/scheduler", body, {})
    assert status == 400, (status, text, body)
    cluster.canary.assert_intact(body)


# The id fields of each call an agent makes once registered.
AGENT_CALL_IDS = {
    "STATUS_UPDATE": ["agent_id", "framework_id", "executor_id", "task_id"],
    "EXECUTOR_MESSAGE": ["agent_id", "framework_id", "executor_id"],
    "EXITED_EXECUTOR": ["agent_id", "framework_id", "executor_id"],
    "UNREGISTER": ["agent_id"],
}


@SETTINGS
@given(
    type_and_field=st.sampled_from(
        [(type_, field) for type_, fields in AGENT_CALL_IDS.items() for field in fields]
    ),
    drawn=ids(),
)
def test_agent_calls_with_ids_that_climb_are_refused(
    cluster: Cluster, type_and_field: tuple[str, str], drawn: Drawn
) -> None:
    type_, field = type_and_field
    bad = {"value": drawn.value}

    def pick(name: str, default: dict[str, str]) -> dict[str, str]:
        return bad if field == name else default

    framework_id = pick("framework_id", {"value": cluster.framework_id})
    executor_id = pick("executor_id", {"value": "e"})
    part = {
        "STATUS_UPDATE": {
            "framework_id": framework_id,
            "status": {
                "task_id": pick("task_id", {"value": "t"}),
                "state": "TASK_RUNNING",
                "uuid": UUID,
                "executor_id": executor_id,
            },
        },
        "EXECUTOR_MESSAGE": {"framework_id": framework_id, "executor_id": executor_id, "data": ""},
        "EXITED_EXECUTOR": {"framework_id": framework_id, "executor_id": executor_id},
        "UNREGISTER": {},
    }[type_]
    # Sent as an agent that is not registered: what gets past the ids is refused as that.
    agent_id = pick("agent_id", {"value": "not-registered"})
    body = {"type": type_, "agent_id": agent_id, type_.lower(): part}
    status, text = post_answer(cluster.port, "/internal/agent", body, {})
    if drawn.refused:
        _refused(status, text, body)
    else:
        assert 400 <= status < 500, (status, text, body)
    cluster.canary.assert_intact(body)


@SETTINGS
@given(drawn=ids().filter(lambda d: d.refused))
def test_register_with_an_agent_id_that_climbs_is_refused(cluster: Cluster, drawn: Drawn) -> None:
    body = {
        "type": "REGISTER",
        "register": {"agent_info": {"hostname": "h", "id": {"value": drawn.value}}},
    }
    status, text = post_answer(cluster.port, "/internal/agent", body, {})
    _refused(status, text, body)
    cluster.canary.assert_intact(body)
