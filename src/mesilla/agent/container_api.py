"""The container calls of the agent API (Mesos's `src/slave/http.cpp`).

* LAUNCH_CONTAINER / LAUNCH_NESTED_CONTAINER: a nested container (its id has a
  parent) runs in ``<parent sandbox>/containers/<id>`` under an existing
  container; a container without a parent is *standalone*: it has its own
  sandbox under ``<work_dir>/containers/<id>`` and is not part of any
  executor. 200 when launched, 202 when the id is already in use; a failed
  launch answers its `ContainerError`'s status with the reason: 400 for what
  cannot be launched (bad input), 503 when the image's registry failed, 500
  when the agent's own machinery did (a runc crash).
* WAIT_*: long poll until the container ends: raw `exit_status`, and the
  `state`/`reason`/`message` a limitation or a failed launch decided; 404 for
  an unknown container.
* KILL_*: a signal (default SIGKILL) to the container; 404 if unknown.
* REMOVE_*: forget an ended nested container and delete its sandbox; a
  running one cannot be removed.

The `_NESTED_` variants are the deprecated names of the same calls, which
also require a parent. The calls' work is in `mesilla.agent.container_calls`;
sessions and ATTACH_CONTAINER_OUTPUT/_INPUT are in
`mesilla.agent.container_io`; a container with `tty_info` (not a session)
gets its terminal from a switchboard server (`mesilla.agent.io_switchboard`).
"""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web

from mesilla.agent.agent import Agent
from mesilla.agent.agent_api import AgentApi
from mesilla.agent.container_calls import ContainerCalls
from mesilla.agent.container_io import Sessions
from mesilla.agent.io_switchboard import Servers
from mesilla.common.errors import BadRequest, UnsupportedMediaType
from mesilla.v1 import agent as api


def _part(call: api.Call, name: str) -> object:
    part = getattr(call, name)
    if part is None:
        raise BadRequest(f"Expecting '{name}' to be present")
    return part


_Targeted = TypeVar("_Targeted", api.ContainerCall, api.KillContainerCall)


def _targeted_part(call: api.Call, name: str, type_: type[_Targeted], nested: bool) -> _Targeted:
    """The call's part naming a container; a *_NESTED_* call's must name a nested one."""
    part = _part(call, name)
    assert isinstance(part, type_)
    if nested and part.container_id.parent is None:
        raise BadRequest(f"Expecting '{name}.container_id.parent' to be present")
    return part


def install(agent_api: AgentApi, agent: Agent) -> Servers:
    """Registers the container calls; the I/O switchboards they use are returned,
    for the agent's start to recover (`Servers.recover`)."""
    servers = Servers(agent)
    calls = ContainerCalls(agent, servers)
    sessions = Sessions(agent, servers)
    t = api.CallType

    async def session(call: api.Call, request: web.Request) -> web.StreamResponse:
        launch = _part(call, "launch_nested_container_session")
        assert isinstance(launch, api.LaunchContainerCall)
        return await sessions.launch(request, launch, calls)

    async def attach_output(call: api.Call, request: web.Request) -> web.StreamResponse:
        part = _part(call, "attach_container_output")
        assert isinstance(part, api.ContainerCall)
        return await sessions.attach_output(request, part.container_id)

    async def attach_input(call: api.Call, request: web.Request) -> web.StreamResponse:
        raise UnsupportedMediaType(
            "ATTACH_CONTAINER_INPUT streams its records: send 'Content-Type: "
            "application/recordio' and 'Message-Content-Type: application/json'"
        )

    agent_api.register(t.LAUNCH_NESTED_CONTAINER_SESSION, session)
    agent_api.register(t.ATTACH_CONTAINER_OUTPUT, attach_output)
    agent_api.register(t.ATTACH_CONTAINER_INPUT, attach_input)
    agent_api.register_streaming(sessions.attach_input)

    def launcher(field: str, nested: bool):  # type: ignore[no-untyped-def]
        async def handler(call: api.Call, request: web.Request) -> web.StreamResponse:
            launch = _part(call, field)
            assert isinstance(launch, api.LaunchContainerCall)
            return await calls.launch(launch, field, nested=nested)

        return handler

    def waiter(field: str, nested: bool):  # type: ignore[no-untyped-def]
        async def handler(call: api.Call, request: web.Request) -> web.StreamResponse:
            part = _targeted_part(call, field, api.ContainerCall, nested)
            result = await calls.wait(part.container_id)
            return agent_api.respond(request, **{field: result})

        return handler

    def killer(field: str, nested: bool):  # type: ignore[no-untyped-def]
        async def handler(call: api.Call, request: web.Request) -> web.StreamResponse:
            return await calls.kill(_targeted_part(call, field, api.KillContainerCall, nested))

        return handler

    def remover(field: str, nested: bool):  # type: ignore[no-untyped-def]
        async def handler(call: api.Call, request: web.Request) -> web.StreamResponse:
            part = _targeted_part(call, field, api.ContainerCall, nested)
            return await calls.remove(part.container_id)

        return handler

    agent_api.register(t.LAUNCH_CONTAINER, launcher("launch_container", False))
    agent_api.register(t.LAUNCH_NESTED_CONTAINER, launcher("launch_nested_container", True))
    agent_api.register(t.WAIT_CONTAINER, waiter("wait_container", False))
    agent_api.register(t.WAIT_NESTED_CONTAINER, waiter("wait_nested_container", True))
    agent_api.register(t.KILL_CONTAINER, killer("kill_container", False))
    agent_api.register(t.KILL_NESTED_CONTAINER, killer("kill_nested_container", True))
    agent_api.register(t.REMOVE_CONTAINER, remover("remove_container", False))
    agent_api.register(t.REMOVE_NESTED_CONTAINER, remover("remove_nested_container", True))
    return servers
