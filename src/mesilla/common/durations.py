"""Mesos (stout) durations: ``5secs``, ``100ms``, ``1mins``, ``2hrs``, ``15days``."""

from __future__ import annotations

import re

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "secs": 1.0,
    "mins": 60.0,
    "hrs": 3600.0,
    "days": 86400.0,
    "weeks": 604800.0,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-z]+)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in a stout duration; raises ValueError naming the accepted units."""
    match = _PATTERN.match(text)
    if not match or match.group(2) not in _UNITS:
        raise ValueError(
            f"invalid duration {text!r}: expected a number followed by one of {', '.join(_UNITS)}"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def format_duration(seconds: float) -> str:
    """The largest unit that keeps the value whole-ish, as stout prints durations."""
    for unit in ("weeks", "days", "hrs", "mins", "secs", "ms", "us"):
        size = _UNITS[unit]
        if seconds >= size and abs(seconds / size - round(seconds / size)) < 1e-9:
            return f"{round(seconds / size)}{unit}"
    return f"{seconds:g}secs"
