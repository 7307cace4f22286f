"""Command-line flags in Mesos's style.

``--name=value``, ``--name`` (true) and ``--no-name`` (false) for booleans, and
each flag also from the environment as ``MESILLA_<NAME>`` or, as Mesos reads
it, ``MESOS_<NAME>`` (the command line wins, then MESILLA_). Durations use
stout's format (``15secs``); a value of ``file:///path`` is read from that
file, as Mesos allows.

A daemon may also name `accepted` flags, Mesos's that it does not implement:
they parse (as strings) and land in `Flags.without_effect` for one warning,
and `aliases`, Mesos's deprecated names for current flags.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mesilla.common.durations import format_duration, parse_duration
from mesilla.common.errors import ConfigurationError


class FlagError(ConfigurationError, ValueError):
    """A flag that is unknown, missing or malformed; the message names it."""


@dataclass(frozen=True)
class Flag:
    name: str
    help: str
    default: Any = None
    kind: str = "str"  # str | int | float | bool | duration | list | path
    required: bool = False

    def parse(self, text: str) -> Any:
        if self.kind == "path":
            # A file the daemon reads itself (credentials, keys): /flags shows its path.
            return text[len("file://") :] if text.startswith("file://") else text
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
        if self.kind == "path" and str(value).lstrip().startswith("{"):
            return "(inline, not shown)"  # it may hold secrets
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

    def __init__(
        self,
        specs: Iterable[Flag],
        values: dict[str, Any],
        without_effect: Mapping[str, str] | None = None,
    ) -> None:
        self._specs = {spec.name: spec for spec in specs}
        self._values = values
        #: Mesos flags given that Mesilla does not implement, with their text, by name.
        self.without_effect = dict(sorted((without_effect or {}).items()))

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


ENV_PREFIXES = ("MESILLA_", "MESOS_")  # the first found wins


def parse(
    specs: Sequence[Flag],
    argv: Sequence[str],
    environ: dict[str, str] | None = None,
    *,
    ignore_unknown: bool = False,
    accepted: Collection[str] = (),
    aliases: Mapping[str, str] | None = None,
) -> Flags:
    environ = dict(os.environ if environ is None else environ)
    aliases = aliases or {}
    by_name = {spec.name: spec for spec in specs}
    values: dict[str, Any] = {spec.name: spec.default for spec in specs}
    given: set[str] = set()
    without_effect: dict[str, str] = {}

    def canonical(name: str) -> str:
        name = name if name in by_name else name.replace("-", "_")
        return aliases.get(name, name)

    for name in [*by_name, *accepted]:
        env = next((environ[p + name.upper()] for p in ENV_PREFIXES if p + name.upper() in environ), None)
        if env is None:
            continue
        if name in by_name:
            values[name] = by_name[name].parse(env)
            given.add(name)
        else:
            without_effect[name] = env

    for arg in argv:
        if not arg.startswith("--"):
            raise FlagError(f"Unexpected argument '{arg}': flags look like --name=value")
        raw, eq, text = arg[2:].partition("=")
        name = canonical(raw)
        negated = False
        if name not in by_name and name.startswith("no_"):
            bare = canonical(name[3:])
            if bare in by_name or bare in accepted:
                name, negated = bare, True
        spec = by_name.get(name)
        if spec is None:
            if name in accepted:
                without_effect[name] = text if eq else str(not negated).lower()
                continue
            if ignore_unknown:
                continue
            raise FlagError(_unknown(name, [*by_name, *accepted]))
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
    return Flags(specs, values, without_effect)


def _unknown(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(f'--{c}' for c in close)}?" if close else ""
    return f"Unknown flag '--{name}'{hint} (known: {', '.join(sorted(known))})"


def usage(program: str, specs: Sequence[Flag]) -> str:
    lines = [f"Usage: {program} [options]", ""]
    for spec in sorted(specs, key=lambda s: s.name):
        value = "" if spec.kind == "bool" else "=VALUE"
        default = "" if spec.default is None else f" (default: {spec.format(spec.default)})"
        lines.append(f"  --{spec.name}{value}")
        lines.append(f"      {spec.help}{default}")
    return "\n".join(lines)
