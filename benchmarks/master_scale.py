#!/usr/bin/env python3
"""Master scale benchmark: allocation cycle time and sustained task launch throughput.

For each agent count (``--agents=1000,10000``) it measures:

1. **Allocation cycle, direct**: a `HierarchicalDRFAllocator` populated with
   the agents and ``--frameworks`` frameworks, timing `allocate()` itself:
   a *full* cycle (every agent free, the worst case) and *steady* cycles
   (10 % of the agents' resources come back between cycles, as declines and
   finished tasks do).
2. **A live cluster**: a real master (``python -m mesilla master``, its own
   process, loopback, temporary work_dir), the agents simulated in this
   process speaking the internal agent protocol (`mesilla.v1.internal`; they
   answer RUN_TASK with a TASK_RUNNING update and run nothing) and the
   frameworks speaking the v1 scheduler API (ACCEPT with LAUNCH, ACKNOWLEDGE).
   For ``--duration`` seconds the frameworks launch tasks as fast as offers
   come, with at most ``--max_in_flight`` launched but not yet running. It
   reports the tasks that reached TASK_RUNNING at the scheduler per second of
   that window (sustained), and over the whole run from the first ACCEPT to the
   last TASK_RUNNING (the tail included), the ACCEPT-to-RUNNING latency of
   each, and the master's own ``allocator/mesos/allocation_run_ms``
   percentiles from ``/metrics/snapshot``.

Targets (issue #2): at 10,000 agents a cycle p50 under 100 ms and at least
1,000 task launches per second. Usage::

    python benchmarks/master_scale.py [--agents=1000,10000] [--frameworks=10] [--duration=20]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gc
import os
import random
import resource
import signal
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _machine import load_average, machine_report, verdict

from mesilla.common.recordio import Decoder
from mesilla.common.resources import Resources
from mesilla.master.allocator import HierarchicalDRFAllocator
from mesilla.master.metrics import percentile

Json = dict[str, Any]

CYCLE_TARGET_MS = 100.0
LAUNCH_TARGET_PER_S = 1000.0
AGENT_RESOURCES = "cpus:8;mem:16384;disk:100000;ports:[31000-32000]"
TASK_CPUS, TASK_MEM = 0.1, 32.0
REGISTER_CONCURRENCY = 200
READY_TIMEOUT = 60.0
REGISTER_TIMEOUT = 600.0  # keeps a run bounded even when the master cannot keep up


# --- 1. the allocator alone -------------------------------------------------------------


def bench_allocator(agents: int, frameworks: int, cycles: int) -> dict[str, float]:
    allocator = HierarchicalDRFAllocator(offer_callback=lambda _: None)
    total = Resources.parse(AGENT_RESOURCES)
    for i in range(frameworks):
        allocator.add_framework(f"fw-{i}", ["*"])
    for i in range(agents):
        allocator.add_agent(f"agent-{i}", f"host-{i}", total)
    full: list[float] = []
    steady: list[float] = []
    for _ in range(max(3, cycles // 10)):
        _recover(allocator, _timed(allocator, full))
    # Steady state: each cycle gets back a random tenth of the agents, as
    # declines, unused parts of offers and finished tasks give them back.
    held = _timed(allocator, [])
    for _ in range(cycles):
        sample = random.sample(sorted(held), len(held) // 10)
        _recover(allocator, {agent_id: held.pop(agent_id) for agent_id in sample})
        held.update(_timed(allocator, steady))
    return {
        "full_p50": statistics.median(full),
        "full_max": max(full),
        "steady_p50": statistics.median(steady),
        "steady_p99": percentile(sorted(steady), 0.99),
    }


def _timed(allocator: HierarchicalDRFAllocator, into: list[float]) -> dict[str, tuple[str, Resources]]:
    """One cycle, timed into `into`; returns agent_id -> (framework_id, resources) allocated."""
    started = time.perf_counter()
    result = allocator.allocate()
    into.append((time.perf_counter() - started) * 1000)
    return {
        agent_id: (framework_id, resources)
        for framework_id, by_agent in result.items()
        for agent_id, by_role in by_agent.items()
        for resources in by_role.values()
    }


def _recover(allocator: HierarchicalDRFAllocator, held: dict[str, tuple[str, Resources]]) -> None:
    for agent_id, (framework_id, resources) in held.items():
        allocator.recover_resources(framework_id, agent_id, resources)


# --- 2. a live cluster ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class MasterProcess:
    base: str
    pid: int


@contextlib.asynccontextmanager
async def master_process(work_dir: str, registry: str) -> AsyncIterator[MasterProcess]:
    """A real master in its own process; yields its base URL and pid, stops it with SIGTERM."""
    port = _free_port()
    # The master's log goes to the work_dir; it is shown only if the master fails.
    log_path = Path(work_dir, "master.log")
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mesilla", "master", "--ip=127.0.0.1", f"--port={port}",
            f"--work_dir={work_dir}", f"--registry={registry}", "--logging_level=WARNING",
            stdout=log, stderr=log,
        )
    finally:
        os.close(log)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + READY_TIMEOUT
            while True:
                if process.returncode is not None:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"the master exited with {process.returncode}:\n{tail}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(base + "/health") as response:
                        if response.status == 200:
                            break
                if time.monotonic() > deadline:
                    raise RuntimeError("the master did not come up")
                await asyncio.sleep(0.2)
        yield MasterProcess(base, process.pid)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


def _request(host: str, port: int, path: str, body: Json, stream_id: str | None = None) -> bytes:
    data = msgspec.json.encode(body)
    stream = f"Mesos-Stream-Id: {stream_id}\r\n" if stream_id else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"{stream}Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


def _head(buffer: bytearray) -> tuple[int, dict[bytes, bytes], int] | None:
    """A complete response head at the start of `buffer`: (status, headers, its length)."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buffer[:end]).split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, end + 4


class EventStreamClient(asyncio.Protocol):
    """One POST whose answer is a chunked RecordIO stream of JSON events (SUBSCRIBE,
    REGISTER), read straight off the socket: the load generator holds thousands of
    them, and a full HTTP client's cost per event would be counted against the master."""

    def __init__(self, on_event: Callable[[EventStreamClient, Json], None]) -> None:
        self.on_event = on_event
        # Known before the first event is handed on: REGISTERED and the first PING come together.
        self.stream_id = ""
        self.opened: asyncio.Future[tuple[int, dict[bytes, bytes]]] = asyncio.get_running_loop().create_future()
        self.ended = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._head_done = False
        self._records = Decoder()

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        path: str,
        body: Json,
        on_event: Callable[[EventStreamClient, Json], None],
        source: str | None = None,
    ) -> EventStreamClient:
        _, protocol = await asyncio.get_running_loop().create_connection(
            lambda: cls(on_event), host, port, local_addr=(source, 0) if source else None
        )
        assert protocol.transport is not None
        protocol.transport.write(_request(host, port, path, body))
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if not self._head_done:
            head = _head(buffer)
            if head is None:
                return
            status, headers, length = head
            del buffer[:length]
            self._head_done = True
            self.stream_id = headers.get(b"mesos-stream-id", b"").decode()
            self.opened.set_result((status, headers))
            if status != 200:
                return
        records: list[bytes] = []
        while True:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                break
            size = int(bytes(buffer[:line_end]).split(b";")[0], 16)
            if len(buffer) < line_end + 2 + size + 2:
                break
            records.extend(self._records.feed(bytes(buffer[line_end + 2 : line_end + 2 + size])))
            del buffer[: line_end + 2 + size + 2]
        for record in records:
            self.on_event(self, msgspec.json.decode(record))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(ConnectionError("the master closed the connection"))
        if not self.ended.done():
            self.ended.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


# The first few bodies of refused calls, shown with the errors.
REFUSALS: list[str] = []
LOST_CONNECTIONS = 0


class _CallConnection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[asyncio.Future[int]] = deque()
        self._buffer = bytearray()
        self._out: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, request: bytes) -> None:
        # The calls made in one turn of the loop go out in one write.
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(request)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is None or self.transport.is_closing():
            for future in self.waiting:
                if not future.done():
                    future.set_exception(ConnectionError("the connection to the master is closed"))
            return
        self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while (head := _head(buffer)) is not None:
            status, headers, length = head
            total = length + int(headers.get(b"content-length", b"0"))
            if len(buffer) < total:
                break
            if status >= 300 and len(REFUSALS) < 5:
                REFUSALS.append(bytes(buffer[length:total][:200]).decode(errors="replace"))
            del buffer[:total]
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(status)

    def connection_lost(self, exc: Exception | None) -> None:
        global LOST_CONNECTIONS
        LOST_CONNECTIONS += 1
        for future in self.waiting:
            if not future.done():
                future.set_exception(ConnectionError("the master closed the connection"))


class Caller:
    """POSTs over a few keep-alive connections, pipelined (HTTP/1.1).

    The load generator shares the machine with the master, so its own cost
    per call must stay small: this is a fraction of a full client's.
    """

    def __init__(self, host: str, port: int, connections: int = 8) -> None:
        self.host, self.port = host, port
        self._size = connections
        self._connections: list[_CallConnection] = []
        self._next = 0
        self.errors = 0
        self.refused: Counter[str] = Counter()
        self.closing = False

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(self._size):
            _, connection = await loop.create_connection(_CallConnection, self.host, self.port)
            self._connections.append(connection)

    def post(self, path: str, body: Json, stream_id: str) -> asyncio.Future[int]:
        """The call's HTTP status, once answered."""
        connection = self._connections[self._next]
        self._next = (self._next + 1) % len(self._connections)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        connection.waiting.append(future)
        connection.send(_request(self.host, self.port, path, body, stream_id))
        return future

    def post_expecting(self, path: str, body: Json, stream_id: str, status: int = 202) -> None:
        """Fire and forget; an answer other than `status` counts in `errors`."""
        kind = body["type"]
        self.post(path, body, stream_id).add_done_callback(lambda done: self._check(done, status, kind))

    def _check(self, done: asyncio.Future[int], status: int, kind: str) -> None:
        if self.closing:
            return  # calls cut short by the end of the run
        if done.cancelled() or done.exception() is not None or done.result() != status:
            self.errors += 1
            got = "failed" if done.cancelled() or done.exception() is not None else done.result()
            self.refused[f"{kind} {got}"] += 1

    async def close(self) -> None:
        self.closing = True
        for connection in self._connections:
            if connection.transport is not None:
                connection.transport.close()


# One source address of the loopback per this many agents: a (source, master) pair has
# only the ~28,000 ports of ip_local_port_range, and 50,000 agents each hold a stream.
AGENTS_PER_SOURCE = 20_000


def _source_address(index: int) -> str | None:
    """Agent `index`'s source on the loopback (127.0.0.1 for the first ones, as before)."""
    group = index // AGENTS_PER_SOURCE
    return f"127.0.0.{group + 1}" if group else None


def _nr_open() -> int:
    return int(Path("/proc/sys/fs/nr_open").read_text())


def _uuid() -> str:
    return base64.b64encode(uuid.uuid4().bytes).decode()


class SimulatedAgents:
    """Many agents in one event loop: each holds a REGISTER stream and answers RUN_TASK and
    the master's PINGs (unanswered, they would be marked unreachable mid-run)."""

    PATH = "/internal/agent"

    def __init__(self, host: str, port: int, calls: Caller, batch_updates: bool) -> None:
        self.host, self.port = host, port
        self.calls = calls
        self.batch_updates = batch_updates
        self.streams: list[EventStreamClient] = []
        self.tasks: list[asyncio.Task[None]] = []
        # Updates of this turn of the loop, per agent (stream id): with `batch_updates` each
        # agent sends its own in one STATUS_UPDATE call (`status_updates`).
        self._updates: dict[str, tuple[Json, list[Json]]] = {}

    @property
    def errors(self) -> int:
        return self.calls.errors

    async def start(self, count: int) -> float:
        """Registers `count` agents; returns the seconds it took."""
        started = time.perf_counter()
        gate = asyncio.Semaphore(REGISTER_CONCURRENCY)
        ready = [asyncio.get_running_loop().create_future() for _ in range(count)]
        for i in range(count):
            self.tasks.append(asyncio.create_task(self._agent(i, gate, ready[i])))
        try:
            await asyncio.wait_for(asyncio.gather(*ready), REGISTER_TIMEOUT)
        except TimeoutError:
            registered = sum(f.done() for f in ready)
            raise RuntimeError(f"only {registered} of {count} agents registered in {REGISTER_TIMEOUT:g}s") from None
        return time.perf_counter() - started

    async def _agent(self, index: int, gate: asyncio.Semaphore, ready: asyncio.Future[None]) -> None:
        info = {
            "hostname": f"sim-{index}",
            "port": 5051,
            "resources": msgspec.to_builtins(Resources.parse(AGENT_RESOURCES).to_list()),
        }
        agent_id: Json | None = None

        def on_event(stream: EventStreamClient, event: Json) -> None:
            nonlocal agent_id
            kind = event["type"]
            if kind == "RUN_TASK" and agent_id is not None:
                self._running(agent_id, stream.stream_id, event["run_task"])
            elif kind == "PING" and agent_id is not None:
                self.calls.post_expecting(self.PATH, {"type": "PONG", "agent_id": agent_id}, stream.stream_id)
            elif kind == "REGISTERED":
                agent_id = event["registered"]["agent_id"]
                gate.release()
                ready.set_result(None)

        await gate.acquire()
        call = {"type": "REGISTER", "register": {"agent_info": info}}
        try:
            stream = await EventStreamClient.open(
                self.host, self.port, self.PATH, call, on_event, source=_source_address(index)
            )
            status, headers = await stream.opened
        except ConnectionError as exc:
            gate.release()
            ready.set_exception(exc)
            return
        if status != 200:
            gate.release()
            ready.set_exception(RuntimeError(f"REGISTER: {status}"))
            return
        self.streams.append(stream)

    def _running(self, agent_id: Json, stream_id: str, run: Json) -> None:
        status = {
            "task_id": run["task"]["task_id"],
            "state": "TASK_RUNNING",
            "source": "SOURCE_EXECUTOR",
            "agent_id": agent_id,
            "timestamp": time.time(),
            "uuid": _uuid(),
        }
        update = {"framework_id": run["framework_info"]["id"], "status": status}
        if not self.batch_updates:
            call = {"type": "STATUS_UPDATE", "agent_id": agent_id, "status_update": update}
            self.calls.post_expecting(self.PATH, call, stream_id)
            return
        if not self._updates:
            asyncio.get_running_loop().call_soon(self._send_updates)
        self._updates.setdefault(stream_id, (agent_id, []))[1].append(update)

    def _send_updates(self) -> None:
        updates, self._updates = self._updates, {}
        for stream_id, (agent_id, batch) in updates.items():
            call = {"type": "STATUS_UPDATE", "agent_id": agent_id, "status_updates": batch}
            self.calls.post_expecting(self.PATH, call, stream_id)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for stream in self.streams:
            stream.close()


@dataclass
class LaunchStats:
    accepted_at: dict[str, float] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    first_accept: float | None = None
    other_updates: Counter[str] = field(default_factory=Counter)
    last_running: float | None = None


class SimulatedFramework:
    """A v1 scheduler that launches small command tasks on every offer while the run lasts."""

    PATH = "/api/v1/scheduler"

    def __init__(self, name: str, calls: Caller, in_flight: int, stats: LaunchStats) -> None:
        self.name = name
        self.calls = calls
        self.stats = stats
        # Tasks launched but not yet running, and the most there may be.
        self.in_flight = 0
        self.max_in_flight = in_flight
        # Offers waiting for room, with the tasks each can hold.
        self._waiting: deque[tuple[Json, int]] = deque()
        self.framework_id: Json | None = None
        self.launching = True
        self._next_task = 0
        self.stream: EventStreamClient | None = None

    async def run(self, subscribed: asyncio.Future[None]) -> None:
        call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "bench", "name": self.name}}}
        self.stream = await EventStreamClient.open(
            self.calls.host, self.calls.port, self.PATH, call, lambda _, event: self._event(event, subscribed)
        )
        status, headers = await self.stream.opened
        if status != 200:
            subscribed.set_exception(RuntimeError(f"SUBSCRIBE: {status}"))
            return
        try:
            await self.stream.ended
        finally:
            self.stream.close()

    def _event(self, event: Json, subscribed: asyncio.Future[None]) -> None:
        kind = event["type"]
        if kind == "UPDATE":
            self._update(event["update"]["status"])
        elif kind == "OFFERS":
            for offer in event["offers"]["offers"]:
                self._use(offer)
        elif kind == "SUBSCRIBED":
            self.framework_id = event["subscribed"]["framework_id"]
            subscribed.set_result(None)

    def _room_for(self, count: int) -> bool:
        return self.in_flight + count <= self.max_in_flight

    def stop_launching(self) -> None:
        """No more launches; the offers held and those still to come wait for `decline_all`,
        so that their DECLINE calls do not queue ahead of the last tasks' updates."""
        self.launching = False

    def decline_all(self) -> None:
        """Declines every offer held back (once the tasks in flight are running)."""
        while self._waiting:
            self._decline(self._waiting.popleft()[0])

    def _post(self, call: Json) -> None:
        assert self.stream is not None
        self.calls.post_expecting(self.PATH, call, self.stream.stream_id)

    def _decline(self, offer: Json) -> None:
        self._post({"type": "DECLINE", "framework_id": self.framework_id, "decline": {"offer_ids": [offer["id"]]}})

    def _use(self, offer: Json) -> None:
        scalars = {r["name"]: r["scalar"]["value"] for r in offer["resources"] if r.get("scalar")}
        count = int(min(scalars.get("cpus", 0) / TASK_CPUS, scalars.get("mem", 0) / TASK_MEM, 10))
        if count == 0 or (not self.launching and not self._waiting and not self.in_flight):
            self._decline(offer)
        elif not self.launching or not self._room_for(count) or self._waiting:
            # All of an offer's tasks at once: taking slots one by one would spread
            # them over the waiting offers until none can launch.
            self._waiting.append((offer, count))
        else:
            self._launch(offer, count)

    def _launch(self, offer: Json, count: int) -> None:
        self.in_flight += count
        tasks = []
        now = time.perf_counter()
        for _ in range(count):
            task_id = f"{self.name}-{self._next_task}"
            self._next_task += 1
            self.stats.accepted_at[task_id] = now
            tasks.append(
                {
                    "name": task_id,
                    "task_id": {"value": task_id},
                    "agent_id": offer["agent_id"],
                    "resources": [
                        {"name": "cpus", "type": "SCALAR", "scalar": {"value": TASK_CPUS}},
                        {"name": "mem", "type": "SCALAR", "scalar": {"value": TASK_MEM}},
                    ],
                    "command": {"value": "true"},
                }
            )
        if self.stats.first_accept is None:
            self.stats.first_accept = now
        call = {
            "type": "ACCEPT",
            "framework_id": self.framework_id,
            "accept": {
                "offer_ids": [offer["id"]],
                "operations": [{"type": "LAUNCH", "launch": {"task_infos": tasks}}],
                "filters": {"refuse_seconds": 0},
            },
        }
        self._post(call)

    def _update(self, status: Json) -> None:
        task_id = status["task_id"]["value"]
        if status["state"] != "TASK_RUNNING":
            self.stats.other_updates[f"{status['state']} {status.get('reason', '')} {status.get('message', '')}"[:160]] += 1
        if status["state"] == "TASK_RUNNING":
            accepted = self.stats.accepted_at.pop(task_id, None)
            if accepted is not None:
                now = time.perf_counter()
                self.stats.latencies.append((now - accepted) * 1000)
                self.stats.last_running = now
                self.in_flight -= 1
                while self.launching and self._waiting and self._room_for(self._waiting[0][1]):
                    self._launch(*self._waiting.popleft())
        if "uuid" in status:
            ack = {
                "type": "ACKNOWLEDGE",
                "framework_id": self.framework_id,
                "acknowledge": {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]},
            }
            self._post(ack)


@contextlib.asynccontextmanager
async def py_spy(pid: int, into: str | None) -> AsyncIterator[None]:
    """`py-spy record` of the master while the block runs, into `into` (speedscope), if asked."""
    if not into:
        yield
        return
    spy = await asyncio.create_subprocess_exec(
        "py-spy", "record", "-p", str(pid), "-r", "50", "--format", "speedscope", "-o", into, "--nonblocking",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its profile and exits
        await spy.wait()


async def bench_cluster(
    agents: int,
    frameworks: int,
    duration: float,
    in_flight: int,
    registry: str,
    batch_updates: bool,
    profile: str | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mesilla-bench-") as work_dir:
        async with master_process(work_dir, registry) as master, aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
        ) as streams:
            base = master.base
            port = int(base.rsplit(":", 1)[1])
            calls = Caller("127.0.0.1", port)
            sim = SimulatedAgents("127.0.0.1", port, calls, batch_updates)
            stats = LaunchStats()
            runners: list[asyncio.Task[None]] = []
            try:
                await calls.open()
                registration = await sim.start(agents)
                # The load generator's own heap (10,000 streams) out of its collector's full
                # passes: else they stall the simulated agents and frameworks for a second at a
                # time and count against the master.
                gc.freeze()
                fws = [
                    SimulatedFramework(f"bench-{i}", calls, max(1, in_flight // frameworks), stats)
                    for i in range(frameworks)
                ]
                subscribed = [asyncio.get_running_loop().create_future() for _ in fws]
                runners = [asyncio.create_task(fw.run(done)) for fw, done in zip(fws, subscribed, strict=True)]
                await asyncio.gather(*subscribed)
                # CPU used by the master and by this load generator while launching: the
                # generator's share says how much of the machine it took from the master.
                wall0, master0, generator0 = time.perf_counter(), _cpu_seconds(master.pid), time.process_time()
                running0 = len(stats.latencies)
                async with py_spy(master.pid, profile and f"{profile}-launch.speedscope.json"):
                    await asyncio.sleep(duration)
                wall = time.perf_counter() - wall0
                master_cpu = (_cpu_seconds(master.pid) - master0) / wall
                generator_cpu = (time.process_time() - generator0) / wall
                window_tasks = max(1, len(stats.latencies) - running0)
                for fw in fws:
                    fw.stop_launching()
                # Let what was accepted reach TASK_RUNNING (bounded).
                deadline = time.monotonic() + 30
                while stats.accepted_at and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                for fw in fws:
                    fw.decline_all()
                async with streams.get(base + "/metrics/snapshot") as response:
                    metrics = await response.json()
                async with py_spy(master.pid, profile and f"{profile}-reads.speedscope.json"):
                    reads = await _time_reads(streams, base)
                unanswered = sum(len([f for f in c.waiting if not f.done()]) for c in calls._connections)
            finally:
                calls.closing = True
                # Agents first, so no update arrives for a framework already gone.
                await sim.stop()
                for task in runners:
                    task.cancel()
                await asyncio.gather(*runners, return_exceptions=True)
                await calls.close()
    launched = len(stats.latencies)
    elapsed = (stats.last_running or 0) - (stats.first_accept or 0)
    latencies = sorted(stats.latencies) or [0.0]
    return {
        "registration_s": registration,
        "tasks_running": float(launched),
        "tasks_lost_in_flight": float(len(stats.accepted_at)),
        "launch_rate": launched / elapsed if elapsed > 0 else 0.0,
        "sustained_rate": window_tasks / wall,
        "latency_p50": percentile(latencies, 0.5),
        "latency_p99": percentile(latencies, 0.99),
        "master_cycle_p50": metrics.get("allocator/mesos/allocation_run_ms/p50", float("nan")),
        "master_cycle_p99": metrics.get("allocator/mesos/allocation_run_ms/p99", float("nan")),
        "master_cycles": metrics.get("allocator/mesos/allocation_runs", 0.0),
        "errors": float(sim.errors),
        "refused": dict(calls.refused),
        "other_updates": stats.other_updates,
        "unanswered": unanswered,
        "master_cpu": master_cpu,
        "generator_cpu": generator_cpu,
        "master_us_per_task": master_cpu * wall / window_tasks * 1e6,
        "generator_us_per_task": generator_cpu * wall / window_tasks * 1e6,
        **reads,
    }


async def _time_reads(session: aiohttp.ClientSession, base: str) -> dict[str, float]:
    """How long the operator surfaces take to answer with the cluster in place (ms, bytes), and the
    longest a `/health` call made meanwhile waited (ms): how long the master's event loop stalled."""
    out: dict[str, float] = {}
    for name, method, path, body in (
        ("state", "GET", "/state", None),
        ("get_state", "POST", "/api/v1", {"type": "GET_STATE"}),
        ("metrics", "GET", "/metrics/snapshot", None),
    ):
        done = asyncio.Event()
        waits: list[float] = []
        probe = asyncio.create_task(_health_waits(session, base + "/health", done, waits))
        started = time.perf_counter()
        try:
            async with session.request(method, base + path, json=body) as response:
                size = len(await response.read())
            out[f"{name}_ms"] = (time.perf_counter() - started) * 1000
        finally:
            done.set()
            await probe
        out[f"{name}_bytes"] = float(size)
        out[f"{name}_stall_ms"] = max(waits, default=0.0)
    return out


async def _health_waits(session: aiohttp.ClientSession, url: str, done: asyncio.Event, waits: list[float]) -> None:
    """`/health` calls one after the other until `done`; each one's wait (ms) into `waits`."""
    while not done.is_set():
        started = time.perf_counter()
        async with session.get(url) as response:
            await response.read()
        waits.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.01)


# --- main ----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="1000,10000", help="comma-separated agent counts")
    parser.add_argument("--frameworks", type=int, default=10)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of launching per agent count")
    parser.add_argument("--cycles", type=int, default=30, help="direct allocation cycles per agent count")
    parser.add_argument("--max_in_flight", type=int, default=1000, help="tasks launched but not running, at most")
    parser.add_argument("--registry", default="sqlite", choices=("sqlite", "in_memory"))
    parser.add_argument(
        "--batch_updates",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each simulated agent sends the updates of one turn of its loop in one STATUS_UPDATE call",
    )
    parser.add_argument(
        "--profile", default="", help="py-spy the master while launching: speedscope files with this prefix"
    )
    args = parser.parse_args()
    counts = [int(x) for x in args.agents.split(",") if x.strip()]

    # Every simulated agent holds a connection, on both sides (the master inherits the limit);
    # root may raise the hard limit too, up to the kernel's nr_open.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(soft, 2 * max(counts) + 1024)
    if wanted > hard:
        with contextlib.suppress(ValueError, PermissionError):  # without CAP_SYS_RESOURCE
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, min(wanted, _nr_open())))
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, wanted), hard))
    if max(counts) + 1024 > hard:
        print(f"  (open files are limited to {hard} here and cannot be raised: "
              f"at most about {hard - 1024} agents can hold a stream)")

    print("Mesilla master scale benchmark")
    print(machine_report())
    print(
        f"  frameworks {args.frameworks}, agents {counts}, {args.duration:g}s of launching each, "
        f"status updates {'batched per agent' if args.batch_updates else 'one call each'}\n"
    )

    for count in counts:
        alloc = bench_allocator(count, args.frameworks, args.cycles)
        print(f"== {count} agents, {args.frameworks} frameworks")
        print(
            f"  allocation cycle, direct, steady (10% back): p50 {alloc['steady_p50']:7.1f} ms  "
            f"p99 {alloc['steady_p99']:7.1f} ms   target p50 < {CYCLE_TARGET_MS:g} ms: "
            f"{verdict(alloc['steady_p50'], CYCLE_TARGET_MS)}"
        )
        print(
            f"  allocation cycle, direct, worst case (all agents free): p50 {alloc['full_p50']:7.1f} ms  "
            f"max {alloc['full_max']:7.1f} ms"
        )
        profile = f"{args.profile}-{count}" if args.profile else None
        live = asyncio.run(
            bench_cluster(
                count, args.frameworks, args.duration, args.max_in_flight, args.registry, args.batch_updates, profile
            )
        )
        print(f"  agent registration: {live['registration_s']:.1f} s ({count / live['registration_s']:.0f} agents/s)")
        print(
            f"  live master allocation cycle: p50 {live['master_cycle_p50']:7.1f} ms  "
            f"p99 {live['master_cycle_p99']:7.1f} ms over {live['master_cycles']:.0f} cycles"
        )
        print(
            f"  task launch, ACCEPT -> TASK_RUNNING at the scheduler: {live['sustained_rate']:7.0f} tasks/s "
            f"sustained over the {args.duration:g} s window ({live['launch_rate']:.0f}/s from the "
            f"first ACCEPT to the last TASK_RUNNING, {live['tasks_running']:.0f} tasks; "
            f"latency p50 {live['latency_p50']:.0f} ms, "
            f"p99 {live['latency_p99']:.0f} ms)   target >= {LAUNCH_TARGET_PER_S:g}/s: "
            f"{verdict(live['sustained_rate'], LAUNCH_TARGET_PER_S, lower_is_better=False)}"
        )
        print(
            f"  CPU while launching (cores busy): master {live['master_cpu']:.2f}, "
            f"load generator {live['generator_cpu']:.2f} of {os.cpu_count()}; CPU per task running: "
            f"master {live['master_us_per_task']:.0f} us, generator {live['generator_us_per_task']:.0f} us"
        )
        print(
            "  operator reads with the cluster in place: "
            + ", ".join(
                f"{label} {live[key + '_ms']:.0f} ms ({live[key + '_bytes'] / 1e6:.1f} MB)"
                for label, key in (("/state", "state"), ("GET_STATE", "get_state"), ("/metrics/snapshot", "metrics"))
            )
        )
        print(
            "  longest /health wait meanwhile (the master's event loop stalled): "
            + ", ".join(
                f"{label} {live[key + '_stall_ms']:.0f} ms"
                for label, key in (("/state", "state"), ("GET_STATE", "get_state"), ("/metrics/snapshot", "metrics"))
            )
        )
        print(f"  host load average after the run: {load_average()}")
        if live["errors"] or live["tasks_lost_in_flight"]:
            print(
                f"  errors: {live['errors']:.0f} calls refused ({live['refused']}), "
                f"{live['tasks_lost_in_flight']:.0f} tasks never running"
            )
            print(
                f"    call connections lost: {LOST_CONNECTIONS}; calls unanswered: {live['unanswered']}; "
                f"other updates: {dict(live['other_updates'])}"
            )
            for body in REFUSALS:
                print(f"    refused: {body}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
