"""HTTP authentication of every endpoint of the master and the agent (Mesos's realms).

Each route of the real routers is called with no, malformed, unknown and wrong
credentials when its realm's switch is on: 401 with ``WWW-Authenticate: Basic
realm="<realm>"`` and a reason, and a refused write changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.agent_fake_master import AgentProcess, FakeMaster
from tests.integration.master_harness import base_url, running_master, until

from mesilla.agent.main import routes as agent_routes
from mesilla.common.authentication import MASTER_AGENT, basic_authorization
from mesilla.common.http import Router

pytestmark = [pytest.mark.integration]

PRINCIPAL, SECRET = "ops", "s3cr3t-value"


def basic(principal: str, secret: str) -> dict[str, str]:
    return {"Authorization": basic_authorization(principal, secret)}


REFUSED = {
    "no credentials": {},
    "wrong secret": basic(PRINCIPAL, "not-it"),
    "unknown principal": basic("nobody", SECRET),
    "malformed": {"Authorization": "Basic !!!"},
    "other scheme": {"Authorization": "Bearer abc"},
}


def credentials_file(tmp_path: Path, *extra: tuple[str, str]) -> Path:
    path = tmp_path / "credentials.json"
    entries = [{"principal": p, "secret": s} for p, s in [(PRINCIPAL, SECRET), *extra]]
    path.write_text(json.dumps({"credentials": entries}))
    path.chmod(0o600)
    return path


async def assert_every_route_refuses(base: str, router: Router, skip: frozenset[str] = frozenset()) -> int:
    checked = 0
    async with aiohttp.ClientSession() as session:
        for path in router.paths():
            route = router.resolve(path)
            assert route is not None
            if route.realm is None or route.realm in skip:
                continue
            for method in sorted(route.methods):
                for what, headers in REFUSED.items():
                    async with session.request(method, base + path, headers=headers, data=b"{}") as r:
                        body = await r.text()
                        assert r.status == 401, (method, path, what, r.status, body)
                        assert r.headers["WWW-Authenticate"] == f'Basic realm="{route.realm}"'
                        assert "failed" in body and SECRET not in body
                async with session.request(
                    method, base + path, headers=basic(PRINCIPAL, SECRET), data=b"{}"
                ) as r:
                    assert r.status != 401, (method, path, await r.text())
                checked += 1
    return checked


ALL_MASTER_SWITCHES = (
    "--authenticate_http_readonly",
    "--authenticate_http_readwrite",
    "--authenticate_http_frameworks",
    "--authenticate_agents",
)


async def test_every_master_route_refuses_missing_and_wrong_credentials(tmp_path: Path) -> None:
    creds = credentials_file(tmp_path)
    async with running_master(tmp_path / "m", *ALL_MASTER_SWITCHES, f"--credentials={creds}") as server:
        checked = await assert_every_route_refuses(base_url(server), server.router)
        assert checked >= 10
        async with aiohttp.ClientSession() as session:
            # Unauthenticated endpoints stay open, as Mesos's.
            async with session.get(base_url(server) + "/version") as r:
                assert r.status == 200
            async with session.get(base_url(server) + "/health") as r:
                assert r.status == 200
            # /flags shows the file's path, never its secrets.
            async with session.get(base_url(server) + "/flags", headers=basic(PRINCIPAL, SECRET)) as r:
                flags = (await r.json())["flags"]
                assert flags["credentials"] == str(creds)
                assert SECRET not in json.dumps(flags)


async def test_a_refused_write_changes_nothing(tmp_path: Path) -> None:
    creds = credentials_file(tmp_path)
    async with running_master(
        tmp_path / "m", "--authenticate_http_readwrite", f"--credentials={creds}"
    ) as server:
        url = base_url(server) + "/api/v1"
        update = {
            "type": "UPDATE_WEIGHTS",
            "update_weights": {"weight_infos": [{"role": "r", "weight": 3.0}]},
        }
        async with aiohttp.ClientSession() as session:
            for headers in REFUSED.values():
                async with session.post(url, json=update, headers=headers) as r:
                    assert r.status == 401
            async with session.post(url, json={"type": "GET_WEIGHTS"}, headers=basic(PRINCIPAL, SECRET)) as r:
                assert (await r.json())["get_weights"].get("weight_infos", []) == []
            async with session.post(url, json=update, headers=basic(PRINCIPAL, SECRET)) as r:
                assert r.status == 200, await r.text()
            async with session.post(url, json={"type": "GET_WEIGHTS"}, headers=basic(PRINCIPAL, SECRET)) as r:
                assert (await r.json())["get_weights"]["weight_infos"] == [{"role": "r", "weight": 3.0}]


async def _subscribe(
    session: aiohttp.ClientSession, base: str, info: dict[str, Any], headers: dict[str, str]
) -> tuple[int, str]:
    call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": info}}
    async with session.post(base + "/api/v1/scheduler", json=call, headers=headers) as r:
        if r.status == 200:
            await r.content.readline()  # the SUBSCRIBED record's length
            return r.status, r.headers["Mesos-Stream-Id"]
        return r.status, await r.text()


async def test_scheduler_principal_must_match_the_framework_info(tmp_path: Path) -> None:
    creds = credentials_file(tmp_path, ("fw", "fw-secret"))
    async with running_master(
        tmp_path / "m", "--authenticate_frameworks", f"--credentials={creds}"
    ) as server:
        base = base_url(server)
        async with aiohttp.ClientSession() as session:
            status, text = await _subscribe(session, base, {"user": "root", "name": "x"}, {})
            assert status == 401
            status, text = await _subscribe(
                session, base, {"user": "root", "name": "x", "principal": "other"}, basic("fw", "fw-secret")
            )
            assert status == 400 and "does not match principal 'other'" in text
            status, _ = await _subscribe(
                session, base, {"user": "root", "name": "x"}, basic("fw", "fw-secret")
            )
            assert status == 200
            framework = next(iter(server.master.frameworks.values()))
            # As Mesos: an authenticated framework without a principal gets its own.
            assert framework.info.principal == "fw"
            teardown = {"type": "TEARDOWN", "framework_id": {"value": framework.id}}
            async with session.post(
                base + "/api/v1/scheduler",
                json=teardown,
                headers={**basic(PRINCIPAL, SECRET), "Mesos-Stream-Id": framework.stream_id or ""},
            ) as r:
                assert r.status == 400 and "does not match" in await r.text()
            assert server.master.frameworks.get(framework.id) is framework


class _Address:
    def __init__(self, address: str) -> None:
        self.address = address


@pytest.fixture
async def agent_master(tmp_path: Path) -> AsyncIterator[tuple[Any, Path]]:
    creds = credentials_file(tmp_path, ("agent", "agent-secret"))
    async with running_master(tmp_path / "m", "--authenticate_agents", f"--credentials={creds}") as server:
        yield server, tmp_path


async def test_agents_authenticate_with_their_credential(agent_master: tuple[Any, Path]) -> None:
    server, tmp_path = agent_master
    master = _Address(f"127.0.0.1:{server.port}")
    stranger = AgentProcess(master, str(tmp_path / "w1"), str(tmp_path / "r1"))  # type: ignore[arg-type]
    try:
        await stranger.start()
        async with aiohttp.ClientSession() as session:
            async with session.post(base_url(server) + "/internal/agent", data=b"{}") as r:
                assert r.status == 401
                assert r.headers["WWW-Authenticate"] == f'Basic realm="{MASTER_AGENT}"'
        assert not server.master.agents
    finally:
        await stranger.stop()
    credential = tmp_path / "credential"
    credential.write_text("agent agent-secret\n")
    known = AgentProcess(master, str(tmp_path / "w2"), str(tmp_path / "r2"), f"--credential={credential}")  # type: ignore[arg-type]
    try:
        await known.start()
        await until(lambda: bool(server.master.agents), "the agent with its credential registered")
    finally:
        await known.stop()


async def test_every_agent_route_refuses_missing_and_wrong_credentials(tmp_path: Path) -> None:
    creds = credentials_file(tmp_path)
    master = FakeMaster()
    await master.start()
    proc = AgentProcess(
        master, str(tmp_path / "work"), str(tmp_path / "run"),
        "--authenticate_http_readonly", "--authenticate_http_readwrite", f"--http_credentials={creds}",
    )
    try:
        agent = await proc.start()
        base = f"http://{agent.endpoint}"
        # The executor realm has its own switch (--authenticate_http_executors).
        checked = await assert_every_route_refuses(
            base, agent_routes(agent)[0], skip=frozenset({"mesos-agent-executor"})
        )
        assert checked >= 8
        async with aiohttp.ClientSession() as session:
            async with session.post(
                base + "/api/v1", json={"type": "GET_FLAGS"}, headers=basic(PRINCIPAL, SECRET)
            ) as r:
                flags = {f["name"]: f.get("value") for f in (await r.json())["get_flags"]["flags"]}
                assert flags["http_credentials"] == str(creds)
    finally:
        await proc.stop()
        await master.stop()


async def test_network_service_admins_are_authenticated_principals(tmp_path: Path) -> None:
    creds = credentials_file(tmp_path)
    async with running_master(
        tmp_path / "m", "--network_service", "--authenticate_http_readwrite", f"--credentials={creds}"
    ) as server:
        url = base_url(server) + "/network/v2.0/networks"
        async with aiohttp.ClientSession() as session:
            for headers in REFUSED.values():
                async with session.get(url, headers=headers) as r:
                    assert r.status == 403, await r.text()
            async with session.get(url, headers=basic(PRINCIPAL, SECRET)) as r:
                assert r.status == 200, await r.text()
