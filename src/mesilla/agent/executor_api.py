"""`POST /api/v1/executor`: the executor HTTP API (realm ``mesos-agent-executor``).

As Mesos's `Http::executor` (`src/slave/http.cpp`): the call is parsed and
validated first (400 with the reason), HEARTBEAT is accepted before anything
else, then the framework and executor must be known (400 "Framework cannot be
found" / "Executor cannot be found"), and an executor that has not subscribed
may only SUBSCRIBE (403). SUBSCRIBE answers 200 with a RecordIO stream of
events that stays open until the executor or the agent goes away; UPDATE and
MESSAGE answer 202.
"""

from __future__ import annotations

import asyncio
import uuid

from aiohttp import web

from mesilla.agent import executor_auth, executor_link, messages
from mesilla.agent.agent import Agent, AgentStatus
from mesilla.agent.state import ExecutorState
from mesilla.common.authentication import AGENT_EXECUTOR
from mesilla.common.errors import BadRequest, Forbidden, ServiceUnavailable
from mesilla.common.http import EventStream, Router, check_accept, read_message
from mesilla.common.negotiation import JSON_ENCODING
from mesilla.common.validation import validate_ids
from mesilla.v1 import executor as ev
from mesilla.v1.mesos import StatusSource, TaskState

# Mesos's DEFAULT_EXECUTOR_HEARTBEAT_INTERVAL.
HEARTBEAT_INTERVAL = 30 * 60.0


def validate(call: ev.Call) -> None:
    """Mesos's `validateExecutorCall`; raises BadRequest naming the problem."""

    def fail(problem: str) -> None:
        raise BadRequest(f"Failed to validate Executor::Call: {problem}")

    if call.type is ev.CallType.UNKNOWN:
        fail("Expecting 'type' to be one of SUBSCRIBE, UPDATE, MESSAGE, HEARTBEAT")
    try:
        validate_ids(call)
    except BadRequest as exc:
        fail(exc.reason)
    if call.type is ev.CallType.SUBSCRIBE and call.subscribe is None:
        fail("Expecting 'subscribe' to be present")
    if call.type is ev.CallType.MESSAGE and call.message is None:
        fail("Expecting 'message' to be present")
    if call.type is ev.CallType.UPDATE:
        if call.update is None:
            fail("Expecting 'update' to be present")
        assert call.update is not None
        status = call.update.status
        if status.uuid is None:
            fail("Expecting 'uuid' to be present")
        assert status.uuid is not None
        try:
            uuid.UUID(bytes=status.uuid)
        except ValueError:
            fail(f"'uuid' must be 16 bytes, got {len(status.uuid)}")
        if status.executor_id is not None and status.executor_id != call.executor_id:
            fail(
                f"ExecutorID in Call: {call.executor_id.value} does not match ExecutorID "
                f"in TaskStatus: {status.executor_id.value}"
            )
        if status.source is not None and status.source is not StatusSource.SOURCE_EXECUTOR:
            fail(
                f"Received Call from executor {call.executor_id.value} of framework "
                f"{call.framework_id.value} with invalid source, expecting 'SOURCE_EXECUTOR'"
            )
        if status.state is TaskState.TASK_STAGING:
            fail(
                f"Received TASK_STAGING from executor {call.executor_id.value} of framework "
                f"{call.framework_id.value} which is not allowed"
            )


def install(router: Router, agent: Agent) -> None:
    async def executor_api(request: web.Request) -> web.StreamResponse:
        call = await read_message(request, ev.Call)
        validate(call)
        encoding = JSON_ENCODING
        if call.type is ev.CallType.SUBSCRIBE:
            encoding = check_accept(request, ev.Event, streaming=True)
        elif call.type is ev.CallType.HEARTBEAT:
            return web.Response(status=202)
        if agent.status is AgentStatus.RECOVERING:
            if call.type is not ev.CallType.SUBSCRIBE:
                raise ServiceUnavailable("Agent has not finished recovery")
            # A restarted agent listens before it has read its checkpoints; its
            # executors come back at once and wait here rather than retry later.
            await agent.executors_recovered.wait()
        framework = agent.frameworks.get(call.framework_id.value)
        if framework is None:
            raise BadRequest("Framework cannot be found")
        executor = framework.executors.get(call.executor_id.value)
        if executor is None:
            raise BadRequest("Executor cannot be found")
        executor_auth.check_executor_call(
            request, framework.id.value, executor.id, executor.container_id.value
        )
        if executor.state is ExecutorState.REGISTERING and call.type is not ev.CallType.SUBSCRIBE:
            raise Forbidden("Executor is not subscribed")

        if call.type is ev.CallType.SUBSCRIBE:
            assert call.subscribe is not None
            stream = await EventStream.open(request, encoding=encoding, event_type=ev.Event)
            await executor_link.subscribe(agent, framework, executor, call.subscribe, stream)
            await _serve_stream(request, stream)
            if executor.stream is stream:
                executor.stream = None
            return stream.response
        if call.type is ev.CallType.UPDATE:
            assert call.update is not None
            await executor_link.update(agent, framework, executor, call.update.status)
            return web.Response(status=202)
        if call.type is ev.CallType.MESSAGE:  # the only call left
            assert call.message is not None
            messages.executor_message(agent, framework, executor, call.message.data)
        return web.Response(status=202)

    router.add("/api/v1/executor", executor_api, methods=("POST",), realm=AGENT_EXECUTOR)


async def _serve_stream(request: web.Request, stream: EventStream) -> None:
    """Holds the SUBSCRIBE response open, heartbeating, until either side closes it.

    aiohttp does not cancel a handler whose client went away, so the
    transport is polled each second.
    """
    loop = asyncio.get_running_loop()
    next_heartbeat = loop.time() + HEARTBEAT_INTERVAL
    while not stream.closed.is_set():
        transport = request.transport
        if transport is None or transport.is_closing():
            stream.close()
            return
        try:
            async with asyncio.timeout(1.0):  # not wait_for, which can swallow a cancel
                await stream.closed.wait()
        except TimeoutError:
            pass
        if loop.time() >= next_heartbeat:
            next_heartbeat = loop.time() + HEARTBEAT_INTERVAL
            await stream.send(ev.Event(type=ev.EventType.HEARTBEAT))
