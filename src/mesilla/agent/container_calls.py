"""The container calls' work, below the HTTP layer: LAUNCH_(NESTED_)CONTAINER, WAIT_*,
KILL_* and REMOVE_* (`container_api` installs them; a session's launch comes from
`container_io`).

A container without a parent is *standalone*: it has its own sandbox under
``<work_dir>/containers/<id>``, and its id is checkpointed under
``<work_dir>/meta/containers`` so that a restarted agent keeps it. A
`ContainerError` from the containerizer becomes its HTTP status here, once.
"""

from __future__ import annotations

import logging
import os
import signal

from aiohttp import web

from mesilla.agent import checkpoints
from mesilla.agent.agent import Agent
from mesilla.agent.io_switchboard import Servers, requires_server
from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.common.errors import BadRequest, ContainerError, NotFound
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
    names = checkpoints.listdir_ids(standalone_marker_dir(work_dir), checkpoints.validate_container_name)
    return {ContainerID(value=name) for name in names}


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
