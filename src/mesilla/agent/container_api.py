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
also require a parent. Sessions and ATTACH_CONTAINER_OUTPUT/_INPUT are in
`mesilla.agent.container_io`; a container with `tty_info` (not a session)
gets its terminal from a switchboard server (`mesilla.agent.io_switchboard`).
"""

from __future__ import annotations

import logging
import os
import signal
from typing import TypeVar

from aiohttp import web

from mesilla.agent.agent import Agent
from mesilla.agent.agent_api import AgentApi
from mesilla.agent.container_io import Sessions
from mesilla.agent.io_switchboard import Servers, requires_server
from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.common.errors import BadRequest, ContainerError, NotFound, UnsupportedMediaType
from mesilla.common.validation import validate_container_id
from mesilla.containerizer.interface import Containerizer, LaunchResult
from mesilla.containerizer.types import ContainerClass, ContainerConfig
from mesilla.v1 import agent as api
from mesilla.v1.mesos import CommandInfo, ContainerID, TaskResourceLimitation, TaskState

log = logging.getLogger(__name__)

def standalone_marker_dir(work_dir: str) -> str:
    """Checkpointed ids of standalone containers, so that a restarted agent keeps them."""
    return os.path.join(work_dir, "meta", "containers")


def standalone_sandboxes(work_dir: str) -> str:
    return os.path.join(work_dir, "containers")


def standalone_sandbox(work_dir: str, container_id: ContainerID) -> str:
    return os.path.join(standalone_sandboxes(work_dir), container_id.value)


def recover_standalone(work_dir: str) -> set[ContainerID]:
    directory = standalone_marker_dir(work_dir)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return set()
    found = set()
    for name in names:
        if name.endswith(".tmp"):
            continue
        container_id = ContainerID(value=name)
        error = validate_container_id(container_id)
        if error is not None:
            log.warning("Skipping '%s' in %s: %s", name, directory, error)
            continue
        found.add(container_id)
    return found


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


class ContainerCalls:
    def __init__(self, agent: Agent, servers: Servers) -> None:
        self.agent = agent
        self.servers = servers

    @property
    def containerizer(self) -> Containerizer:
        return self.agent.containerizer

    def _marker(self, container_id: ContainerID) -> str:
        return os.path.join(standalone_marker_dir(self.agent.flags.work_dir), container_id.value)

    def _sandbox(self, container_id: ContainerID) -> str:
        if container_id.parent is None:
            return standalone_sandbox(self.agent.flags.work_dir, container_id)
        parent = self.containerizer.config(container_id.parent)
        if parent is None:
            raise BadRequest(
                f"Parent container {container_id.parent} of {container_id} cannot be found"
            )
        return os.path.join(parent.sandbox, "containers", container_id.value)

    async def launch(
        self,
        launch: api.LaunchContainerCall,
        field: str,
        *,
        nested: bool,
        stdin: str | None = None,
        stdout: str | None = None,
        stderr: str | None = None,
        console_socket: str | None = None,
        container_class: ContainerClass = ContainerClass.DEFAULT,
    ) -> web.Response:
        container_id = launch.container_id
        if nested and container_id.parent is None:
            raise BadRequest(f"Expecting '{field}.container_id.parent' to be present")
        if launch.command is None or (
            launch.command.value is None and not launch.command.arguments
        ):
            raise BadRequest(f"Expecting '{field}.command' with a command to run")
        sandbox = self._sandbox(container_id)
        if container_id.parent is None:
            if not launch.resources:
                raise BadRequest(f"Expecting '{field}.resources' for a standalone container")
            await self.agent.checkpointer.marker(self._marker(container_id))
        parent_config = (
            self.containerizer.config(container_id.root()) if container_id.parent else None
        )
        config = ContainerConfig(
            command=launch.command or CommandInfo(),
            sandbox=sandbox,
            container_info=launch.container,
            resources=list(launch.resources),
            limits={name: scalar.value for name, scalar in launch.limits.items()},
            user=(launch.command.user if launch.command and launch.command.user else None)
            or (parent_config.user if parent_config else None),
            container_class=container_class,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            console_socket=console_socket,
        )
        os.makedirs(sandbox, exist_ok=True)
        server = requires_server(launch.container, container_class)
        if server:
            try:
                config.console_socket = await self.servers.start(container_id, sandbox)
            except FileExistsError:
                return web.Response(status=202)  # the id is in use
            except OSError as exc:
                raise BadRequest(f"Failed to start the I/O switchboard: {exc}") from None
        try:
            result = await self.containerizer.launch(container_id, config)
        except ContainerError as exc:
            if server:
                await self.servers.stop(container_id)
            raise exc.http_error() from exc
        except BaseException:
            if server:
                await self.servers.stop(container_id)
            raise
        if server:
            if result is LaunchResult.SUCCESS:
                self.servers.watch(container_id)
            else:
                await self.servers.stop(container_id)
        if result is LaunchResult.ALREADY_LAUNCHED:
            return web.Response(status=202)
        if result is LaunchResult.NOT_SUPPORTED:
            raise BadRequest("The provided ContainerInfo is not supported")
        return web.Response(status=200)

    async def wait(self, container_id: ContainerID) -> api.WaitContainer:
        termination = await self.containerizer.wait(container_id)
        if termination is None:
            raise NotFound(f"Container {container_id} cannot be found")
        out = api.WaitContainer(exit_status=termination.status, message=termination.message)
        if termination.state:
            out.state = TaskState(termination.state)
        out.reason = termination.reason
        if termination.limited_resources:
            out.limitation = TaskResourceLimitation(resources=termination.limited_resources)
        return out

    async def kill(self, kill: api.KillContainerCall) -> web.Response:
        number = kill.signal if kill.signal is not None else signal.SIGKILL
        if not 0 < number < signal.NSIG:
            raise BadRequest(f"'signal' {number} is not a signal number")
        if not await self.containerizer.kill(kill.container_id, number):
            raise NotFound(f"Container {kill.container_id} cannot be found (or is already killed)")
        return web.Response(status=200)

    async def remove(self, container_id: ContainerID) -> web.Response:
        work_dir = self.agent.flags.work_dir
        sandboxes = None  # the directory holding the container's sandbox
        if container_id.parent is not None:
            parent = self.containerizer.config(container_id.parent)
            if parent is not None:
                sandboxes = os.path.join(parent.sandbox, "containers")
        try:
            await self.containerizer.remove(container_id)
        except ContainerError as exc:
            raise exc.http_error() from exc
        if container_id.parent is None and os.path.exists(self._marker(container_id)):
            files.remove_file(standalone_marker_dir(work_dir), self._marker(container_id))
            sandboxes = standalone_sandboxes(work_dir)
        if sandboxes is not None:
            # A sandbox can be a big tree: not on the loop.
            await in_thread(files.remove_tree, sandboxes, container_id.value, ignore_errors=True)
        return web.Response(status=200)


def install(agent_api: AgentApi, agent: Agent) -> None:
    servers = Servers(agent)
    agent.spawn(servers.recover(), "recovery of the I/O switchboards")
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
