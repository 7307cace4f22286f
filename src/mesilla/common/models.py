"""The v0 JSON models of what both daemons' `/state` endpoints show (Mesos's
`common/http.cpp`): tasks, their statuses, resources, attributes and labels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from mesilla.common.resources import Resources
from mesilla.v1.mesos import (
    Attribute,
    Labels,
    Ranges,
    Resource,
    Task,
    TaskStatus,
    ValueSet,
    ValueType,
)


def resources_json(resources: Resources | Iterable[Resource]) -> dict[str, object]:
    if isinstance(resources, Resources):
        return resources.to_json_summary()
    return Resources.from_list(resources).to_json_summary()


def _value_text(kind: ValueType, ranges: Ranges | None, items: ValueSet | None) -> str:
    if kind is ValueType.RANGES:
        return "[" + ", ".join(f"{r.begin}-{r.end}" for r in (ranges.range if ranges else [])) + "]"
    return "{" + ", ".join(items.item if items else []) + "}"


def attributes_json(attributes: list[Attribute]) -> dict[str, object]:
    out: dict[str, object] = {}
    for a in attributes:
        if a.type is ValueType.SCALAR and a.scalar is not None:
            out[a.name] = a.scalar.value
        elif a.type is ValueType.TEXT and a.text is not None:
            out[a.name] = a.text.value
        elif a.type in (ValueType.RANGES, ValueType.SET):
            out[a.name] = _value_text(a.type, a.ranges, a.set)
    return out


def labels_json(labels: Labels) -> list[Any]:
    out: list[Any] = msgspec.to_builtins(labels.labels)
    return out


def status_json(status: TaskStatus) -> dict[str, object]:
    out: dict[str, object] = {"state": status.state.value, "timestamp": status.timestamp or 0.0}
    if status.labels is not None:
        out["labels"] = labels_json(status.labels)
    if status.container_status is not None:
        container = msgspec.to_builtins(status.container_status)
        container.pop("executor_pid", None)  # not in Mesos's v0 model
        out["container_status"] = container
    if status.healthy is not None:
        out["healthy"] = status.healthy
    return out


def task_json(task: Task) -> dict[str, object]:
    role = next((r.allocation_info.role for r in task.resources if r.allocation_info), None)
    out: dict[str, object] = {
        "id": task.task_id.value,
        "name": task.name,
        "framework_id": task.framework_id.value,
        "executor_id": task.executor_id.value if task.executor_id else "",
        "slave_id": task.agent_id.value,
        "state": task.state.value,
        "resources": resources_json(task.resources),
        "role": role or "",
        "statuses": [status_json(s) for s in task.statuses],
    }
    if task.limits:
        out["limits"] = task.limits
    if task.user is not None:
        out["user"] = task.user
    if task.labels is not None:
        out["labels"] = labels_json(task.labels)
    for name in ("discovery", "container", "health_check"):
        value = getattr(task, name)
        if value is not None:
            out[name] = msgspec.to_builtins(value)
    return out
