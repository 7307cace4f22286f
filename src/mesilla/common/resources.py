"""Resources as Mesos models them: scalars, ranges and sets, per role.

Scalars are kept as whole thousandths, as Mesos's fixed-point arithmetic does
(`src/common/values.cpp`), so that adding and subtracting offers never drifts.
A `Resources` value is immutable; `+` and `-` return new values.

The agent resource string format: ``cpus:2;mem:1024;ports:[31000-32000];
disk(role):100;zones:{a,b}``, or the same as a JSON list of `Resource`s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import msgspec

from mesilla.v1.mesos import (
    AllocationInfo,
    Range,
    Ranges,
    ReservationInfo,
    Resource,
    Scalar,
    ValueSet,
    ValueType,
)

UNRESERVED = "*"

# What a DEFAULT executor gets when its ExecutorInfo leaves `cpus` or `mem` out
# (the seed's ExecutorInfo.Type notes); schedulers must account for it in offers.
DEFAULT_EXECUTOR_CPUS = 0.1
DEFAULT_EXECUTOR_MEM_MB = 32.0
_SCALE = 1000


class ResourcesError(ValueError):
    """Malformed or inconsistent resources; the message names the resource."""


def to_fixed(value: float) -> int:
    return round(value * _SCALE)


def from_fixed(value: int) -> float:
    return value / _SCALE


# --- value types ---------------------------------------------------------------


def parse_ranges(text: str, what: str) -> list[tuple[int, int]]:
    """Mesos's text form of ranges, ``[31000-32000,5]``, as (begin, end) pairs; raises
    ValueError naming `what` (e.g. "'ports'") and the part that is not a range."""
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"invalid ranges for {what}: {text}")
    ranges = []
    for item in filter(None, (x.strip() for x in text[1:-1].split(","))):
        begin, _, end = item.partition("-")
        try:
            ranges.append((int(begin), int(end or begin)))
        except ValueError:
            raise ValueError(f"invalid range '{item}' for {what}") from None
    return ranges


def _normalize_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[list[int]] = []
    for begin, end in sorted(ranges):
        if begin > end:
            raise ResourcesError(f"invalid range [{begin}-{end}]: begin is after end")
        if merged and begin <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return tuple((b, e) for b, e in merged)


def _subtract_ranges(
    left: tuple[tuple[int, int], ...], right: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ...]:
    result = list(left)
    for rb, re_ in right:
        nxt = []
        for b, e in result:
            if re_ < b or rb > e:
                nxt.append((b, e))
                continue
            if b < rb:
                nxt.append((b, rb - 1))
            if e > re_:
                nxt.append((re_ + 1, e))
        result = nxt
    return tuple(result)


def _ranges_contain(outer: tuple[tuple[int, int], ...], inner: tuple[tuple[int, int], ...]) -> bool:
    return not _subtract_ranges(inner, outer)


# A key's kind decides its value's type (SCALAR: fixed-point int, RANGES: the
# merged ranges, SET: the items); code narrows on the value's type, which says
# the same and lets the type checker follow.
Value = int | tuple[tuple[int, int], ...] | frozenset[str]


@dataclass(frozen=True, eq=False)
class _Key:
    """Interned (always made by `_key`), so dict lookups hash and compare by identity:
    the allocator does tens of thousands of `Resources` operations per cycle."""

    name: str
    role: str  # "*" for unreserved
    kind: ValueType

    # Copies and unpickled keys must be the interned instance too.
    def __copy__(self) -> _Key:
        return self

    def __deepcopy__(self, _memo: object) -> _Key:
        return self

    def __reduce__(self) -> tuple[object, tuple[str, str, ValueType]]:
        return (_key, (self.name, self.role, self.kind))


_KEYS: dict[tuple[str, str, ValueType], _Key] = {}


def _key(name: str, role: str, kind: ValueType) -> _Key:
    key = _KEYS.get((name, role, kind))
    if key is None:
        key = _KEYS.setdefault((name, role, kind), _Key(name, role, kind))
    return key


def _merge(items: dict[_Key, Value], key: _Key, value: Value) -> None:
    """Adds one resource's value into `items` (in place)."""
    mine = items.get(key)
    if mine is None:
        items[key] = value
    elif isinstance(mine, int) and isinstance(value, int):
        items[key] = mine + value
    elif isinstance(mine, tuple) and isinstance(value, tuple):
        items[key] = _normalize_ranges(mine + value)
    elif isinstance(mine, frozenset) and isinstance(value, frozenset):
        items[key] = mine | value


class Resources:
    __slots__ = ("_items",)

    def __init__(self, items: dict[_Key, Value] | None = None) -> None:
        self._items: dict[_Key, Value] = {k: v for k, v in (items or {}).items() if v}

    # -- construction --

    @classmethod
    def from_list(cls, resources: Iterable[Resource]) -> Resources:
        # Summed in one dict: the master converts every offer, task and agent this way.
        items: dict[_Key, Value] = {}
        for resource in resources:
            key, value = cls._from_one(resource)
            _merge(items, key, value)
        return cls(items)

    @classmethod
    def sum(cls, values: Iterable[Resources]) -> Resources:
        """The total of many values, added up in place rather than one new value per `+`."""
        items: dict[_Key, Value] = {}
        for resources in values:
            for key, value in resources._items.items():
                _merge(items, key, value)
        return cls(items)

    @staticmethod
    def _from_one(r: Resource) -> tuple[_Key, Value]:
        if not r.name:
            raise ResourcesError("resource without a name")
        role = UNRESERVED
        if r.reservations:
            role = r.reservations[-1].role or UNRESERVED
        elif r.role:
            role = r.role
        key = _key(r.name, role, r.type)
        value: Value
        if r.type is ValueType.SCALAR:
            if r.scalar is None:
                raise ResourcesError(f"scalar resource '{r.name}' has no 'scalar' value")
            if r.scalar.value < 0:
                raise ResourcesError(f"resource '{r.name}' is negative: {r.scalar.value}")
            value = to_fixed(r.scalar.value)
        elif r.type is ValueType.RANGES:
            if r.ranges is None:
                raise ResourcesError(f"ranges resource '{r.name}' has no 'ranges' value")
            value = _normalize_ranges((x.begin, x.end) for x in r.ranges.range)
        elif r.type is ValueType.SET:
            if r.set is None:
                raise ResourcesError(f"set resource '{r.name}' has no 'set' value")
            value = frozenset(r.set.item)
        else:
            raise ResourcesError(f"resource '{r.name}' has unsupported type {r.type.value}")
        return key, value

    @classmethod
    def parse(cls, text: str, default_role: str = UNRESERVED) -> Resources:
        """The agent's `--resources`: the `name(role):value;...` string or a JSON list."""
        text = text.strip()
        if text.startswith("["):
            try:
                return cls.from_list(msgspec.json.decode(text, type=list[Resource]))
            except msgspec.MsgspecError as exc:
                raise ResourcesError(f"invalid JSON resources: {exc}") from None
        result = cls()
        for part in filter(None, (p.strip() for p in text.split(";"))):
            match = re.fullmatch(r"([A-Za-z0-9_./-]+)(?:\(([^)]*)\))?\s*:\s*(.+)", part)
            if not match:
                raise ResourcesError(f"invalid resource '{part}': expected name(role):value")
            name, role, value = match.group(1), match.group(2) or default_role, match.group(3).strip()
            result = result + cls._parse_value(name, role, value)
        return result

    @classmethod
    def _parse_value(cls, name: str, role: str, text: str) -> Resources:
        if text.startswith("["):
            try:
                ranges = parse_ranges(text, f"'{name}'")
            except ValueError as exc:
                raise ResourcesError(str(exc)) from None
            return cls({_key(name, role, ValueType.RANGES): _normalize_ranges(ranges)})
        if text.startswith("{"):
            if not text.endswith("}"):
                raise ResourcesError(f"invalid set for '{name}': {text}")
            items = frozenset(x.strip() for x in text[1:-1].split(",") if x.strip())
            return cls({_key(name, role, ValueType.SET): items})
        try:
            number = float(text)
        except ValueError:
            raise ResourcesError(f"invalid scalar '{text}' for '{name}'") from None
        if number < 0:
            raise ResourcesError(f"resource '{name}' is negative: {text}")
        return cls({_key(name, role, ValueType.SCALAR): to_fixed(number)})

    # -- queries --

    def __bool__(self) -> bool:
        return bool(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Resources) and self._items == other._items

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __iter__(self) -> Iterator[tuple[str, str, Value]]:
        for key, value in self._items.items():
            yield key.name, key.role, value

    def scalar(self, name: str) -> float:
        """The total of a scalar resource across roles."""
        return from_fixed(self.scalar_fixed(name))

    def scalar_fixed(self, name: str) -> int:
        return sum(v for k, v in self._items.items() if k.name == name and isinstance(v, int))

    def names(self) -> set[str]:
        return {k.name for k in self._items}

    def roles(self) -> set[str]:
        return {k.role for k in self._items}

    def reserved(self, role: str) -> Resources:
        return Resources({k: v for k, v in self._items.items() if k.role == role})

    def unreserved(self) -> Resources:
        return self.reserved(UNRESERVED)

    def allocatable_to(self, role: str) -> Resources:
        """Unreserved resources plus those reserved to `role` (or an ancestor role)."""
        return Resources(
            {
                k: v
                for k, v in self._items.items()
                if k.role == UNRESERVED or k.role == role or role.startswith(k.role + "/")
            }
        )

    def contains(self, other: Resources) -> bool:
        for key, value in other._items.items():
            mine = self._items.get(key)
            if mine is None:
                return False
            if isinstance(mine, int) and isinstance(value, int):
                if mine < value:
                    return False
            elif isinstance(mine, tuple) and isinstance(value, tuple):
                if not _ranges_contain(mine, value):
                    return False
            elif isinstance(mine, frozenset) and isinstance(value, frozenset):
                if not value <= mine:
                    return False
        return True

    # -- arithmetic --

    def __add__(self, other: Resources) -> Resources:
        items = dict(self._items)
        for key, value in other._items.items():
            _merge(items, key, value)
        return Resources(items)

    def __sub__(self, other: Resources) -> Resources:
        items = dict(self._items)
        for key, value in other._items.items():
            mine = items.get(key)
            if mine is None:
                continue
            if isinstance(mine, int) and isinstance(value, int):
                items[key] = max(0, mine - value)
            elif isinstance(mine, tuple) and isinstance(value, tuple):
                items[key] = _subtract_ranges(mine, value)
            elif isinstance(mine, frozenset) and isinstance(value, frozenset):
                items[key] = mine - value
        return Resources(items)

    # -- output --

    def to_list(self, allocation_role: str | None = None) -> list[Resource]:
        """As v1 `Resource`s; `allocation_role` stamps `allocation_info` as offers carry it."""
        out = []
        for key in sorted(self._items, key=lambda k: (k.name, k.role)):
            value = self._items[key]
            resource = Resource(name=key.name, type=key.kind, role=key.role)
            if isinstance(value, int):
                resource.scalar = Scalar(value=from_fixed(value))
            elif isinstance(value, tuple):
                resource.ranges = Ranges(range=[Range(begin=b, end=e) for b, e in value])
            else:
                resource.set = ValueSet(item=sorted(value))
            if key.role != UNRESERVED:
                resource.reservations = [ReservationInfo(type="STATIC", role=key.role)]
            if allocation_role is not None:
                resource.allocation_info = AllocationInfo(role=allocation_role)
            out.append(resource)
        return out

    def to_json_summary(self) -> dict[str, object]:
        """Mesos's `/state` style: ``{"cpus": 2.0, "mem": 1024.0, "ports": "[31000-32000]"}``."""
        summary: dict[str, object] = {}
        for key in sorted(self._items, key=lambda k: k.name):
            value = self._items[key]
            if isinstance(value, int):
                total = summary.get(key.name, 0.0)
                assert isinstance(total, float)  # only scalars add up under one name
                summary[key.name] = total + from_fixed(value)
            elif isinstance(value, tuple):
                summary[key.name] = "[" + ", ".join(f"{b}-{e}" for b, e in value) + "]"
            else:
                summary[key.name] = "{" + ", ".join(sorted(value)) + "}"
        for name in ("cpus", "mem", "disk", "gpus"):
            summary.setdefault(name, 0.0)
        return summary

    def __repr__(self) -> str:
        parts = []
        for key in sorted(self._items, key=lambda k: (k.name, k.role)):
            value = self._items[key]
            role = "" if key.role == UNRESERVED else f"({key.role})"
            if isinstance(value, int):
                text = f"{from_fixed(value):g}"
            elif isinstance(value, tuple):
                text = "[" + ",".join(f"{b}-{e}" for b, e in value) + "]"
            else:
                text = "{" + ",".join(sorted(value)) + "}"
            parts.append(f"{key.name}{role}:{text}")
        return ";".join(parts)


def with_default_executor_resources(
    resources: list[Resource], allocation_role: str | None = None
) -> list[Resource]:
    """A DEFAULT executor's `resources`, plus the default `cpus` and `mem` it left out.

    The added scalars are reserved and allocated like the executor's other
    resources (else unreserved, allocated to `allocation_role`).
    """
    names = {r.name for r in resources}
    model = resources[0] if resources else None
    allocation = (
        model.allocation_info
        if model is not None
        else (AllocationInfo(role=allocation_role) if allocation_role is not None else None)
    )
    added = [
        Resource(
            name=name,
            type=ValueType.SCALAR,
            scalar=Scalar(value=value),
            role=model.role if model is not None else None,
            allocation_info=allocation,
            reservations=list(model.reservations) if model is not None else [],
        )
        for name, value in (("cpus", DEFAULT_EXECUTOR_CPUS), ("mem", DEFAULT_EXECUTOR_MEM_MB))
        if name not in names
    ]
    return [*resources, *added] if added else resources
