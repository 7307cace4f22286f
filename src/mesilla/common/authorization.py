"""The local authorizer (Mesos's `src/authorizer/local/authorizer.cpp`, `docs/authorization.md`).

``--acls`` is Mesos's ACLs JSON: ``{"permissive": true, "<action>": [{"principals":
<entity>, "<objects>": <entity>}, ...], ...}``, an entity being ``{"values":
[...]}`` (SOME), ``{"type": "ANY"}`` or ``{"type": "NONE"}``. The ACLs of an
action are tried in order; the first whose subject and object match decides
(Mesos's match and allow matrices); none matching answers ``permissive``
(default true). A request without a principal is the subject ANY, one without
an object the object ANY.

The seed's ``manage_nested_containers`` (principals x users) stands for
``launch_nested_containers_under_parent_with_user``, ``wait_nested_containers``
and ``kill_nested_containers``. An executor's token (a principal with claims
and no value) is not judged here: `mesilla.agent.executor_auth` confines it,
as Mesos's implicit executor rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import web

from mesilla.common.authentication import Principal, principal_of
from mesilla.common.errors import Forbidden
from mesilla.common.flags import Flag, FlagError, Flags

#: Mesos's ACL actions and the name of their object entity.
ACTIONS: dict[str, str] = {
    "register_frameworks": "roles",
    "run_tasks": "users",
    "teardown_frameworks": "framework_principals",
    "view_frameworks": "users",
    "view_tasks": "users",
    "view_executors": "users",
    "view_flags": "flags",
    "view_roles": "roles",
    "access_sandboxes": "users",
    "access_mesos_logs": "logs",
    "update_weights": "roles",
    "get_endpoints": "paths",
    "mark_agents_gone": "agents",
    "launch_nested_containers_as_user": "users",
    "launch_nested_containers_under_parent_with_user": "users",
    "launch_nested_container_sessions_as_user": "users",
    "launch_nested_container_sessions_under_parent_with_user": "users",
    "kill_nested_containers": "users",
    "wait_nested_containers": "users",
    "remove_nested_containers": "users",
    "attach_containers_input": "users",
    "attach_containers_output": "users",
    "view_containers": "users",
    "launch_standalone_containers": "users",
    "kill_standalone_containers": "users",
    "wait_standalone_containers": "users",
    "remove_standalone_containers": "users",
    "view_standalone_containers": "users",
    "prune_images": "images",
}

#: The seed's MANAGE_NESTED_CONTAINER and what it covers.
MANAGE_NESTED_CONTAINERS = (
    "launch_nested_containers_under_parent_with_user",
    "wait_nested_containers",
    "kill_nested_containers",
)


@dataclass(frozen=True)
class Entity:
    type: str  # ANY | NONE | SOME
    values: tuple[str, ...] = ()

    @classmethod
    def parse(cls, doc: object, where: str) -> Entity:
        if doc is None:
            return ANY
        if not isinstance(doc, dict):
            raise FlagError(f"Invalid --acls: {where} is not an entity object")
        values = doc.get("values")
        kind = doc.get("type", "SOME" if values is not None else "ANY")
        if kind not in ("ANY", "NONE", "SOME"):
            raise FlagError(f"Invalid --acls: {where}.type must be ANY, NONE or SOME")
        if kind == "SOME":
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise FlagError(f"Invalid --acls: {where}.values must be a list of strings")
            return cls("SOME", tuple(values))
        return cls(kind)

    def matches(self, request: Entity) -> bool:
        """Mesos's `matches`: `self` is the ACL's entity."""
        if request.type == "NONE":
            return self.type == "NONE"
        if request.type == "ANY":
            return self.type in ("ANY", "NONE")
        return self.type in ("ANY", "NONE") or set(request.values) <= set(self.values)

    def allows(self, request: Entity) -> bool:
        """Mesos's `allows`."""
        if request.type == "NONE":
            return self.type == "NONE"
        if request.type == "ANY":
            return self.type == "ANY"
        if self.type == "ANY":
            return True
        return self.type == "SOME" and set(request.values) <= set(self.values)


ANY = Entity("ANY")


@dataclass(frozen=True)
class Acl:
    principals: Entity
    objects: Entity


class Authorizer:
    def __init__(self, acls: dict[str, list[Acl]], permissive: bool = True) -> None:
        self._acls = acls
        self.permissive = permissive

    @classmethod
    def parse(cls, text: str) -> Authorizer:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise FlagError(f"Invalid --acls: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise FlagError("Invalid --acls: expecting a JSON object")
        permissive = doc.get("permissive", True)
        if not isinstance(permissive, bool):
            raise FlagError("Invalid --acls: 'permissive' must be true or false")
        acls: dict[str, list[Acl]] = {}
        for action, entries in doc.items():
            if action == "permissive":
                continue
            if action != "manage_nested_containers" and action not in ACTIONS:
                raise FlagError(f"Invalid --acls: unknown action '{action}'")
            if not isinstance(entries, list):
                raise FlagError(f"Invalid --acls: '{action}' must be a list of ACLs")
            objects = ACTIONS.get(action, "users")
            parsed = []
            for i, entry in enumerate(entries):
                where = f"'{action}[{i}]'"
                if not isinstance(entry, dict):
                    raise FlagError(f"Invalid --acls: {where} is not an object")
                parsed.append(
                    Acl(
                        Entity.parse(entry.get("principals"), f"{where}.principals"),
                        Entity.parse(entry.get(objects), f"{where}.{objects}"),
                    )
                )
            for name in MANAGE_NESTED_CONTAINERS if action == "manage_nested_containers" else (action,):
                acls.setdefault(name, []).extend(parsed)
        return cls(acls, permissive)

    def authorized(self, principal: Principal | None, action: str, obj: str | None = None) -> bool:
        assert action in ACTIONS, action
        if principal is None:
            subject = ANY
        elif principal.value is None:
            return True  # an executor's token: confined by its own rules
        else:
            subject = Entity("SOME", (principal.value,))
        target = Entity("SOME", (obj,)) if obj is not None else ANY
        for acl in self._acls.get(action, ()):
            if acl.principals.matches(subject) and acl.objects.matches(target):
                return acl.principals.allows(subject) and acl.objects.allows(target)
        return self.permissive

    def require(
        self, principal: Principal | None, action: str, obj: str | None = None, what: str = ""
    ) -> None:
        """Raises 403 with the reason unless `principal` may do `action` on `obj`."""
        if not self.authorized(principal, action, obj):
            who = f"Principal '{principal}'" if principal is not None else "An unauthenticated request"
            target = f" {ACTIONS[action].rstrip('s')} '{obj}'" if obj is not None else ""
            raise Forbidden(f"{who} is not authorized to {action}{target}{what}")

    def all_authorized(self, principal: Principal | None, action: str, objs: Iterable[str]) -> bool:
        return all(self.authorized(principal, action, obj) for obj in objs)


def from_flags(flags: Flags) -> Authorizer | None:
    """The daemon's authorizer: none without --acls (everything allowed, as Mesos)."""
    name = "authorizers" if flags.get("authorizers") is not None else "authorizer"
    names = [n.strip() for n in str(flags.get(name) or "local").split(",") if n.strip()]
    if names != ["local"]:
        raise FlagError(f"Unknown --{name} {','.join(names)}: Mesilla has 'local'")
    text = flags.get("acls")
    return None if text is None else Authorizer.parse(text)


MASTER_FLAGS = [
    Flag(
        "acls",
        "Mesos's ACLs JSON for the local authorizer (inline or file:///path); "
        "unset: everything is allowed.",
    ),
    Flag("authorizers", "The authorizer: Mesilla has 'local'.", "local"),
]

AGENT_FLAGS = [
    MASTER_FLAGS[0],
    Flag("authorizer", "The authorizer: Mesilla has 'local'.", "local"),
]


def require(
    authorizer: Authorizer | None, request: web.Request, action: str, obj: str | None = None
) -> None:
    """403 unless the request's principal may do `action` (nothing without --acls)."""
    if authorizer is not None:
        authorizer.require(principal_of(request), action, obj)
