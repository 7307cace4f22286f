"""``POST /api/v1/scheduler``: the v1 scheduler HTTP API (Mesos's `Master::Http::scheduler`).

SUBSCRIBE answers 200 with a chunked RecordIO stream of events and a
``Mesos-Stream-Id`` header; every other call must carry that header and is
answered 202 (UPDATE_FRAMEWORK: 200). Malformed or invalid calls get 400 with
the reason, an unknown framework 400, a framework that is not subscribed or a
wrong/missing stream id 403, and calls before the master has recovered 503.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from aiohttp import web

from mesilla.common.authentication import MASTER_SCHEDULER, principal_of
from mesilla.common.authorization import require
from mesilla.common.errors import BadRequest, Forbidden
from mesilla.common.http import EventStream, Router, check_accept, read_message
from mesilla.master.validation import validate_call
from mesilla.v1 import scheduler as sched

if TYPE_CHECKING:
    from mesilla.master.framework import Framework
    from mesilla.master.master import Master

log = logging.getLogger(__name__)

STREAM_ID_HEADER = "Mesos-Stream-Id"


def install(router: Router, master: Master) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await scheduler(request, master)

    router.add(
        "/api/v1/scheduler", handler, methods=("POST",), realm=MASTER_SCHEDULER
    )


async def scheduler(request: web.Request, master: Master) -> web.StreamResponse:
    master.check_serving()
    call: sched.Call = await read_message(request, sched.Call)
    try:
        checked_call(call)
    except BadRequest:
        master.counters["master/invalid_scheduler_calls"] += 1
        raise
    principal = principal_of(request)
    if call.type is sched.CallType.SUBSCRIBE:
        assert call.subscribe is not None
        info = call.subscribe.framework_info
        if principal is not None:
            if info.principal is None:
                # As Mesos: an authenticated framework is its principal's.
                info.principal = principal.value
            elif info.principal != principal.value:
                raise BadRequest(
                    f"Failed to validate scheduler::Call: Authenticated principal "
                    f"'{principal}' does not match principal '{info.principal}' set in "
                    "`FrameworkInfo`"
                )
        for role in info.effective_roles():
            require(master.authorizer, request, "register_frameworks", role)
        return await _subscribe(request, master, call.subscribe)
    assert call.framework_id is not None
    framework = master.frameworks.get(call.framework_id.value)
    if framework is None:
        raise BadRequest(f"Framework {call.framework_id.value} cannot be found")
    if principal is not None and principal.value != framework.info.principal:
        raise BadRequest(
            f"Authenticated principal '{principal}' does not match principal "
            f"'{framework.info.principal or ''}' set in `FrameworkInfo`"
        )
    if not framework.connected:
        raise Forbidden(
            f"Framework {framework.id} is not subscribed: send SUBSCRIBE first"
        )
    stream_id = request.headers.get(STREAM_ID_HEADER)
    if stream_id is None:
        raise Forbidden(
            f"All non-subscribe calls should include the '{STREAM_ID_HEADER}' header"
        )
    if stream_id != framework.stream_id:
        raise Forbidden(
            f"The stream ID '{stream_id}' included in this request didn't match the stream ID "
            f"currently associated with framework ID {framework.id}"
        )
    master.counters["master/valid_scheduler_calls"] += 1
    return await dispatch(master, framework, call)


def checked_call(call: sched.Call) -> None:
    """`validate_call`, its error worded as Mesos answers it."""
    try:
        validate_call(call)
    except BadRequest as exc:
        raise BadRequest(f"Failed to validate scheduler::Call: {exc.reason}", field=exc.field) from exc


async def _subscribe(
    request: web.Request, master: Master, call: sched.Subscribe
) -> web.StreamResponse:
    encoding = check_accept(request, sched.Event, streaming=True)
    if STREAM_ID_HEADER in request.headers:
        raise BadRequest(
            f"Subscribe calls should not include the '{STREAM_ID_HEADER}' header"
        )
    stream_id = str(uuid.uuid4())
    stream = await EventStream.open(
        request, headers={STREAM_ID_HEADER: stream_id}, encoding=encoding, event_type=sched.Event
    )
    framework = await master.framework_streams.subscribe(stream, stream_id, call)
    if framework is not None:
        await master.streams.hold(request, stream)
        master.framework_streams.disconnected(framework, stream_id)
    return stream.response


async def dispatch(
    master: Master, framework: Framework, call: sched.Call
) -> web.StreamResponse:
    """A framework's call, to the part of the master that handles it."""
    accepted = web.Response(status=202)
    kind = call.type
    if kind is sched.CallType.TEARDOWN:
        await master.framework_streams.teardown(framework)
    elif kind is sched.CallType.ACCEPT:
        assert call.accept is not None
        await master.launcher.accept(framework, call.accept)
    elif kind is sched.CallType.DECLINE:
        assert call.decline is not None
        master.offerer.decline(framework.id, call.decline)
    elif kind is sched.CallType.REVIVE:
        master.framework_streams.revive(framework, call.revive.roles if call.revive else [])
    elif kind is sched.CallType.SUPPRESS:
        master.framework_streams.suppress(framework, call.suppress.roles if call.suppress else [])
    elif kind is sched.CallType.KILL:
        assert call.kill is not None
        await master.status_updates.kill(framework, call.kill)
    elif kind is sched.CallType.SHUTDOWN:
        assert call.shutdown is not None
        await master.relay.shutdown_executor(framework, call.shutdown)
    elif kind is sched.CallType.ACKNOWLEDGE:
        assert call.acknowledge is not None
        await master.status_updates.acknowledge(framework, call.acknowledge)
    elif kind is sched.CallType.RECONCILE:
        assert call.reconcile is not None
        await master.status_updates.reconcile(framework, call.reconcile.tasks)
    elif kind is sched.CallType.MESSAGE:
        assert call.message is not None
        await master.relay.framework_message(framework, call.message)
    elif kind is sched.CallType.REQUEST:
        master.counters["master/messages_resource_request"] += 1
    elif kind is sched.CallType.UPDATE_FRAMEWORK:
        assert call.update_framework is not None
        await master.framework_streams.update(framework, call.update_framework)
        return web.Response(status=200)
    else:
        # Inverse offers and operation feedback: Mesilla makes no inverse offers
        # and runs no offer operations that report status, so there is nothing to act on.
        log.info("ignoring %s call of framework %s", kind.value, framework.id)
    return accepted
