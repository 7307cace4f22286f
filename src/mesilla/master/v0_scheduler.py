"""The master's libprocess endpoint for v0 schedulers (Mesos's `MesosSchedulerDriver`).

A v0 framework is a framework like the v1 ones: its messages become v1 scheduler
calls handled by the same code as ``/api/v1/scheduler`` (`scheduler_api.dispatch`),
and the master's v1 events for it go through a `V0Stream`, which has the
interface of a SUBSCRIBE stream and POSTs each event as its v0 message to the
framework's UPID (`common.libprocess.Link`). Messages (``/master/<name>``):

* ``mesos.internal.RegisterFrameworkMessage``, ``ReregisterFrameworkMessage``
  (SUBSCRIBE; a retry from the registered UPID is answered again),
  ``UnregisterFrameworkMessage`` (TEARDOWN), ``DeactivateFrameworkMessage`` (the
  framework disconnects: its failover timeout runs), ``LaunchTasksMessage``
  (ACCEPT with LAUNCH; no tasks: a decline), ``ReviveOffersMessage``,
  ``KillTaskMessage``, ``StatusUpdateAcknowledgementMessage``,
  ``FrameworkToExecutorMessage``, ``ReconcileTasksMessage``, ``ResourceRequestMessage``;
* ``mesos.scheduler.Call``, the v0 form of the v1 call (today's libmesos driver).

Events: FrameworkRegistered/Reregistered, ResourceOffers (with each offer's
agent UPID), RescindResourceOffer, StatusUpdate (with the agent's UPID when it
must be acknowledged), ExecutorToFramework, LostSlave, ExitedExecutor,
FrameworkError. A message that does not decode, names no known framework or
is not one of these is answered 202 and dropped, logged once per sender and
kind, as libprocess drops what no handler takes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from mesilla.common import libprocess
from mesilla.common.errors import BadRequest
from mesilla.common.http import Router
from mesilla.master.authenticator import MESSAGES as AUTHENTICATION
from mesilla.master.authenticator import V0Authenticator
from mesilla.master.framework import Framework
from mesilla.master.master import Master
from mesilla.master.scheduler_api import checked_call, dispatch
from mesilla.v1 import codec, proto
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import FrameworkID
from mesilla.v1.proto import v0
from mesilla.v1.proto.v0 import INTERNAL

CALL = "mesos.scheduler.Call"


class V0Stream(libprocess.MessageStream):
    """The SUBSCRIBE stream of a v0 framework: v1 events out as v0 messages."""

    def __init__(self, master: Master, pid: libprocess.UPID, reregister: bool) -> None:
        owner = master.owner
        link = libprocess.Link(
            master.master_info.pid or "", pid, lambda coro: owner.spawn(coro, f"link to {pid}")
        )
        super().__init__(link, lambda coro: owner.spawn(coro, f"watch of {pid}"))
        self.pid = pid
        self.reregister = reregister
        self.framework_id: str | None = None
        self._master = master

    def _agent_pid(self, agent_id: str) -> str:
        agent = self._master.agents.get(agent_id)
        return agent.pid if agent is not None else ""

    def to_v0(self, event: sched.Event) -> tuple[str, dict[str, Any]] | None:
        e = codec.to_builtins(event)
        kind = event.type
        if kind is sched.EventType.SUBSCRIBED:
            subscribed = e["subscribed"]
            self.framework_id = subscribed["framework_id"]["value"]  # the first event sent
            name = "FrameworkReregisteredMessage" if self.reregister else "FrameworkRegisteredMessage"
            return name, {
                "framework_id": subscribed["framework_id"],
                "master_info": subscribed.get("master_info", {}),
            }
        if kind is sched.EventType.OFFERS:
            offers = e["offers"].get("offers", [])
            return "ResourceOffersMessage", {
                "offers": offers,
                "pids": [self._agent_pid(o["agent_id"]["value"]) for o in offers],
            }
        if kind is sched.EventType.RESCIND:
            return "RescindResourceOfferMessage", {"offer_id": e["rescind"]["offer_id"]}
        if kind is sched.EventType.UPDATE:
            status = e["update"]["status"]
            update: dict[str, Any] = {
                "framework_id": {"value": self._framework_id()},
                "status": status,
                "timestamp": status.get("timestamp", 0.0),
            }
            for key in ("executor_id", "agent_id", "uuid"):
                if key in status:
                    update[key] = status[key]
            # The UPID set (the agent's) tells the driver to acknowledge the update.
            acked = "uuid" in status and "agent_id" in status
            pid = self._agent_pid(status["agent_id"]["value"]) if acked else ""
            return "StatusUpdateMessage", {"update": update, "pid": pid}
        if kind is sched.EventType.MESSAGE:
            framework_id = {"value": self._framework_id()}
            return "ExecutorToFrameworkMessage", {"framework_id": framework_id, **e["message"]}
        if kind is sched.EventType.FAILURE:
            failure = e["failure"]
            if "executor_id" in failure:
                return "ExitedExecutorMessage", {
                    "framework_id": {"value": self._framework_id()},
                    "status": failure.get("status", -1),
                    **failure,
                }
            return "LostSlaveMessage", {"agent_id": failure.get("agent_id", {"value": ""})}
        if kind is sched.EventType.ERROR:
            return "FrameworkErrorMessage", {"message": e["error"]["message"]}
        return None  # HEARTBEAT and what v0 has no message for

    def _framework_id(self) -> str:
        return self.framework_id or ""


class V0Schedulers:
    """The v0 frameworks by their UPID, and what their messages do."""

    def __init__(self, master: Master) -> None:
        self.master = master
        self._by_pid: dict[libprocess.UPID, str] = {}
        self.authenticator = V0Authenticator(master)

    async def handle(self, pid: libprocess.UPID, name: str, body: bytes) -> None:
        if name == CALL:
            call = proto.to_dict(proto.parse(body, proto.message_class(CALL)))
            if call.get("type") == "SUBSCRIBE":
                info = call.get("subscribe", {}).get("framework_info", {})
                await self._subscribe(pid, info, reregister="id" in info)
            else:
                await self._call(pid, call)
            return
        short = name[len(INTERNAL) :] if name.startswith(INTERNAL) else ""
        if short in AUTHENTICATION:
            return await self.authenticator.handle(pid, short, v0.decode(short, body))
        if short not in _SESSION and short not in _CALLS:
            raise BadRequest("no handler for this message")
        message = v0.decode(short, body)
        if short in ("RegisterFrameworkMessage", "ReregisterFrameworkMessage"):
            await self._subscribe(pid, message["framework"], reregister=short == "ReregisterFrameworkMessage")
            return
        if short == "DeactivateFrameworkMessage":
            framework = self._framework(pid, message.get("framework_id"))
            if framework.stream is not None:
                framework.stream.close()
            return
        await self._call(pid, _CALLS[short](message))

    def _framework(self, pid: libprocess.UPID, framework_id: dict[str, Any] | None) -> Framework:
        known = self._by_pid.get(pid)
        framework = self.master.frameworks.get(known) if known is not None else None
        if framework is None or (framework_id is not None and framework_id.get("value") != framework.id):
            raise BadRequest("no framework registered from this UPID")
        if not isinstance(framework.stream, V0Stream) or framework.stream.pid != pid:
            raise BadRequest(f"framework {framework.id} is not connected from this UPID")
        return framework

    async def _subscribe(self, pid: libprocess.UPID, info: dict[str, Any], *, reregister: bool) -> None:
        master = self.master
        known = self._by_pid.get(pid)
        framework = master.frameworks.get(known) if known is not None else None
        if (
            framework is not None
            and isinstance(framework.stream, V0Stream)
            and framework.stream.pid == pid
            and not framework.stream.closed.is_set()
        ):
            # The driver retries until it hears back: answer again, register once.
            await framework.stream.send(
                sched.Event(
                    type=sched.EventType.SUBSCRIBED,
                    subscribed=sched.Subscribed(
                        framework_id=FrameworkID(value=framework.id), master_info=master.master_info
                    ),
                )
            )
            return
        admitted = self.authenticator.admit(pid, info)
        if admitted is None:
            return
        call = codec.convert({"type": "SUBSCRIBE", "subscribe": {"framework_info": admitted}}, sched.Call)
        checked_call(call)
        assert call.subscribe is not None
        stream = V0Stream(master, pid, reregister)
        stream_id = str(uuid.uuid4())
        framework = await master.framework_streams.subscribe(stream, stream_id, call.subscribe)
        if framework is None:
            return
        self._by_pid[pid] = framework.id
        master.owner.spawn(self._disconnected(framework, stream, stream_id), f"v0 framework {framework.id}")

    async def _disconnected(self, framework: Framework, stream: V0Stream, stream_id: str) -> None:
        await stream.closed.wait()
        if self._by_pid.get(stream.pid) == framework.id and framework.stream is stream:
            self.master.framework_streams.disconnected(framework, stream_id)

    async def _call(self, pid: libprocess.UPID, body: dict[str, Any]) -> None:
        framework = self._framework(pid, body.get("framework_id"))
        body = {**body, "framework_id": {"value": framework.id}}
        call = codec.convert(body, sched.Call)
        checked_call(call)
        self.master.counters["master/valid_scheduler_calls"] += 1
        await dispatch(self.master, framework, call)


def _call(type_: str, message: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The v1 call of `type_` with `fields`, for the framework `message` names."""
    call = {"type": type_, "framework_id": message.get("framework_id")}
    return {**call, **({type_.lower(): fields} if fields else {})}


# Registration and deactivation: the framework's connection itself.
_SESSION = ("RegisterFrameworkMessage", "ReregisterFrameworkMessage", "DeactivateFrameworkMessage")
# The other old scheduler messages, as the v1 calls they are (names already v1's).
_CALLS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "UnregisterFrameworkMessage": lambda m: _call("TEARDOWN", m),
    "LaunchTasksMessage": lambda m: _call(
        "ACCEPT",
        m,
        offer_ids=m.get("offer_ids", []),
        operations=[{"type": "LAUNCH", "launch": {"task_infos": m["tasks"]}}] if m.get("tasks") else [],
        filters=m.get("filters", {}),
    ),
    "ReviveOffersMessage": lambda m: _call("REVIVE", m, roles=m.get("roles", [])),
    "KillTaskMessage": lambda m: _call(
        "KILL", m, task_id=m["task_id"], **({"agent_id": m["agent_id"]} if "agent_id" in m else {})
    ),
    "StatusUpdateAcknowledgementMessage": lambda m: _call(
        "ACKNOWLEDGE", m, agent_id=m["agent_id"], task_id=m["task_id"], uuid=m["uuid"]
    ),
    "FrameworkToExecutorMessage": lambda m: _call(
        "MESSAGE", m, agent_id=m["agent_id"], executor_id=m["executor_id"], data=m["data"]
    ),
    "ReconcileTasksMessage": lambda m: _call(
        "RECONCILE",
        m,
        tasks=[{k: s[k] for k in ("task_id", "agent_id") if k in s} for s in m.get("statuses", [])],
    ),
    "ResourceRequestMessage": lambda m: _call("REQUEST", m, requests=m.get("requests", [])),
}


def install(router: Router, master: Master) -> V0Schedulers:
    schedulers = V0Schedulers(master)
    names = [INTERNAL + name for name in (*_SESSION, *_CALLS, *AUTHENTICATION)] + [CALL]
    libprocess.Receiver(schedulers.handle).install(router, names)
    return schedulers
