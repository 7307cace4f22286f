"""Checks and health checks of a task, as Mesos's `src/checks/` runs them.

Two kinds, both from the task's JSON:

* ``TaskInfo.check`` (CheckInfo): the result itself is reported, as a
  ``CheckStatusInfo``, whenever it changes (``command.exit_code``,
  ``http.status_code``, ``tcp.succeeded``; the inner message is left empty
  when the check could not run or timed out).
* ``TaskInfo.health_check`` (HealthCheck): healthy or not. The first success
  and the first success after failures report healthy; failures before the
  first success are ignored during ``grace_period_seconds``; every counted
  failure reports unhealthy, and the one reaching ``consecutive_failures``
  asks for the task to be killed.

Probes: COMMAND runs as a nested container ``check-<uuid>`` of the task's
container (LAUNCH_NESTED_CONTAINER_SESSION, WAIT, REMOVE through the agent);
HTTP (GET, 2xx-3xx healthy) and TCP (connect) go to 127.0.0.1 from the
executor, which shares the pod's network namespace. The policies are pure
(time is passed in); `Checker` is the asyncio loop around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, Protocol

from mesilla.executor.agent_client import AgentCallError

log = logging.getLogger(__name__)

Json = dict[str, Any]

CHECK_DEFAULTS = {"delay_seconds": 15.0, "interval_seconds": 10.0, "timeout_seconds": 20.0}
HEALTH_DEFAULTS = {**CHECK_DEFAULTS, "grace_period_seconds": 10.0, "consecutive_failures": 3}
# How long a timed-out COMMAND check container gets to die after SIGKILL.
KILLED_CHECK_WAIT = 5.0
TARGET_HOST = "127.0.0.1"  # not "localhost": images may lack it in /etc/hosts


class InvalidCheck(ValueError):
    """A check or health check the executor cannot run; the message names the field."""


class ProbeResult(NamedTuple):
    """One probe's outcome: `value` is the exit code, HTTP status or connect success; None = could not run."""

    value: int | bool | None
    error: str | None = None


class CheckSpec(NamedTuple):
    kind: str  # COMMAND | HTTP | TCP
    delay: float
    interval: float
    timeout: float  # 0: no timeout, as Mesos
    command: Json | None = None
    port: int | None = None
    path: str = ""
    scheme: str = "http"
    grace_period: float = 0.0
    consecutive_failures: int = 1


def parse_check(check: Json, *, health: bool) -> CheckSpec:
    """Validates a CheckInfo (health=False) or a HealthCheck (health=True) in its JSON form."""
    name = "health_check" if health else "check"
    kind = check.get("type")
    if kind not in ("COMMAND", "HTTP", "TCP"):
        raise InvalidCheck(f"{name}.type must be COMMAND, HTTP or TCP, not {kind!r}")
    defaults = HEALTH_DEFAULTS if health else CHECK_DEFAULTS
    numbers = {key: float(check.get(key, default)) for key, default in defaults.items()}
    for key, value in numbers.items():
        if value < 0:
            raise InvalidCheck(f"{name}.{key} must not be negative, got {value:g}")
    spec: Json = {
        "kind": kind,
        "delay": numbers["delay_seconds"],
        "interval": numbers["interval_seconds"],
        "timeout": numbers["timeout_seconds"],
    }
    if health:
        spec["grace_period"] = numbers["grace_period_seconds"]
        spec["consecutive_failures"] = max(int(numbers["consecutive_failures"]), 1)
    section = check.get(kind.lower())
    if kind == "COMMAND":
        # CheckInfo nests the CommandInfo one level deeper than HealthCheck.
        command = check.get("command") if health else (section or {}).get("command")
        if not command or not (command.get("value") or command.get("arguments")):
            where = f"{name}.command" if health else f"{name}.command.command"
            raise InvalidCheck(f"{where} must be a CommandInfo with a value")
        spec["command"] = command
    else:
        if not section or not isinstance(section.get("port"), int) or not 0 < section["port"] < 65536:
            raise InvalidCheck(f"{name}.{kind.lower()}.port must be a port number (1-65535)")
        spec["port"] = section["port"]
        spec["path"] = section.get("path", "")
        spec["scheme"] = section.get("scheme", "http")
        if spec["scheme"] != "http":
            raise InvalidCheck(f"{name}.http.scheme {spec['scheme']!r} is not supported: use 'http'")
    return CheckSpec(**spec)


# --- pure policies --------------------------------------------------------------------------


def check_status(spec: CheckSpec, result: ProbeResult) -> Json:
    """The CheckStatusInfo of one probe."""
    inner: Json = {}
    if result.value is not None:
        key = {"COMMAND": "exit_code", "HTTP": "status_code", "TCP": "succeeded"}[spec.kind]
        inner[key] = result.value
    return {"type": spec.kind, spec.kind.lower(): inner}


def healthy(spec: CheckSpec, result: ProbeResult) -> bool:
    if spec.kind == "COMMAND":
        return result.value == 0
    if spec.kind == "HTTP":
        return isinstance(result.value, int) and 200 <= result.value < 400
    return result.value is True


class HealthPolicy:
    """Turns probe outcomes into health reports: (healthy, kill_task) or None (nothing to say)."""

    def __init__(self, spec: CheckSpec, started: float) -> None:
        self.spec = spec
        self.started = started  # when checking began, for the grace period
        self.consecutive_failures = 0
        self.reported_healthy = False

    def feed(self, ok: bool, now: float) -> tuple[bool, bool] | None:
        if ok:
            report = not self.reported_healthy or self.consecutive_failures > 0
            self.reported_healthy = True
            self.consecutive_failures = 0
            return (True, False) if report else None
        if not self.reported_healthy and now - self.started <= self.spec.grace_period:
            return None  # still starting up
        self.consecutive_failures += 1
        return (False, self.consecutive_failures >= self.spec.consecutive_failures)


class CheckPolicy:
    """Reports a check's status only when it changes."""

    def __init__(self, spec: CheckSpec) -> None:
        self.spec = spec
        self.last: Json | None = None

    def feed(self, result: ProbeResult) -> Json | None:
        status = check_status(self.spec, result)
        if status == self.last:
            return None
        self.last = status
        return status


# --- probes ------------------------------------------------------------------------------------


async def tcp_probe(port: int, timeout: float | None) -> ProbeResult:
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(TARGET_HOST, port)
    except (TimeoutError, OSError) as exc:
        return ProbeResult(False, f"TCP connection to {TARGET_HOST}:{port} failed: {exc!r}")
    writer.close()
    return ProbeResult(True)


async def http_probe(port: int, path: str, timeout: float | None) -> ProbeResult:
    """GET http://127.0.0.1:<port><path>: the status code, or None if no answer."""

    async def get() -> int:
        reader, writer = await asyncio.open_connection(TARGET_HOST, port)
        try:
            request = f"GET {path or '/'} HTTP/1.1\r\nHost: {TARGET_HOST}:{port}\r\nConnection: close\r\n\r\n"
            writer.write(request.encode("latin-1"))
            await writer.drain()
            status_line = await reader.readline()
        finally:
            writer.close()
        parts = status_line.split()
        if len(parts) < 2 or not parts[1].isdigit():
            raise ValueError(f"not an HTTP status line: {status_line[:80]!r}")
        return int(parts[1])

    try:
        async with asyncio.timeout(timeout):
            return ProbeResult(await get())
    except (TimeoutError, OSError, ValueError) as exc:
        return ProbeResult(None, f"HTTP GET http://{TARGET_HOST}:{port}{path} failed: {exc!r}")


class NestedContainers(Protocol):
    """What a COMMAND probe needs of the agent API (`mesilla.executor.agent_client.AgentClient`)."""

    async def launch_session(self, container_id: Json, command: Json) -> Any: ...

    async def wait_container(self, container_id: Json) -> Json: ...

    async def kill_container(self, container_id: Json, signal: int) -> None: ...

    async def remove_container(self, container_id: Json) -> None: ...


async def command_probe(
    agent: NestedContainers, task_container: Json, command: Json, timeout: float | None
) -> ProbeResult:
    """Runs the command in a `check-<uuid>` container nested in the task's; its exit code."""
    container_id = {"value": f"check-{uuid.uuid4()}", "parent": task_container}
    session = None
    try:
        session = await agent.launch_session(container_id, command)
        try:
            async with asyncio.timeout(timeout):
                wait = await agent.wait_container(container_id)
        except TimeoutError:
            await agent.kill_container(container_id, 9)
            # Let it end before REMOVE, which refuses a running container.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILLED_CHECK_WAIT):
                    await agent.wait_container(container_id)
            return ProbeResult(None, f"COMMAND check did not return within {timeout:g}s")
        status = wait.get("exit_status")
        if status is None or not os.WIFEXITED(status):
            return ProbeResult(None, f"COMMAND check ended without an exit code ({wait})")
        return ProbeResult(os.WEXITSTATUS(status))
    except (OSError, AgentCallError) as exc:  # the agent is unreachable or refused
        return ProbeResult(None, f"COMMAND check could not run: {exc}")
    finally:
        if session is not None:
            await session.close()
            try:
                await agent.remove_container(container_id)
            except (OSError, AgentCallError) as exc:
                log.warning("could not remove check container %s: %s", container_id["value"], exc)


# --- the loop ------------------------------------------------------------------------------------


class Checker:
    """Runs one check or health check of a task until stopped, reporting through callbacks."""

    def __init__(
        self,
        spec: CheckSpec,
        probe: Callable[[CheckSpec], Awaitable[ProbeResult]],
        *,
        on_check: Callable[[Json], None] | None = None,
        on_health: Callable[[bool, bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self._probe = probe
        self._on_check = on_check
        self._on_health = on_health
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        # Kept across pause and start, as Mesos's checkers keep what they reported:
        # a resumed checker does not announce an unchanged health or check status again.
        self._health = HealthPolicy(spec, clock()) if on_health else None
        self._check = CheckPolicy(spec) if on_check else None

    def start(self) -> None:
        """Starts checking, or resumes after `pause`."""
        self.pause()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def pause(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def stop(self) -> None:
        """As `pause`, and waits until the probe in flight, if any, has ended."""
        task = self._task
        self.pause()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        health, check = self._health, self._check
        await asyncio.sleep(self.spec.delay)
        while True:
            result = await self._probe(self.spec)
            if result.error:
                log.info("%s probe: %s", self.spec.kind, result.error)
            if check is not None and self._on_check is not None:
                status = check.feed(result)
                if status is not None:
                    self._on_check(status)
            if health is not None and self._on_health is not None:
                report = health.feed(healthy(self.spec, result), self._clock())
                if report is not None:
                    self._on_health(*report)
            await asyncio.sleep(self.spec.interval)


async def run_probe(
    spec: CheckSpec, command: Callable[[Json, float | None], Awaitable[ProbeResult]]
) -> ProbeResult:
    """One probe of `spec`; a COMMAND check runs through `command` (each executor has its way)."""
    timeout = spec.timeout or None
    if spec.kind == "TCP":
        assert spec.port is not None
        return await tcp_probe(spec.port, timeout)
    if spec.kind == "HTTP":
        assert spec.port is not None
        return await http_probe(spec.port, spec.path, timeout)
    assert spec.command is not None
    return await command(spec.command, timeout)


def probe_for(agent: NestedContainers, task_container: Json) -> Callable[[CheckSpec], Awaitable[ProbeResult]]:
    """The probe function of a task's checks: COMMAND checks in a nested container."""
    command = functools.partial(command_probe, agent, task_container)
    return functools.partial(run_probe, command=command)
