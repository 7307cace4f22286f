"""The scheduler API of an in-process master: framing, status codes, and each call."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from tests.integration.master_harness import (
    Scheduler,
    agent_and_scheduler,
    base_url,
    command_task,
    running_master,
    until,
)

from mesilla.master.main import MasterServer, MasterStartError

pytestmark = pytest.mark.integration


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[MasterServer]:
    async with running_master(tmp_path, "--heartbeat_interval=100ms") as server:
        yield server


async def test_subscribe_answers_a_recordio_stream_of_json_events(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    call = {
        "type": "SUBSCRIBE",
        "subscribe": {"framework_info": {"user": "root", "name": "f"}},
    }
    async with session.post(
        f"{base_url(master)}/api/v1/scheduler", json=call
    ) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/json")
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert len(response.headers["Mesos-Stream-Id"]) == 36
        raw = b""
        while raw.count(b"\n") < 4:
            raw += await asyncio.wait_for(response.content.readany(), 10)
    # <length>\n<compact single-line JSON> records, the first SUBSCRIBED then HEARTBEAT.
    length, _, rest = raw.partition(b"\n")
    record = rest[: int(length)]
    assert b"\n" not in record and b": " not in record
    subscribed = json.loads(record)
    assert subscribed["type"] == "SUBSCRIBED"
    assert subscribed["subscribed"]["heartbeat_interval_seconds"] == pytest.approx(0.1)
    assert subscribed["subscribed"]["master_info"]["port"] == master.port
    assert subscribed["subscribed"]["framework_id"]["value"].startswith(
        master.master.id
    )
    length2, _, rest2 = rest[int(length) :].partition(b"\n")
    assert json.loads(rest2[: int(length2)]) == {"type": "HEARTBEAT"}


async def test_heartbeats_keep_coming(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    scheduler = Scheduler(session, base_url(master))
    await scheduler.subscribe()
    for _ in range(3):
        assert (await scheduler.next_event(skip=())) == {"type": "HEARTBEAT"}
    await scheduler.close()


@pytest.mark.parametrize(
    ("body", "headers", "status", "reason"),
    [
        (b"{not json", {}, 400, "Failed to parse body into JSON"),
        (b"", {}, 400, "Expecting a JSON Call"),
        (b'{"type": "NO_SUCH_CALL"}', {}, 400, "Failed to validate Call"),
        (b'{"type": "SUBSCRIBE"}', {}, 400, "Expecting 'subscribe' to be present"),
        (
            b'{"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": 1}}}',
            {},
            400,
            "framework_info.user",
        ),
        (b'{"type": "TEARDOWN"}', {}, 400, "Expecting 'framework_id' to be present"),
        (
            b'{"type": "TEARDOWN", "framework_id": {"value": "nope"}}',
            {},
            400,
            "cannot be found",
        ),
        (
            b'{"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "u", "name": "n"}}}',
            {"Mesos-Stream-Id": "x"},
            400,
            "should not include the 'Mesos-Stream-Id'",
        ),
        (
            b'{"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "u", "name": "n"}}}',
            {"Accept": "text/html"},
            406,
            "Accept",
        ),
        (
            b'{"type": "TEARDOWN"}',
            {"Content-Type": "text/plain"},
            415,
            "application/x-protobuf",
        ),
    ],
)
async def test_malformed_calls_get_4xx_with_a_reason(
    master: MasterServer,
    session: aiohttp.ClientSession,
    body: bytes,
    headers: dict[str, str],
    status: int,
    reason: str,
) -> None:
    headers = {"Content-Type": "application/json", **headers}
    async with session.post(
        f"{base_url(master)}/api/v1/scheduler", data=body, headers=headers
    ) as response:
        assert response.status == status
        assert reason in await response.text()


async def test_only_post_is_allowed(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    async with session.get(f"{base_url(master)}/api/v1/scheduler") as response:
        assert response.status == 405


async def test_stream_id_is_checked(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    scheduler = Scheduler(session, base_url(master))
    await scheduler.subscribe()
    wrong = await scheduler.call(
        "REVIVE", {}, stream_id="00000000-0000-0000-0000-000000000000"
    )
    assert wrong.status == 403
    assert "didn't match" in await wrong.text()
    call = {"type": "REVIVE", "framework_id": {"value": scheduler.framework_id}}
    async with session.post(scheduler.url, json=call) as missing:
        assert missing.status == 403
        assert "Mesos-Stream-Id" in await missing.text()
    assert (await scheduler.call("REVIVE", {})).status == 202
    await scheduler.close()


async def test_unknown_fields_are_ignored_and_missing_accept_means_json(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    call = {
        "type": "SUBSCRIBE",
        "no_such_field": 1,
        "subscribe": {
            "framework_info": {"user": "u", "name": "n", "future_field": {"x": 1}}
        },
    }
    async with session.post(
        f"{base_url(master)}/api/v1/scheduler",
        data=json.dumps(call),
        headers={"Content-Type": "application/json", "Accept": ""},
    ) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/json")


async def test_calls_of_a_disconnected_framework_are_forbidden(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    scheduler = Scheduler(session, base_url(master))
    await scheduler.subscribe({"failover_timeout": 3600})
    stream_id = scheduler.stream.stream_id if scheduler.stream else None
    await scheduler.close()
    framework = master.master.frameworks[scheduler.framework_id or ""]
    await until(
        lambda: not framework.connected, "the master to notice the disconnection"
    )
    call = {"type": "REVIVE", "framework_id": {"value": scheduler.framework_id}}
    async with session.post(
        scheduler.url, json=call, headers={"Mesos-Stream-Id": stream_id or ""}
    ) as r:
        assert r.status == 403
        assert "not subscribed" in await r.text()


async def test_invalid_framework_info_gets_an_error_event(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    scheduler = Scheduler(session, base_url(master))
    event = await scheduler.subscribe({"roles": ["a"]})
    assert event["type"] == "ERROR"
    assert "MULTI_ROLE" in event["error"]["message"]
    assert scheduler.stream is not None and await scheduler.stream.ended()


async def test_request_and_inverse_offer_calls_are_accepted(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    scheduler = Scheduler(session, base_url(master))
    await scheduler.subscribe()
    assert (await scheduler.call("REQUEST", {"requests": []})).status == 202
    assert (
        await scheduler.call("DECLINE_INVERSE_OFFERS", {"inverse_offer_ids": []})
    ).status == 202
    await scheduler.close()


async def test_unsupported_operations_are_rejected_whole(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    agent, scheduler = await agent_and_scheduler(session, master)
    offer = await scheduler.offer()
    response = await scheduler.call(
        "ACCEPT",
        {
            "offer_ids": [offer["id"]],
            "operations": [{"type": "RESERVE", "reserve": {"resources": []}}],
        },
    )
    assert response.status == 400
    assert "RESERVE is not supported" in await response.text()
    # The offer is untouched and still usable.
    response = await scheduler.launch(offer, command_task("t", offer["agent_id"]))
    assert response.status == 202
    assert (await agent.next_event("RUN_TASK"))["run_task"]["task"]["task_id"][
        "value"
    ] == "t"
    await scheduler.close()
    await agent.disconnect()


async def test_update_framework(
    master: MasterServer, session: aiohttp.ClientSession
) -> None:
    agent, scheduler = await agent_and_scheduler(session, master)
    offer = await scheduler.offer()
    await scheduler.launch(offer, command_task("t", offer["agent_id"]))
    await agent.next_event("RUN_TASK")
    info = {"user": "root", "name": "renamed", "id": {"value": scheduler.framework_id}}
    response = await scheduler.call("UPDATE_FRAMEWORK", {"framework_info": info})
    assert response.status == 200, await response.text()
    event = await agent.next_event("UPDATE_FRAMEWORK")
    assert event["update_framework"]["framework_info"]["name"] == "renamed"
    assert master.master.frameworks[scheduler.framework_id or ""].info.name == "renamed"
    response = await scheduler.call(
        "UPDATE_FRAMEWORK", {"framework_info": {**info, "user": "other"}}
    )
    assert response.status == 400
    assert "user" in await response.text()
    await scheduler.close()
    await agent.disconnect()


async def test_calls_before_recovery_get_503(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with running_master(tmp_path) as server:
        server.master.recovered = False
        async with session.post(
            f"{base_url(server)}/api/v1/scheduler",
            json={
                "type": "SUBSCRIBE",
                "subscribe": {"framework_info": {"user": "u", "name": "n"}},
            },
        ) as response:
            assert response.status == 503
        server.master.recovered = True


async def test_a_taken_port_is_a_clear_start_error(
    master: MasterServer, tmp_path: Path
) -> None:
    with pytest.raises(MasterStartError, match="choose another --ip or --port"):
        async with running_master(tmp_path / "second", f"--port={master.port}"):
            pass


async def test_subscribes_while_the_master_stops_get_503_with_a_reason(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """Between `Master.stop` and the server's cleanup the port still answers: a scheduler's
    or an operator's SUBSCRIBE then hears that the master is going away (503), not 500."""
    async with running_master(tmp_path) as server:
        await server.master.stop()
        subscribe_framework = {"framework_info": {"user": "u", "name": "n"}}
        for path, call in (
            ("/api/v1/scheduler", {"type": "SUBSCRIBE", "subscribe": subscribe_framework}),
            ("/api/v1", {"type": "SUBSCRIBE"}),
        ):
            async with session.post(base_url(server) + path, json=call) as response:
                assert response.status == 503, path
                assert "shutting down" in await response.text()
