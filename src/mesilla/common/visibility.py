"""What a principal may see of a state document (Mesos's view ACLs), for master and agent.

Read endpoints and calls (``/state``, ``/tasks``, ``/frameworks``, GET_STATE,
GET_TASKS, GET_FRAMEWORKS, GET_EXECUTORS, GET_CONTAINERS, the operator event
stream) do not fail for what the principal may not see: those items are left
out, as Mesos's. The documents are the JSON the endpoints answer, v0 or v1;
their lists are known by name (``tasks``, ``completed_tasks``, ...,
``frameworks``, ``executors``, ``containers``), and the user each item is
judged by is the task's ``user`` or, failing that, its framework's; the
executor's command user or its framework's; the framework's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from mesilla.common.authentication import Principal
from mesilla.common.authorization import Authorizer
from mesilla.v1 import codec

TASK_LISTS = frozenset({
    "tasks", "pending_tasks", "queued_tasks", "launched_tasks", "terminated_tasks",
    "completed_tasks", "unreachable_tasks", "orphan_tasks",
})
FRAMEWORK_LISTS = frozenset({"frameworks", "completed_frameworks", "unregistered_frameworks"})
EXECUTOR_LISTS = frozenset({"executors", "completed_executors", "orphan_executors"})
CONTAINER_LISTS = frozenset({"containers"})


def _id(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("value")
    return value if isinstance(value, str) else None


class Viewer:
    """One principal's view; `framework_users` maps framework ids to their users."""

    def __init__(
        self,
        authorizer: Authorizer,
        principal: Principal | None,
        framework_users: Mapping[str, str],
        executor_users: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        self._authorizer = authorizer
        self._principal = principal
        self._framework_users = framework_users
        self._executor_users = executor_users or {}
        self._cache: dict[tuple[str, str | None], bool] = {}

    def sees(self, action: str, user: str | None) -> bool:
        key = (action, user)
        if key not in self._cache:
            self._cache[key] = self._authorizer.authorized(self._principal, action, user)
        return self._cache[key]

    def _framework_user(self, framework_id: Any) -> str | None:
        fid = _id(framework_id)
        return self._framework_users.get(fid) if fid is not None else None

    def framework(self, item: dict[str, Any]) -> bool:
        info = item.get("framework_info", item)
        return self.sees("view_frameworks", info.get("user") if isinstance(info, dict) else None)

    def task(self, item: dict[str, Any]) -> bool:
        user = item.get("user") or self._framework_user(item.get("framework_id"))
        return self.sees("view_tasks", user)

    def executor(self, item: dict[str, Any]) -> bool:
        info = item.get("executor_info", item)
        if not isinstance(info, dict):
            return self.sees("view_executors", None)
        command = info.get("command")
        user = command.get("user") if isinstance(command, dict) else None
        fid = info.get("framework_id") or item.get("framework_id")
        return self.sees("view_executors", user or self._framework_user(fid))

    def container(self, item: dict[str, Any]) -> bool:
        fid, eid = _id(item.get("framework_id")), _id(item.get("executor_id"))
        user = None
        if fid is not None:
            user = self._executor_users.get((fid, eid or "")) or self._framework_users.get(fid)
        return self.sees("view_containers", user)

    def filter(self, node: Any) -> Any:
        """`node` (decoded JSON) without what this principal may not see."""
        if isinstance(node, list):
            return [self.filter(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if isinstance(value, list):
                keep = self._judge(key)
                value = [self.filter(item) for item in value if not isinstance(item, dict) or keep(item)]
            elif isinstance(value, dict):
                value = self.filter(value)
            out[key] = value
        return out

    def _judge(self, key: str) -> Any:
        if key in TASK_LISTS:
            return self.task
        if key in FRAMEWORK_LISTS:
            return self.framework
        if key in EXECUTOR_LISTS:
            return self.executor
        if key in CONTAINER_LISTS:
            return self.container
        return lambda _item: True

    def event(self, event: dict[str, Any]) -> bool:
        """Whether an operator API event goes to this principal."""
        kind = event.get("type")
        if kind == "TASK_ADDED":
            return self.task(event.get("task_added", {}).get("task", {}))
        if kind == "TASK_UPDATED":
            update = event.get("task_updated", {})
            return self.task({"framework_id": update.get("framework_id")})
        if kind in ("FRAMEWORK_ADDED", "FRAMEWORK_UPDATED"):
            return self.framework(event.get(kind.lower(), {}).get("framework", {}))
        if kind == "FRAMEWORK_REMOVED":
            return self.framework(event.get("framework_removed", {}))
        return True

    def encode(self, document: Any) -> bytes:
        """The JSON of `document` (anything msgspec encodes), filtered."""
        return msgspec.json.encode(self.filter(msgspec.json.decode(codec.encode(document))))
