"""A small v1 scheduler API client for the pod and recovery benchmarks.

It subscribes over HTTP (JSON, RecordIO stream), queues offers, acknowledges
every status update as it arrives (recording when it arrived, on
`time.perf_counter`), and sends calls with the stream id. Only what the
benchmarks need; it is a framework like any other, through public APIs only.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from mesilla.common.recordio import Decoder

Json = dict[str, Any]
TERMINAL = frozenset(
    {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED", "TASK_GONE"}
)


class FrameworkError(RuntimeError):
    """The master refused a call or sent ERROR; the message has its answer."""


@dataclass(frozen=True)
class Update:
    task_id: str
    state: str
    at: float  # perf_counter when the scheduler read it
    status: Json


def scalar(name: str, value: float) -> Json:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


class Framework:
    def __init__(self, master: str, name: str, *, checkpoint: bool = True, failover_timeout: float = 0) -> None:
        self.url = f"http://{master}/api/v1/scheduler"
        self.info: Json = {"user": "root", "name": name, "checkpoint": checkpoint}
        if failover_timeout:
            self.info["failover_timeout"] = failover_timeout
        self.framework_id: Json | None = None
        self.stream_id = ""
        self.offers: asyncio.Queue[Json] = asyncio.Queue()
        self.updates: list[Update] = []
        self.states: dict[str, str] = {}
        self._changed = asyncio.Condition()
        self._session: aiohttp.ClientSession | None = None
        self._reader: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._acks: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references
        self.error: BaseException | None = None

    async def start(self, timeout: float = 30) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self._reader = asyncio.create_task(self._read())
        waiter = asyncio.create_task(self._subscribed.wait())
        await asyncio.wait([waiter, self._reader], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if not self._subscribed.is_set():
            waiter.cancel()
            raise FrameworkError(f"SUBSCRIBE to {self.url} failed: {self.error or 'no answer in time'}")

    async def _read(self) -> None:
        assert self._session is not None
        body = {"type": "SUBSCRIBE", "subscribe": {"framework_info": self.info}}
        try:
            async with self._session.post(self.url, json=body) as response:
                if response.status != 200:
                    raise FrameworkError(f"SUBSCRIBE answered {response.status}: {await response.text()}")
                self.stream_id = response.headers["Mesos-Stream-Id"]
                decoder = Decoder()
                async for chunk in response.content.iter_any():
                    for record in decoder.feed(chunk):
                        await self._handle(json.loads(record))
        except (aiohttp.ClientError, FrameworkError) as exc:
            self.error = exc
        finally:
            async with self._changed:
                self._changed.notify_all()

    async def _handle(self, event: Json) -> None:
        kind = event["type"]
        if kind == "SUBSCRIBED":
            self.framework_id = event["subscribed"]["framework_id"]
            self.info["id"] = self.framework_id
            self._subscribed.set()
        elif kind == "OFFERS":
            for offer in event["offers"]["offers"]:
                self.offers.put_nowait(offer)
        elif kind == "UPDATE":
            status = event["update"]["status"]
            update = Update(status["task_id"]["value"], status["state"], time.perf_counter(), status)
            self.updates.append(update)
            self.states[update.task_id] = update.state
            if "uuid" in status:
                ack = {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]}
                task = asyncio.create_task(self.call("ACKNOWLEDGE", ack))
                self._acks.add(task)
                task.add_done_callback(self._acks.discard)
            async with self._changed:
                self._changed.notify_all()
        elif kind == "ERROR":
            raise FrameworkError(f"the master sent ERROR: {event['error']['message']}")

    async def call(self, kind: str, payload: Json | None = None) -> None:
        assert self._session is not None
        body: Json = {"type": kind, "framework_id": self.framework_id}
        if payload is not None:
            body[kind.lower()] = payload
        async with self._session.post(self.url, json=body, headers={"Mesos-Stream-Id": self.stream_id}) as resp:
            if resp.status != 202:
                raise FrameworkError(f"{kind} answered {resp.status}: {await resp.text()}")

    async def offer(self, timeout: float = 60) -> Json:
        try:
            return await asyncio.wait_for(self.offers.get(), timeout)
        except TimeoutError:
            raise FrameworkError(f"no offer within {timeout}s") from None

    async def accept(self, offer: Json, operations: list[Json]) -> float:
        """Sends ACCEPT; returns perf_counter just before sending it."""
        sent = time.perf_counter()
        await self.call("ACCEPT", {"offer_ids": [offer["id"]], "operations": operations,
                                   "filters": {"refuse_seconds": 0}})  # fmt: skip
        return sent

    async def decline_pending(self) -> None:
        while not self.offers.empty():
            offer = self.offers.get_nowait()
            await self.call("DECLINE", {"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 0}})

    async def until(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Waits until `predicate()` holds after some update; FrameworkError on timeout or a lost stream."""

        async def wait() -> None:
            async with self._changed:
                while not predicate():
                    if self._reader is not None and self._reader.done():
                        raise FrameworkError(f"the subscription ended: {self.error}")
                    await self._changed.wait()

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise FrameworkError(f"condition not met within {timeout}s; task states: {self.summary()}") from None

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in self.states.values():
            counts[state] = counts.get(state, 0) + 1
        return counts

    def first(self, task_id: str, state: str) -> Update | None:
        return next((u for u in self.updates if u.task_id == task_id and u.state == state), None)

    async def close(self) -> None:
        """Tears the framework down (the master kills its tasks), then closes the connection."""
        if self._session is None:
            return
        if self.framework_id is not None:
            try:
                await self.call("TEARDOWN")
            except (aiohttp.ClientError, FrameworkError):
                pass
        if self._reader is not None:
            self._reader.cancel()
        await self._session.close()
        self._session = None
