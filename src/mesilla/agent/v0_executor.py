"""The agent's libprocess endpoint for v0 executors (Mesos's `MesosExecutorDriver`).

A v0 executor is an executor like the v1 ones: its messages to ``/slave(1)/...``
become v1 executor calls handled by `executor_link` (RegisterExecutor and
ReregisterExecutor: SUBSCRIBE, with its unacknowledged tasks and updates;
StatusUpdate: UPDATE; ExecutorToFramework: MESSAGE), and the agent's v1 events
for it go through a `V0ExecutorStream`, which POSTs each as its v0 message to
the executor's UPID: ExecutorRegistered (ExecutorReregistered), RunTask,
KillTask, StatusUpdateAcknowledgement, FrameworkToExecutor, ShutdownExecutor,
FrameworkError. The environment a v0 executor reads (`MESOS_SLAVE_PID`,
`MESOS_SLAVE_ID`, `MESOS_CHECKPOINT`, ...) is every executor's (`executors.py`).
"""

from __future__ import annotations

from mesilla.agent import executor_link, messages
from mesilla.agent.agent import Agent, AgentStatus
from mesilla.agent.executor_api import validate
from mesilla.agent.state import Executor, Framework
from mesilla.common import libprocess
from mesilla.common.errors import BadRequest
from mesilla.common.http import Router
from mesilla.v1 import codec
from mesilla.v1 import executor as ev
from mesilla.v1.mesos import Json
from mesilla.v1.proto import v0
from mesilla.v1.proto.v0 import INTERNAL

MESSAGES = [
    "RegisterExecutorMessage",
    "ReregisterExecutorMessage",
    "StatusUpdateMessage",
    "ExecutorToFrameworkMessage",
]


class V0ExecutorStream(libprocess.MessageStream):
    """The SUBSCRIBE stream of a v0 executor: v1 executor events out as v0 messages."""

    def __init__(self, agent: Agent, pid: libprocess.UPID, framework: Framework, reregister: bool) -> None:
        super().__init__(
            libprocess.Link(agent.pid, pid, lambda coro: agent.spawn(coro, f"link to {pid}")),
            lambda coro: agent.spawn(coro, f"watch {pid}"),
        )
        self.pid = pid
        self._agent = agent
        self._framework = framework
        self._reregister = reregister

    def to_v0(self, event: ev.Event) -> tuple[str, Json] | None:
        e = codec.to_builtins(event)
        agent_id = codec.to_builtins(self._agent.info.id)
        framework_id = codec.to_builtins(self._framework.id)
        kind = event.type
        if kind is ev.EventType.SUBSCRIBED:
            subscribed = e["subscribed"]
            if self._reregister:
                reregistered = {"agent_id": agent_id, "agent_info": subscribed["agent_info"]}
                return "ExecutorReregisteredMessage", reregistered
            return "ExecutorRegisteredMessage", {
                "executor_info": subscribed["executor_info"],
                "framework_id": framework_id,
                "framework_info": subscribed["framework_info"],
                "agent_id": agent_id,
                "agent_info": subscribed["agent_info"],
            }
        if kind is ev.EventType.LAUNCH:
            return "RunTaskMessage", {
                "framework_id": framework_id,
                "framework": codec.to_builtins(self._framework.info),
                "task": e["launch"]["task"],
                "pid": "",
            }
        if kind is ev.EventType.KILL:
            return "KillTaskMessage", {"framework_id": framework_id, "task_id": e["kill"]["task_id"]}
        if kind is ev.EventType.ACKNOWLEDGED:
            return "StatusUpdateAcknowledgementMessage", {
                "agent_id": agent_id, "framework_id": framework_id, **e["acknowledged"]
            }  # fmt: skip
        if kind is ev.EventType.MESSAGE:
            return "FrameworkToExecutorMessage", {
                "agent_id": agent_id,
                "framework_id": framework_id,
                "executor_id": {"value": self._executor_id()},
                "data": e["message"]["data"],
            }
        if kind is ev.EventType.SHUTDOWN:
            return "ShutdownExecutorMessage", {"framework_id": framework_id}
        if kind is ev.EventType.ERROR:
            return "FrameworkErrorMessage", {"message": e["error"]["message"]}
        return None  # HEARTBEAT; LAUNCH_GROUP is for the default executor only

    def _executor_id(self) -> str:
        for executor in self._framework.executors.values():
            if executor.stream is self:
                return executor.id
        return ""


class V0Executors:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def handle(self, pid: libprocess.UPID, name: str, body: bytes) -> None:
        short = name.removeprefix(INTERNAL)
        message = v0.decode(short, body)
        if short in ("RegisterExecutorMessage", "ReregisterExecutorMessage"):
            await self._subscribe(pid, message, reregister=short.startswith("Rereg"))
        elif short == "StatusUpdateMessage":
            update = message["update"]
            status = {**update["status"], **({"uuid": update["uuid"]} if "uuid" in update else {})}
            call = self._call(update, "UPDATE", update={"status": status})
            framework, executor = self._executor(pid, call)
            assert call.update is not None
            await executor_link.update(self.agent, framework, executor, call.update.status)
        elif short == "ExecutorToFrameworkMessage":
            call = self._call(message, "MESSAGE", message={"data": message["data"]})
            framework, executor = self._executor(pid, call)
            assert call.message is not None
            messages.executor_message(self.agent, framework, executor, call.message.data)

    @staticmethod
    def _call(v0_message: Json, type_: str, **fields: object) -> ev.Call:
        """The v1 call a v0 message is (ids from the message), validated as v1's are."""
        ids = {
            "framework_id": v0_message["framework_id"],
            "executor_id": v0_message.get("executor_id", {"value": ""}),
        }
        call = codec.convert({"type": type_, **ids, **fields}, ev.Call)
        validate(call)
        return call

    def _lookup(self, call: ev.Call) -> tuple[Framework, Executor]:
        framework = self.agent.frameworks.get(call.framework_id.value)
        if framework is None:
            raise BadRequest("Framework cannot be found")
        executor = framework.executors.get(call.executor_id.value)
        if executor is None:
            raise BadRequest("Executor cannot be found")
        return framework, executor

    def _executor(self, pid: libprocess.UPID, call: ev.Call) -> tuple[Framework, Executor]:
        framework, executor = self._lookup(call)
        stream = executor.stream
        if not isinstance(stream, V0ExecutorStream) or stream.pid != pid:
            raise BadRequest(f"Executor {executor.id} is not registered from this UPID")
        return framework, executor

    async def _subscribe(self, pid: libprocess.UPID, message: Json, *, reregister: bool) -> None:
        subscribe = {
            "unacknowledged_tasks": message.get("tasks", []),
            "unacknowledged_updates": [
                {"status": {**u["status"], **({"uuid": u["uuid"]} if "uuid" in u else {})},
                 "framework_id": u["framework_id"]}
                for u in message.get("updates", [])
            ],
        }  # fmt: skip
        call = self._call(message, "SUBSCRIBE", subscribe=subscribe)
        agent = self.agent
        if agent.status is AgentStatus.RECOVERING:
            await agent.executors_recovered.wait()
        framework, executor = self._lookup(call)
        assert call.subscribe is not None
        stream = V0ExecutorStream(agent, pid, framework, reregister)
        if executor.checkpoint:
            # Where a restarted agent finds it again (Mesos's `libprocess.pid`).
            run = agent.run_of(executor)
            agent.in_order(
                executor, lambda: agent.checkpointer.libprocess_pid(run, str(pid)), f"pid of {executor}"
            )
        await executor_link.subscribe(agent, framework, executor, call.subscribe, stream)
        agent.spawn(self._disconnected(executor, stream), f"v0 executor {executor}")

    @staticmethod
    async def _disconnected(executor: Executor, stream: V0ExecutorStream) -> None:
        await stream.closed.wait()
        if executor.stream is stream:
            executor.stream = None


def reconnect(agent: Agent, pid: str) -> None:
    """After an agent restart: asks the v0 executor at `pid` to re-register
    (ReconnectExecutorMessage), as Mesos's `--recover=reconnect` does."""
    upid = libprocess.UPID.parse(pid)
    if upid is None or agent.info.id is None:
        return
    link = libprocess.Link(agent.pid, upid, lambda coro: agent.spawn(coro, f"reconnect {upid}"))
    body = v0.encode("ReconnectExecutorMessage", {"agent_id": codec.to_builtins(agent.info.id)})
    link.send(INTERNAL + "ReconnectExecutorMessage", body)
    link.close()


def install(router: Router, agent: Agent) -> V0Executors:
    executors = V0Executors(agent)
    libprocess.Receiver(executors.handle).install(router, [INTERNAL + name for name in MESSAGES])
    return executors
