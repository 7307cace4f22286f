"""A v1 scheduler API client for tests that break things: it survives its master.

`Framework` subscribes over HTTP (JSON, RecordIO event stream), keeps every
status update it reads (in order, with its uuid) and acknowledges those that
carry one, as a real framework does. It can drop its connection without
tearing down (a framework that fails over), and subscribe again with its
framework id, to the same or a restarted master. Tests then ask, from the
framework's side, how each task ended: `terminal(task_id)` is the distinct
terminal updates (a retried update counts once, by uuid; reconciliation
answers are not updates), which a recovery test expects to be exactly one.

Waiting is bounded and event-driven: `until(predicate, timeout, what)` wakes
on each event the framework reads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp

from mesilla.common.recordio import Decoder
from mesilla.common.tasks import TaskOwner

Json = dict[str, Any]

TERMINAL_STATES = frozenset({
    "TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST",
    "TASK_DROPPED", "TASK_GONE", "TASK_GONE_BY_OPERATOR",
})  # fmt: skip


class FrameworkError(RuntimeError):
    """The master refused a call, sent ERROR, or a wait ran out; the message says which."""


@dataclass(frozen=True)
class Update:
    """One UPDATE event as the framework read it."""

    task_id: str
    state: str
    reason: str | None
    uuid: str | None
    status: Json
    # An answer to our explicit RECONCILE (no uuid, REASON_RECONCILIATION), not news.
    # The master sends terminal updates with that reason of its own too (a task an
    # agent no longer knows): those are real ends.
    reconciliation: bool = False


def scalar(name: str, value: float) -> Json:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


class Framework:
    def __init__(
        self,
        master: str,
        name: str = "faults",
        *,
        checkpoint: bool = True,
        failover_timeout: float | None = None,
        capabilities: Iterable[str] = (),
        acknowledge: bool = True,
    ) -> None:
        self.master = master
        self.info: Json = {"user": "root", "name": name, "checkpoint": checkpoint}
        if failover_timeout is not None:
            self.info["failover_timeout"] = failover_timeout
        if capabilities:
            self.info["capabilities"] = [{"type": c} for c in capabilities]
        self.acknowledge = acknowledge
        self.framework_id: Json | None = None
        self.stream_id = ""
        self.subscriptions = 0
        self.offers: list[Json] = []
        self.updates: list[Update] = []
        self.events: list[Json] = []  # every event but HEARTBEAT, OFFERS and UPDATE
        self._reconciling: set[str] = set()  # task ids of RECONCILE calls not answered yet
        self.error: BaseException | None = None
        self._changed = asyncio.Condition()
        self._session: aiohttp.ClientSession | None = None
        self._reader: asyncio.Task[None] | None = None
        self._acks = TaskOwner("acknowledgements")

    @property
    def url(self) -> str:
        return f"http://{self.master}/api/v1/scheduler"

    @property
    def connected(self) -> bool:
        return self._reader is not None and not self._reader.done()

    # --- the subscription ----------------------------------------------------------

    async def subscribe(self, timeout: float = 30.0) -> None:
        """Subscribes (with the framework id once it has one: a failover); retries until
        the master answers 200 with SUBSCRIBED, for a master that is still starting."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        await self.disconnect()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            subscribed = loop.create_future()
            self.offers.clear()  # offers of an earlier subscription are void
            self._reader = asyncio.create_task(self._read(subscribed))
            try:
                async with asyncio.timeout(max(0.1, deadline - loop.time())):
                    await asyncio.shield(subscribed)
                return
            except (TimeoutError, FrameworkError, aiohttp.ClientError, OSError) as exc:
                await self.disconnect()
                if loop.time() >= deadline:
                    raise FrameworkError(
                        f"SUBSCRIBE to {self.url} failed within {timeout}s: {exc!r}"
                    ) from None
                await asyncio.sleep(0.2)

    async def _read(self, subscribed: asyncio.Future[None]) -> None:
        assert self._session is not None
        call: Json = {"type": "SUBSCRIBE", "subscribe": {"framework_info": self.info}}
        if self.framework_id is not None:
            call["framework_id"] = self.framework_id
        try:
            async with self._session.post(self.url, json=call) as response:
                if response.status != 200:
                    raise FrameworkError(f"SUBSCRIBE answered {response.status}: {await response.text()}")
                self.stream_id = response.headers.get("Mesos-Stream-Id", "")
                decoder = Decoder()
                async for chunk in response.content.iter_any():
                    for record in decoder.feed(chunk):
                        await self._handle(json.loads(record), subscribed)
        except (aiohttp.ClientError, OSError, FrameworkError) as exc:
            self.error = exc
            if not subscribed.done():
                subscribed.set_exception(exc)
        finally:
            if not subscribed.done():
                subscribed.set_exception(FrameworkError("the master closed the stream before SUBSCRIBED"))
            async with self._changed:
                self._changed.notify_all()

    async def _handle(self, event: Json, subscribed: asyncio.Future[None]) -> None:
        kind = event["type"]
        if kind == "SUBSCRIBED":
            self.framework_id = event["subscribed"]["framework_id"]
            self.info["id"] = self.framework_id
            self.subscriptions += 1
            subscribed.set_result(None)
        elif kind == "OFFERS":
            self.offers.extend(event["offers"]["offers"])
        elif kind == "UPDATE":
            status = event["update"]["status"]
            task_id, reason = status["task_id"]["value"], status.get("reason")
            answer = (
                task_id in self._reconciling and reason == "REASON_RECONCILIATION" and "uuid" not in status
            )
            if answer:
                self._reconciling.discard(task_id)
            update = Update(task_id, status["state"], reason, status.get("uuid"), status, answer)
            self.updates.append(update)
            if self.acknowledge and update.uuid is not None:
                self._spawn_ack(status)
        elif kind != "HEARTBEAT":
            self.events.append(event)
        async with self._changed:
            self._changed.notify_all()

    def _spawn_ack(self, status: Json) -> None:
        ack = {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]}
        self._acks.spawn(self._ack(ack), f"ACKNOWLEDGE of {status['uuid']}")

    async def _ack(self, ack: Json) -> None:
        # A master that just died loses the acknowledgement; the agent resends the update.
        with_errors = (FrameworkError, aiohttp.ClientError, OSError)
        try:
            await self.call("ACKNOWLEDGE", ack)
        except with_errors:
            pass

    async def disconnect(self) -> None:
        """Drops the connection without TEARDOWN: to the master, the framework failed."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def close(self) -> None:
        """TEARDOWN (the master kills every task of ours) if subscribed, then closes."""
        if self._session is None:
            return
        if self.connected:
            with_errors = (FrameworkError, aiohttp.ClientError, OSError)
            try:
                await self.call("TEARDOWN")
            except with_errors:
                pass
        await self.disconnect()
        acks, self._acks = self._acks, TaskOwner("acknowledgements")  # it may subscribe again
        await acks.close()
        await self._session.close()
        self._session = None

    # --- calls -------------------------------------------------------------------------

    async def call(self, kind: str, payload: Json | None = None) -> None:
        if self._session is None:
            raise FrameworkError(f"{kind}: the framework never subscribed")
        body: Json = {"type": kind, "framework_id": self.framework_id}
        if payload is not None:
            body[kind.lower()] = payload
        headers = {"Mesos-Stream-Id": self.stream_id}
        async with self._session.post(self.url, json=body, headers=headers) as response:
            if response.status != 202:
                raise FrameworkError(f"{kind} answered {response.status}: {await response.text()}")

    async def offer(self, timeout: float = 30.0) -> Json:
        await self.until(lambda: bool(self.offers), timeout, "offer")
        return self.offers.pop(0)

    async def decline_offers(self) -> None:
        """Declines every offer held, so that other frameworks get those resources."""
        offers, self.offers = self.offers, []
        if offers:
            await self.call(
                "DECLINE", {"offer_ids": [o["id"] for o in offers], "filters": {"refuse_seconds": 0}}
            )

    async def accept(self, offer: Json, operations: list[Json]) -> None:
        await self.call("ACCEPT", {"offer_ids": [offer["id"]], "operations": operations,
                                   "filters": {"refuse_seconds": 0}})  # fmt: skip

    async def launch(self, offer: Json, tasks: list[Json]) -> None:
        tasks = [{**t, "agent_id": offer["agent_id"]} for t in tasks]
        await self.accept(offer, [{"type": "LAUNCH", "launch": {"task_infos": tasks}}])

    async def launch_group(self, offer: Json, executor: Json, tasks: list[Json]) -> None:
        executor = {**executor, "framework_id": self.framework_id}
        tasks = [{**t, "agent_id": offer["agent_id"]} for t in tasks]
        group = {"executor": executor, "task_group": {"tasks": tasks}}
        await self.accept(offer, [{"type": "LAUNCH_GROUP", "launch_group": group}])

    async def acknowledged(self) -> None:
        """Waits for the acknowledgements still in flight."""
        await self._acks.join()

    async def kill(self, task_id: str, grace_seconds: float | None = None) -> None:
        payload: Json = {"task_id": {"value": task_id}}
        if grace_seconds is not None:
            payload["kill_policy"] = {"grace_period": {"nanoseconds": int(grace_seconds * 1e9)}}
        await self.call("KILL", payload)

    async def reconcile(self, task_ids: Iterable[str]) -> None:
        """Explicit reconciliation of `task_ids`; each answer is marked `reconciliation`."""
        ids = list(task_ids)
        self._reconciling.update(ids)
        await self.call("RECONCILE", {"tasks": [{"task_id": {"value": t}} for t in ids]})

    # --- what the framework saw --------------------------------------------------------

    def distinct(self, task_id: str) -> list[Update]:
        """The task's updates in arrival order, a resent one (same uuid) once, reconciliation
        answers excluded: what the task went through, as the framework learnt it."""
        seen: set[str] = set()
        found = []
        for u in self.updates:
            if u.task_id != task_id or u.reconciliation or (u.uuid is not None and u.uuid in seen):
                continue
            if u.uuid is not None:
                seen.add(u.uuid)
            found.append(u)
        return found

    def states(self, task_id: str) -> list[str]:
        return [u.state for u in self.distinct(task_id)]

    def state(self, task_id: str) -> str | None:
        states = self.states(task_id)
        return states[-1] if states else None

    def terminal(self, task_id: str) -> list[Update]:
        """Distinct terminal updates of the task: a resent update (same uuid) counts once."""
        return [u for u in self.distinct(task_id) if u.state in TERMINAL_STATES]

    def reconciled(self, task_id: str) -> Update | None:
        """The newest reconciliation answer about the task."""
        return next((u for u in reversed(self.updates) if u.task_id == task_id and u.reconciliation), None)

    async def until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Waits until `predicate()` holds, re-checking at each event; FrameworkError after
        `timeout` seconds (with the task states seen so far)."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                while not predicate():
                    await self._changed.wait()
        except TimeoutError:
            raise FrameworkError(f"no {what} within {timeout}s; updates: {self.summary()}") from None

    async def until_state(
        self, task_ids: Iterable[str], states: str | Iterable[str], timeout: float = 60.0
    ) -> None:
        """Waits until each task's latest state is one of `states` ("TERMINAL" for any end)."""
        wanted = (
            TERMINAL_STATES if states == "TERMINAL" else {states} if isinstance(states, str) else set(states)
        )
        ids = list(task_ids)
        await self.until(
            lambda: all(self.state(t) in wanted for t in ids), timeout, f"{sorted(wanted)} for {ids}"
        )

    def summary(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for u in self.updates:
            detail = ", ".join(filter(None, [u.reason, u.status.get("source"), u.status.get("message"),
                                             "reconciliation answer" if u.reconciliation else None]))
            out.setdefault(u.task_id, []).append(f"{u.state} ({detail})" if detail else u.state)
        return out
