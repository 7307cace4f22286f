"""Checks and health checks: parsing, the pure policies, and the TCP/HTTP probes on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from mesilla.executor.checks import (
    Checker,
    CheckPolicy,
    HealthPolicy,
    InvalidCheck,
    ProbeResult,
    check_status,
    healthy,
    http_probe,
    parse_check,
    tcp_probe,
)


def test_parse_defaults_as_mesos() -> None:
    spec = parse_check({"type": "TCP", "tcp": {"port": 80}}, health=True)
    assert (spec.delay, spec.interval, spec.timeout) == (15.0, 10.0, 20.0)
    assert (spec.grace_period, spec.consecutive_failures) == (10.0, 3)
    spec = parse_check(
        {"type": "HTTP", "http": {"port": 8080, "path": "/ready"}, "interval_seconds": 1}, health=False
    )
    assert (spec.kind, spec.port, spec.path, spec.interval) == ("HTTP", 8080, "/ready", 1.0)


def test_parse_command_checks_where_each_kind_nests_its_command() -> None:
    command = {"value": "true"}
    assert parse_check({"type": "COMMAND", "command": {"command": command}}, health=False).command == command
    assert parse_check({"type": "COMMAND", "command": command}, health=True).command == command


@pytest.mark.parametrize(
    ("check", "health", "message"),
    [
        ({"type": "PING"}, False, "check.type must be COMMAND, HTTP or TCP"),
        ({"type": "TCP"}, True, "health_check.tcp.port"),
        ({"type": "HTTP", "http": {"port": 70000}}, False, "check.http.port"),
        ({"type": "COMMAND", "command": {}}, False, "check.command.command"),
        ({"type": "COMMAND"}, True, "health_check.command must be"),
        (
            {"type": "TCP", "tcp": {"port": 1}, "interval_seconds": -1},
            False,
            "interval_seconds must not be negative",
        ),
        ({"type": "HTTP", "http": {"port": 1, "scheme": "https"}}, True, "scheme 'https' is not supported"),
    ],
)
def test_parse_rejects_invalid_checks_naming_the_field(check: dict, health: bool, message: str) -> None:
    with pytest.raises(InvalidCheck, match=message):
        parse_check(check, health=health)


def test_check_status_and_health_of_each_kind() -> None:
    http = parse_check({"type": "HTTP", "http": {"port": 1}}, health=True)
    assert check_status(http, ProbeResult(503)) == {"type": "HTTP", "http": {"status_code": 503}}
    assert check_status(http, ProbeResult(None, "refused")) == {"type": "HTTP", "http": {}}
    assert healthy(http, ProbeResult(302)) and not healthy(http, ProbeResult(404))
    assert not healthy(http, ProbeResult(None))
    command = parse_check({"type": "COMMAND", "command": {"value": "x"}}, health=True)
    assert check_status(command, ProbeResult(3)) == {"type": "COMMAND", "command": {"exit_code": 3}}
    assert healthy(command, ProbeResult(0)) and not healthy(command, ProbeResult(1))
    tcp = parse_check({"type": "TCP", "tcp": {"port": 1}}, health=True)
    assert check_status(tcp, ProbeResult(False)) == {"type": "TCP", "tcp": {"succeeded": False}}
    assert healthy(tcp, ProbeResult(True)) and not healthy(tcp, ProbeResult(False))


def test_check_policy_reports_changes_only() -> None:
    policy = CheckPolicy(parse_check({"type": "TCP", "tcp": {"port": 1}}, health=False))
    assert policy.feed(ProbeResult(True)) == {"type": "TCP", "tcp": {"succeeded": True}}
    assert policy.feed(ProbeResult(True)) is None
    assert policy.feed(ProbeResult(False)) == {"type": "TCP", "tcp": {"succeeded": False}}


def test_health_policy_grace_period_consecutive_failures_and_recovery() -> None:
    spec = parse_check(
        {"type": "TCP", "tcp": {"port": 1}, "grace_period_seconds": 10, "consecutive_failures": 2},
        health=True,
    )
    policy = HealthPolicy(spec, started=100.0)
    assert policy.feed(False, 105.0) is None  # within the grace period
    assert policy.feed(False, 111.0) == (False, False)
    assert policy.feed(False, 112.0) == (False, True)
    policy = HealthPolicy(spec, started=100.0)
    assert policy.feed(True, 101.0) == (True, False)
    assert policy.feed(True, 102.0) is None
    # After a success, the grace period no longer hides failures.
    assert policy.feed(False, 103.0) == (False, False)
    assert policy.feed(True, 104.0) == (True, False)
    assert policy.feed(False, 105.0) == (False, False)
    assert policy.feed(False, 106.0) == (False, True)


@pytest.fixture
async def http_server() -> AsyncIterator[int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = await reader.readline()
        while (await reader.readline()).strip():
            pass
        status = b"200 OK" if b" /ok " in request_line else b"503 Service Unavailable"
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_http_probe_reads_the_status_code(http_server: int) -> None:
    assert await http_probe(http_server, "/ok", 5) == ProbeResult(200)
    assert (await http_probe(http_server, "/bad", 5)).value == 503


async def test_probes_against_a_closed_port_fail(unused_port: int) -> None:
    result = await http_probe(unused_port, "/", 5)
    assert result.value is None and "failed" in (result.error or "")
    assert (await tcp_probe(unused_port, 5)).value is False


async def test_tcp_probe_connects(http_server: int) -> None:
    assert await tcp_probe(http_server, 5) == ProbeResult(True)


async def test_checker_loop_reports_health_until_it_asks_for_a_kill() -> None:
    spec = parse_check(
        {
            "type": "TCP",
            "tcp": {"port": 1},
            "delay_seconds": 0,
            "interval_seconds": 0,
            "grace_period_seconds": 0,
            "consecutive_failures": 2,
        },
        health=True,
    )
    outcomes = iter([True, False, False])
    reports: list[tuple[bool, bool]] = []
    done = asyncio.Event()

    async def probe(_: object) -> ProbeResult:
        return ProbeResult(next(outcomes, False))

    def on_health(ok: bool, kill: bool) -> None:
        reports.append((ok, kill))
        if kill:
            done.set()

    checker = Checker(spec, probe, on_health=on_health)
    checker.start()
    await asyncio.wait_for(done.wait(), 10)
    await checker.stop()
    assert reports[:3] == [(True, False), (False, False), (False, True)]


async def test_a_resumed_health_checker_does_not_announce_an_unchanged_health() -> None:
    # As Mesos's checkers, pause and start keep what was reported: healthy once.
    spec = parse_check(
        {"type": "TCP", "tcp": {"port": 1}, "delay_seconds": 0, "interval_seconds": 0,
         "grace_period_seconds": 0, "consecutive_failures": 1},
        health=True,
    )  # fmt: skip
    probes = 0
    outcomes = iter([True, True, True, True, False])
    reports: list[tuple[bool, bool]] = []
    done = asyncio.Event()

    async def probe(_: object) -> ProbeResult:
        nonlocal probes
        probes += 1
        return ProbeResult(next(outcomes, False))

    def on_health(ok: bool, kill: bool) -> None:
        reports.append((ok, kill))
        if not ok:
            done.set()

    checker = Checker(spec, probe, on_health=on_health)
    checker.start()
    while probes < 2:
        await asyncio.sleep(0)
    checker.pause()
    checker.start()
    await asyncio.wait_for(done.wait(), 10)
    await checker.stop()
    assert reports[:2] == [(True, False), (False, True)]
