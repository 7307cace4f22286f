"""Executor authentication (Mesos's ``--authenticate_http_executors``).

The agent signs one JWT (HS256, the ``--jwt_secret_key`` file) per executor
with the claims ``fid``, ``eid`` and ``cid`` (its framework, executor and
container ids) and hands it to the executor only in its environment as
``MESOS_EXECUTOR_AUTHENTICATION_TOKEN``: never written to the sandbox, a
checkpoint or the runtime directory, nor inherited by debug containers
(`ContainerConfig.executor_secrets`). Executors send it as ``Authorization:
Bearer <token>``; it passes the ``mesos-agent-executor`` realm, and the
``mesos-agent-readwrite`` one where the agent API is authenticated.

The pods design's alternative (its 6.3.4.2) is there too: an executor whose
``ExecutorInfo.principal`` is in the agent's ``--http_credentials`` gets that
principal and its secret as ``MESOS_EXECUTOR_PRINCIPAL`` and
``MESOS_EXECUTOR_SECRET``, in its environment only, and Mesilla's executors
then send them as Basic credentials (an ordinary principal, judged by the
ACLs). A token, where there is one, goes first.

A token authenticates while its executor lives: the executor its claims name
must be known to the agent, not terminated, and in the container ``cid``.
What it may do is confined, as Mesos's implicit executor rules, and also when
no authorizer is loaded:

* on the executor API, calls whose framework and executor are its own;
* on the agent API, the container calls on containers nested under its own
  (the root of the container id is ``cid``): launch, wait, kill, remove,
  sessions, attach; and LIST_FILES/READ_FILE inside its own sandbox. Anything
  else is 403.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from aiohttp import web

from mesilla.common.authentication import Principal, principal_of
from mesilla.common.errors import Forbidden
from mesilla.common.flags import FlagError, Flags
from mesilla.v1 import agent as api
from mesilla.v1.mesos import ContainerID

ENV = "MESOS_EXECUTOR_AUTHENTICATION_TOKEN"
#: The pods design's executor principal (`ExecutorInfo.principal`): its credentials.
PRINCIPAL_ENV, SECRET_ENV = "MESOS_EXECUTOR_PRINCIPAL", "MESOS_EXECUTOR_SECRET"
CLAIMS = ("fid", "eid", "cid")

#: The calls a token may make on the agent API, and the field naming their container.
_CONTAINER_CALLS = {
    api.CallType.LAUNCH_NESTED_CONTAINER: "launch_nested_container",
    api.CallType.WAIT_NESTED_CONTAINER: "wait_nested_container",
    api.CallType.KILL_NESTED_CONTAINER: "kill_nested_container",
    api.CallType.REMOVE_NESTED_CONTAINER: "remove_nested_container",
    api.CallType.LAUNCH_NESTED_CONTAINER_SESSION: "launch_nested_container_session",
    api.CallType.LAUNCH_CONTAINER: "launch_container",
    api.CallType.WAIT_CONTAINER: "wait_container",
    api.CallType.KILL_CONTAINER: "kill_container",
    api.CallType.REMOVE_CONTAINER: "remove_container",
    api.CallType.ATTACH_CONTAINER_OUTPUT: "attach_container_output",
    api.CallType.ATTACH_CONTAINER_INPUT: "attach_container_input",
}

#: (fid, eid, cid) -> whether that executor is alive in that container.
Liveness = Callable[[str, str, str], bool]


class ExecutorTokens:
    """Signs executors' tokens and authenticates them (the ``jwt`` authenticator)."""

    scheme = "Bearer"

    def __init__(self, key: bytes) -> None:
        self._key = key
        self.live: Liveness = lambda fid, eid, cid: False  # bound to the agent's executors

    @classmethod
    def from_flags(cls, flags: Flags) -> ExecutorTokens | None:
        if not flags.get("authenticate_http_executors"):
            return None
        path = flags.get("jwt_secret_key")
        if path is None:
            raise FlagError("--jwt_secret_key must be specified when --authenticate_http_executors is set")
        try:
            with open(path, "rb") as f:
                key = f.read()
        except OSError as exc:
            raise FlagError(f"Cannot read --jwt_secret_key '{path}': {exc.strerror}") from None
        if not key:
            raise FlagError(f"--jwt_secret_key '{path}' is empty")
        return cls(key)

    def sign(self, framework_id: str, executor_id: str, container_id: str) -> str:
        import jwt  # here, not at the top: with cryptography it costs every agent's start ~0.1 s

        claims = {"fid": framework_id, "eid": executor_id, "cid": container_id}
        return jwt.encode(claims, self._key, algorithm="HS256")

    def authenticate(self, request: web.Request) -> Principal | str:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return "Missing 'Authorization: Bearer' executor token"
        import jwt

        try:
            claims = jwt.decode(token.strip(), self._key, algorithms=["HS256"])
        except jwt.InvalidTokenError:
            return "Invalid executor token"
        if not all(isinstance(claims.get(name), str) for name in CLAIMS):
            return "Invalid executor token: expecting the claims 'fid', 'eid' and 'cid'"
        if not self.live(claims["fid"], claims["eid"], claims["cid"]):
            return "The executor of this token has ended"
        return Principal(None, {name: claims[name] for name in CLAIMS})


def executor_credentials(
    principal: str | None, credentials: dict[str, str]
) -> dict[str, str]:
    """The environment that carries `principal`'s credentials to its executor."""
    if principal is None or principal not in credentials:
        return {}
    return {PRINCIPAL_ENV: principal, SECRET_ENV: credentials[principal]}


def _claims(request: web.Request) -> dict[str, str] | None:
    principal = principal_of(request)
    if principal is None or principal.value is not None:
        return None
    return dict(principal.claims)


def check_executor_call(
    request: web.Request, framework_id: str, executor_id: str, container_id: str
) -> None:
    """Mesos's `verifyExecutorClaims`: a token acts for its own executor only."""
    claims = _claims(request)
    if claims is None:
        return
    for name, value, what in (
        ("fid", framework_id, f"the framework ID {framework_id}, which is set in the call"),
        ("eid", executor_id, f"the executor ID {executor_id}, which is set in the call"),
        ("cid", container_id, "the correct active ContainerID"),
    ):
        if claims.get(name) != value:
            raise Forbidden(
                f"Authenticated principal '{principal_of(request)}' does not contain "
                f"an '{name}' claim with {what}"
            )


def check_container(request: web.Request, container_id: ContainerID) -> None:
    """A token's calls reach only the containers nested under its executor's."""
    claims = _claims(request)
    if claims is None:
        return
    if container_id.parent is None or container_id.root().value != claims["cid"]:
        raise Forbidden(
            f"An executor's token may only act on containers nested under its own "
            f"({claims['cid']}), not {container_id}"
        )


def check_agent_call(
    request: web.Request, call: api.Call, sandbox_of: Callable[[str, str], str | None],
    resolve: Callable[[str], str],
) -> None:
    """The agent API calls a token may make; `sandbox_of(fid, eid)` is the executor's
    sandbox (None once gone), `resolve` a files path's real path."""
    claims = _claims(request)
    if claims is None:
        return
    field = _CONTAINER_CALLS.get(call.type)
    if field is not None:
        part: Any = getattr(call, field)
        container_id = getattr(part, "container_id", None)
        if container_id is not None:
            check_container(request, container_id)
        return
    if call.type in (api.CallType.LIST_FILES, api.CallType.READ_FILE):
        part = call.list_files if call.type is api.CallType.LIST_FILES else call.read_file
        sandbox = sandbox_of(claims["fid"], claims["eid"])
        path = getattr(part, "path", None)
        if sandbox is not None and isinstance(path, str):
            real, root = os.path.realpath(resolve(path)), os.path.realpath(sandbox)
            if real == root or real.startswith(root + os.sep):
                return
        raise Forbidden("An executor's token may only read its own sandbox")
    raise Forbidden(f"An executor's token may not make {call.type.value} calls")
