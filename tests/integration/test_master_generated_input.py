"""Generated input at the master's scheduler and agent endpoints never gets a 5xx.

The master runs on its own event loop in a thread; hypothesis drives it with a
blocking client, reading only each response's status line (a successful
SUBSCRIBE or REGISTER answers a stream that never ends by itself).
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

    thread = threading.Thread(
        target=asyncio.run, args=(serve(tmp_path_factory.mktemp("master")),)
    )
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
