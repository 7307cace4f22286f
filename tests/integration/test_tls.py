"""TLS end to end with a CA the test makes (openssl): master and agent listen over TLS,
the agent registers with its master over it, a command task's executor reaches its agent
over it, and with --ssl_require_cert only clients with a certificate of the CA get in."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from tests.integration.agent_fake_master import AgentProcess
from tests.integration.master_harness import Scheduler, command_task, running_master, until

from mesilla.common.tls import client_context

pytestmark = [pytest.mark.integration]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=mesilla-test-ca",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"))
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"))
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            str(d / f"{name}.csr"),
            "-CA",
            str(d / "ca.pem"),
            "-CAkey",
            str(d / "ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            str(d / f"{name}.ext"),
            "-out",
            str(d / f"{name}.pem"),
        )
    return d


def tls_flags(certs: Path) -> list[str]:
    return [f"--ssl_cert_file={certs / 'server.pem'}", f"--ssl_key_file={certs / 'server.key'}",
            f"--ssl_ca_file={certs / 'ca.pem'}"]


class _Address:
    def __init__(self, address: str) -> None:
        self.address = address


@pytest.fixture
async def session(certs: Path) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=client_context(str(certs / "ca.pem")))
    async with aiohttp.ClientSession(connector=connector) as s:
        yield s


async def test_master_agent_and_executor_over_tls(
    tmp_path: Path, certs: Path, session: aiohttp.ClientSession
) -> None:
    async with running_master(tmp_path / "m", *tls_flags(certs)) as server:
        base = f"https://127.0.0.1:{server.port}"
        async with session.get(base + "/health") as r:
            assert r.status == 200
        async with aiohttp.ClientSession() as plain:
            with pytest.raises(aiohttp.ClientError):
                async with plain.get(f"http://127.0.0.1:{server.port}/health") as r:
                    await r.read()
        agent = AgentProcess(
            _Address(f"127.0.0.1:{server.port}"), str(tmp_path / "w"), str(tmp_path / "r"), *tls_flags(certs)
        )  # type: ignore[arg-type]
        try:
            running = await agent.start()
            await until(lambda: bool(server.master.agents), "the agent registered over TLS")
            async with session.get(f"https://{running.endpoint}/health") as r:
                assert r.status == 200
            scheduler = Scheduler(session, base)
            await scheduler.subscribe()
            try:
                offer = await scheduler.offer()
                task = command_task("over-tls", offer["agent_id"], command={"value": "true"})
                assert (await scheduler.launch(offer, task)).status == 202
                # The command executor subscribed and reported through the agent's TLS listener.
                states: list[str] = []
                while not states or states[-1] not in ("TASK_FINISHED", "TASK_FAILED", "TASK_LOST"):
                    status = await scheduler.update("over-tls")
                    states.append(status["state"])
                    if "uuid" in status:
                        await scheduler.call(
                            "ACKNOWLEDGE",
                            {
                                "agent_id": status["agent_id"],
                                "task_id": status["task_id"],
                                "uuid": status["uuid"],
                            },
                        )
                assert states[-1] == "TASK_FINISHED", states
                assert "TASK_RUNNING" in states
            finally:
                await scheduler.close()
        finally:
            await agent.stop()


async def test_require_cert(tmp_path: Path, certs: Path, session: aiohttp.ClientSession) -> None:
    async with running_master(tmp_path / "m", *tls_flags(certs), "--ssl_require_cert") as server:
        base = f"https://127.0.0.1:{server.port}"
        with pytest.raises(aiohttp.ClientError):
            async with session.get(base + "/health") as r:
                await r.read()
        with_cert = client_context(
            str(certs / "ca.pem"), (str(certs / "client.pem"), str(certs / "client.key"))
        )
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=with_cert)) as s:
            async with s.get(base + "/health") as r:
                assert r.status == 200


def test_half_a_configuration_refuses_to_start(tmp_path: Path, certs: Path) -> None:
    from mesilla.common.flags import FlagError, parse
    from mesilla.common.tls import from_flags
    from mesilla.master.main import MASTER_FLAGS

    only_cert = parse(
        MASTER_FLAGS, [f"--work_dir={tmp_path}", f"--ssl_cert_file={certs / 'server.pem'}"], environ={}
    )
    with pytest.raises(FlagError, match="both a certificate and its key"):
        from_flags(only_cert, environ={})
    env = {"LIBPROCESS_SSL_ENABLED": "true", "LIBPROCESS_SSL_CERT_FILE": str(certs / "server.pem"),
           "LIBPROCESS_SSL_KEY_FILE": str(certs / "server.key")}
    config = from_flags(parse(MASTER_FLAGS, [f"--work_dir={tmp_path}"], environ={}), environ=env)
    assert config is not None and isinstance(config.server_context(), ssl.SSLContext)
