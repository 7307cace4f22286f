"""Command-line flags in Mesos's style.

``--name=value``, ``--name`` (true) and ``--no-name`` (false) for booleans, and
each flag also from the environment as ``MESILLA_<NAME>`` (command line wins).
Durations use stout's format (``15secs``); a value of ``file:///path`` is read
from that file, as Mesos allows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mesilla.common.durations import format_duration, parse_duration


class FlagError(ValueError):
    """A flag that is unknown, missing or malformed; the message names it."""


@dataclass(frozen=True)
class Flag:
    name: str
    help: str
    default: Any = None
    kind: str = "str"  # str | int | float | bool | duration | list
    required: bool = False

    def parse(self, text: str) -> Any:
        if text.startswith("file://"):
            with open(text[len("file://") :]) as f:
                text = f.read().strip()
        try:
            return _PARSERS[self.kind](text)
        except ValueError as exc:
            raise FlagError(f"Failed to load value '{text}' for flag '{self.name}': {exc}") from None

    def format(self, value: Any) -> str:
        if value is None:
            return ""
        if self.kind == "duration":
            return format_duration(value)
        if self.kind == "bool":
            return "true" if value else "false"
        if self.kind == "list":
            return ",".join(value)
        return str(value)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError("expecting a boolean (true or false)")


_PARSERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": _parse_bool,
    "duration": parse_duration,
    "list": lambda text: [part.strip() for part in text.split(",") if part.strip()],
}


class Flags:
    """Parsed values, readable as attributes (``flags.work_dir``)."""

    def __init__(self, specs: Iterable[Flag], values: dict[str, Any]) -> None:
        self._specs = {spec.name: spec for spec in specs}
        self._values = values

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def set(self, name: str, value: Any) -> None:
        self._values[name] = value

    def as_strings(self) -> dict[str, str]:
        """The flags as Mesos's GET_FLAGS and /flags show them."""
        return {
            name: spec.format(self._values.get(name))
            for name, spec in sorted(self._specs.items())
            if self._values.get(name) is not None
        }

    def to_argv(self, names: Iterable[str] | None = None) -> list[str]:
        chosen = self._specs if names is None else names
        return [
            f"--{name}={self._specs[name].format(self._values[name])}"
            for name in chosen
            if self._values.get(name) is not None
        ]


def parse(
    specs: Sequence[Flag],
    argv: Sequence[str],
    environ: dict[str, str] | None = None,
    *,
    ignore_unknown: bool = False,
) -> Flags:
    environ = dict(os.environ if environ is None else environ)
    by_name = {spec.name: spec for spec in specs}
    values: dict[str, Any] = {spec.name: spec.default for spec in specs}
    given: set[str] = set()

    for spec in specs:
        env = environ.get(f"MESILLA_{spec.name.upper()}")
        if env is not None:
            values[spec.name] = spec.parse(env)
            given.add(spec.name)

    for arg in argv:
        if not arg.startswith("--"):
            raise FlagError(f"Unexpected argument '{arg}': flags look like --name=value")
        name, eq, text = arg[2:].partition("=")
        name = name.replace("-", "_") if name not in by_name else name
        negated = False
        if name not in by_name and name.startswith("no_") and name[3:] in by_name:
            name, negated = name[3:], True
        spec = by_name.get(name)
        if spec is None:
            if ignore_unknown:
                continue
            raise FlagError(f"Unknown flag '--{name}'")
        if not eq:
            if spec.kind != "bool":
                raise FlagError(f"Flag '--{name}' needs a value: --{name}=VALUE")
            values[name] = not negated
        else:
            if negated:
                raise FlagError(f"Flag '--no-{name}' takes no value")
            values[name] = spec.parse(text)
        given.add(name)

    missing = [spec.name for spec in specs if spec.required and spec.name not in given]
    if missing:
        raise FlagError("Missing required flag(s): " + ", ".join(f"--{m}" for m in missing))
    return Flags(specs, values)


def usage(program: str, specs: Sequence[Flag]) -> str:
    lines = [f"Usage: {program} [options]", ""]
    for spec in sorted(specs, key=lambda s: s.name):
        value = "" if spec.kind == "bool" else "=VALUE"
        default = "" if spec.default is None else f" (default: {spec.format(spec.default)})"
        lines.append(f"  --{spec.name}{value}")
        lines.append(f"      {spec.help}{default}")
    return "\n".join(lines)
