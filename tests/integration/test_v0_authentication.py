"""CRAM-MD5 authentication of v0 frameworks (`master/authenticator.py`) with
--authenticate_frameworks: a fake v0 driver is its own authenticatee and answers
the master's challenge as RFC 2195's client does; only an authenticated UPID
registers, and messages out of turn end the session with an error."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from tests.integration.master_harness import running_master
from tests.integration.operator_cluster import Cluster
from tests.integration.test_v0_scheduler import INFO, V0Driver

pytestmark = [pytest.mark.integration]

PRINCIPAL, SECRET = "fw", "fw-secret"


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[V0Driver]:
    credentials = tmp_path / "credentials.json"
    credentials.write_text(json.dumps({"credentials": [{"principal": PRINCIPAL, "secret": SECRET}]}))
    flags = ("--registry=in_memory", "--authenticate_frameworks", f"--credentials={credentials}")
    async with running_master(tmp_path, *flags) as server, aiohttp.ClientSession() as session:
        cluster = Cluster(server, session)
        d = V0Driver(cluster)
        await d.start()
        try:
            yield d
        finally:
            await d.stop()
            await cluster.close()


def respond(challenge: bytes, principal: str, secret: str) -> str:
    """RFC 2195's client: the principal, a space, and the hex HMAC-MD5 of the challenge."""
    digest = hmac.new(secret.encode(), challenge, hashlib.md5).hexdigest()
    return base64.b64encode(f"{principal} {digest}".encode()).decode()


async def begin(driver: V0Driver) -> None:
    assert await driver.send("AuthenticateMessage", {"pid": driver.pid}) == 202
    assert (await driver.next("AuthenticationMechanismsMessage"))["mechanisms"] == ["CRAM-MD5"]


async def finish(driver: V0Driver, secret: str) -> str:
    """The rest of the exchange once begun; returns the name of the master's last message."""
    assert await driver.send("AuthenticationStartMessage", {"mechanism": "CRAM-MD5"}) == 202
    challenge = base64.b64decode((await driver.next("AuthenticationStepMessage"))["data"])
    assert challenge.startswith(b"<") and challenge.endswith(b">")
    response = respond(challenge, PRINCIPAL, secret)
    assert await driver.send("AuthenticationStepMessage", {"data": response}) == 202
    name, _message, _sender = await driver.received.get()
    return name


async def authenticate(driver: V0Driver, secret: str) -> str:
    await begin(driver)
    return await finish(driver, secret)


async def test_an_authenticated_framework_registers_as_its_principal(driver: V0Driver) -> None:
    assert await authenticate(driver, SECRET) == "AuthenticationCompletedMessage"
    assert await driver.send("RegisterFrameworkMessage", {"framework": INFO}) == 202
    framework_id = (await driver.next("FrameworkRegisteredMessage"))["framework_id"]
    state = await driver.cluster.get("/state")
    assert [f["principal"] for f in state["frameworks"] if f["id"] == framework_id["value"]] == [PRINCIPAL]


async def test_an_unauthenticated_framework_is_refused(driver: V0Driver) -> None:
    assert await driver.send("RegisterFrameworkMessage", {"framework": INFO}) == 202
    error = await driver.next("FrameworkErrorMessage")
    assert error["message"] == f"Framework at {driver.pid} is not authenticated"
    assert (await driver.cluster.get("/state"))["frameworks"] == []


async def test_a_wrong_secret_fails_and_the_framework_stays_unauthenticated(driver: V0Driver) -> None:
    assert await authenticate(driver, "wrong") == "AuthenticationFailedMessage"
    assert await driver.send("RegisterFrameworkMessage", {"framework": INFO}) == 202
    assert "is not authenticated" in (await driver.next("FrameworkErrorMessage"))["message"]


async def test_a_principal_other_than_the_authenticated_one_is_refused(driver: V0Driver) -> None:
    assert await authenticate(driver, SECRET) == "AuthenticationCompletedMessage"
    info = {**INFO, "principal": "someone-else"}
    assert await driver.send("RegisterFrameworkMessage", {"framework": info}) == 202
    error = await driver.next("FrameworkErrorMessage")
    assert error["message"] == (
        "Framework principal 'someone-else' does not match authenticated principal 'fw'"
    )


async def test_messages_out_of_turn_end_the_session_with_an_error(driver: V0Driver) -> None:
    # No session: dropped (202), as libprocess drops what no handler takes.
    assert await driver.send("AuthenticationStepMessage", {"data": "eA=="}) == 202
    assert await driver.send("AuthenticateMessage", {"pid": driver.pid}) == 202
    await driver.next("AuthenticationMechanismsMessage")
    assert await driver.send("AuthenticationStepMessage", {"data": "eA=="}) == 202
    error = await driver.next("AuthenticationErrorMessage")
    assert error["error"] == "Unexpected authentication 'step' received"
    assert await driver.send("AuthenticateMessage", {"pid": driver.pid}) == 202
    await driver.next("AuthenticationMechanismsMessage")
    assert await driver.send("AuthenticationStartMessage", {"mechanism": "PLAIN"}) == 202
    error = await driver.next("AuthenticationErrorMessage")
    assert error["error"] == "Unsupported authentication mechanism 'PLAIN'"
    # Malformed: dropped, the master healthy.
    assert await driver.send("AuthenticateMessage", {}, raw=b"\xff\xff\xff") == 202
    assert await driver.send("AuthenticateMessage", {"pid": "not a pid"}) == 202
    assert await authenticate(driver, SECRET) == "AuthenticationCompletedMessage"


async def test_a_registration_during_authentication_waits_for_the_retry(driver: V0Driver) -> None:
    await begin(driver)
    # Dropped (Mesos queues it): neither an error nor a registration; the driver retries.
    assert await driver.send("RegisterFrameworkMessage", {"framework": INFO}) == 202
    assert await finish(driver, SECRET) == "AuthenticationCompletedMessage"
    assert driver.received.empty()
    assert await driver.send("RegisterFrameworkMessage", {"framework": INFO}) == 202
    assert (await driver.next("FrameworkRegisteredMessage"))["framework_id"]["value"]
