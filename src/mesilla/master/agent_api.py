"""``POST /internal/agent``: the agent <-> master protocol of `mesilla.v1.internal`.

REGISTER opens a stream of `AgentEvent`s (200, ``Mesos-Stream-Id``); the
other calls carry the agent id and that stream id and are answered 202. An
unknown agent or a stale stream id gets 403, so the agent re-registers.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from aiohttp import web

from mesilla.common.authentication import MASTER_AGENT
from mesilla.common.errors import BadRequest, Forbidden
from mesilla.common.http import EventStream, Router, read_message
from mesilla.common.resources import Resources, ResourcesError
from mesilla.common.validation import validate_ids
from mesilla.master.scheduler_api import STREAM_ID_HEADER
from mesilla.v1 import internal

if TYPE_CHECKING:
    from mesilla.master.master import Master

_FIELDS = {
    internal.AgentCallType.REGISTER: "register",
    internal.AgentCallType.EXECUTOR_MESSAGE: "executor_message",
    internal.AgentCallType.EXITED_EXECUTOR: "exited_executor",
}


def install(router: Router, master: Master) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await agent_call(request, master)

    router.add("/internal/agent", handler, methods=("POST",), realm=MASTER_AGENT)


def _validate(call: internal.AgentCall) -> None:
    if call.type is internal.AgentCallType.UNKNOWN:
        raise BadRequest("Expecting 'type' to be present and known")
    validate_ids(call)
    name = _FIELDS.get(call.type)
    if name is not None and getattr(call, name) is None:
        raise BadRequest(f"Expecting '{name}' to be present")
    if call.register is not None:
        try:
            Resources.from_list(call.register.agent_info.resources)
        except ResourcesError as exc:
            raise BadRequest(
                f"Invalid 'register.agent_info.resources': {exc}"
            ) from None
    updates = _status_updates(call)
    if call.type is internal.AgentCallType.STATUS_UPDATE and not updates:
        raise BadRequest("Expecting 'status_update' to be present")
    if call.status_update is not None and call.status_update.status.uuid is None:
        raise BadRequest("Expecting 'status_update.status.uuid' to be present")
    for index, update in enumerate(call.status_updates):
        if update.status.uuid is None:
            raise BadRequest(f"Expecting 'status_updates[{index}].status.uuid' to be present")


def _status_updates(call: internal.AgentCall) -> list[internal.StatusUpdate]:
    if call.status_update is None:
        return call.status_updates
    return [call.status_update, *call.status_updates]


async def agent_call(request: web.Request, master: Master) -> web.StreamResponse:
    master.check_serving()
    call: internal.AgentCall = await read_message(request, internal.AgentCall)
    _validate(call)
    if call.type is internal.AgentCallType.REGISTER:
        assert call.register is not None
        return await _register(request, master, call.register)
    if call.agent_id is None:
        raise BadRequest("Expecting 'agent_id' to be present")
    agent = master.agents.get(call.agent_id.value)
    if agent is None:
        raise Forbidden(f"Agent {call.agent_id.value} is not registered: send REGISTER")
    if (
        request.headers.get(STREAM_ID_HEADER) != agent.stream_id
        or agent.stream_id is None
    ):
        raise Forbidden(
            f"'{STREAM_ID_HEADER}' does not match agent {agent.id}'s stream: re-register"
        )
    updates = _status_updates(call)
    if updates:
        for update in updates:
            await master.status_updates.status_update(agent, update)
    elif call.executor_message is not None:
        await master.relay.executor_message(agent, call.executor_message)
    elif call.exited_executor is not None:
        await master.relay.exited_executor(agent, call.exited_executor)
    elif call.type is internal.AgentCallType.PONG:
        master.agent_links.pong(agent)
    elif call.type is internal.AgentCallType.UNREGISTER:
        await master.agent_links.unregister(agent)
    return web.Response(status=202)


async def _register(
    request: web.Request, master: Master, call: internal.Register
) -> web.StreamResponse:
    stream_id = str(uuid.uuid4())
    stream = await EventStream.open(request, headers={STREAM_ID_HEADER: stream_id})
    agent = await master.agent_links.register(stream, stream_id, call, request.remote or "127.0.0.1")
    if agent is not None:
        await master.streams.hold(request, stream)
        master.agent_links.disconnected(agent, stream_id)
    return stream.response
