"""The agent's authorization points (--acls): container calls, sandboxes, flags, views.

The object of a container ACL is a user, as Mesos's: for a call on a nested
container the user of the executor its tree belongs to (its command's user,
else its framework's), for what a new container runs as its command's user
(else that executor's); a standalone container's is its command's user.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aiohttp import web

from mesilla.common.authentication import principal_of
from mesilla.common.authorization import require
from mesilla.common.visibility import Viewer
from mesilla.v1 import agent as api
from mesilla.v1.mesos import ContainerID

if TYPE_CHECKING:
    from mesilla.agent.agent import Agent
    from mesilla.agent.state import Executor, Framework

#: Container calls: (the call's field, the action on nested containers, on standalone ones).
_CONTAINER_ACTIONS: dict[api.CallType, tuple[str, str, str]] = {
    api.CallType.LAUNCH_NESTED_CONTAINER: (
        "launch_nested_container", "launch_nested_containers_under_parent_with_user", ""),
    api.CallType.LAUNCH_CONTAINER: (
        "launch_container", "launch_nested_containers_under_parent_with_user",
        "launch_standalone_containers"),
    api.CallType.LAUNCH_NESTED_CONTAINER_SESSION: (
        "launch_nested_container_session",
        "launch_nested_container_sessions_under_parent_with_user", ""),
    api.CallType.WAIT_NESTED_CONTAINER: ("wait_nested_container", "wait_nested_containers", ""),
    api.CallType.WAIT_CONTAINER: (
        "wait_container", "wait_nested_containers", "wait_standalone_containers"),
    api.CallType.KILL_NESTED_CONTAINER: ("kill_nested_container", "kill_nested_containers", ""),
    api.CallType.KILL_CONTAINER: (
        "kill_container", "kill_nested_containers", "kill_standalone_containers"),
    api.CallType.REMOVE_NESTED_CONTAINER: (
        "remove_nested_container", "remove_nested_containers", ""),
    api.CallType.REMOVE_CONTAINER: (
        "remove_container", "remove_nested_containers", "remove_standalone_containers"),
    api.CallType.ATTACH_CONTAINER_OUTPUT: (
        "attach_container_output", "attach_containers_output", "attach_containers_output"),
}

_AS_USER = {
    "launch_nested_containers_under_parent_with_user": "launch_nested_containers_as_user",
    "launch_nested_container_sessions_under_parent_with_user":
        "launch_nested_container_sessions_as_user",
}


def _user_of(framework: Framework, executor: Executor) -> str | None:
    command = executor.info.command
    return (command.user if command is not None else None) or framework.info.user or None


def _frameworks(agent: Agent) -> list[Framework]:
    return [*agent.completed_frameworks, *agent.frameworks.values()]


def viewer(agent: Agent, request: web.Request) -> Viewer | None:
    if agent.authorizer is None:
        return None
    frameworks = _frameworks(agent)
    users = {f.id.value: f.info.user for f in frameworks}
    executors = {
        (f.id.value, e.id): user
        for f in frameworks
        for e in f.executors.values()
        if (user := _user_of(f, e)) is not None
    }
    return Viewer(agent.authorizer, principal_of(request), users, executors)


def container_user(agent: Agent, container_id: ContainerID) -> str | None:
    """The user of the executor whose tree `container_id` is in (None: standalone)."""
    root = container_id.root().value
    for framework in agent.frameworks.values():
        for executor in framework.executors.values():
            if executor.container_id.value == root:
                return _user_of(framework, executor)
    return None


def sandbox_user(agent: Agent, real_path: str) -> str | None:
    for framework in _frameworks(agent):
        for executor in framework.executors.values():
            root = os.path.realpath(executor.directory)
            if real_path == root or real_path.startswith(root + os.sep):
                return _user_of(framework, executor)
    return None


def check_sandbox(agent: Agent, request: web.Request, path: str) -> None:
    """access_sandboxes, for a /files or LIST_FILES/READ_FILE path (`Agent.files` asks)."""
    if agent.authorizer is not None:
        user = sandbox_user(agent, os.path.realpath(agent.files.resolve(path)))
        require(agent.authorizer, request, "access_sandboxes", user)


def check_container(agent: Agent, request: web.Request, action: str, container_id: ContainerID) -> None:
    require(agent.authorizer, request, action, container_user(agent, container_id))


def check_call(agent: Agent, request: web.Request, call: api.Call) -> None:
    """403 unless the call's principal may make it; the read calls filter instead."""
    authorizer = agent.authorizer
    if authorizer is None:
        return
    t = call.type
    if t is api.CallType.GET_FLAGS:
        require(authorizer, request, "view_flags")
    elif t is api.CallType.PRUNE_IMAGES:
        require(authorizer, request, "prune_images")
    elif t in _CONTAINER_ACTIONS:
        field, nested, standalone = _CONTAINER_ACTIONS[t]
        part: Any = getattr(call, field)
        container_id = getattr(part, "container_id", None)
        if container_id is None:
            return  # the handler answers 400
        if container_id.parent is None and standalone:
            command = getattr(part, "command", None)
            require(authorizer, request, standalone, command.user if command is not None else None)
            return
        check_container(agent, request, nested, container_id)
        as_user = _AS_USER.get(nested)
        command = getattr(part, "command", None)
        if as_user is not None and command is not None:
            user = command.user or container_user(agent, container_id)
            require(authorizer, request, as_user, user)
