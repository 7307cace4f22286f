"""What this host offers: the agent's total resources and its attributes.

Resources not named in ``--resources`` are detected as Mesos does
(`src/slave/containerizer/containerizer.cpp`, ``resources()``): every CPU; all
memory but 1 GB (half of it below 2 GB); the work_dir filesystem's size but
5 GB (half of it below 10 GB); ports ``[31000-32000]``.
"""

from __future__ import annotations

import os

from mesilla.common.resources import Resources, ResourcesError, parse_ranges
from mesilla.v1.mesos import Attribute, Range, Ranges, Scalar, Text, ValueType

GB = 1024**3
MB = 1024**2
DEFAULT_PORTS = "[31000-32000]"


class AttributesError(ValueError):
    """Malformed --attributes; the message names the attribute."""


def total_memory() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise OSError("MemTotal missing from /proc/meminfo")


def filesystem_size(path: str) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def detect_resources(
    resources_flag: str | None, work_dir: str, default_role: str = "*"
) -> Resources:
    """The agent's total: `--resources` plus auto-detected values for what it leaves out."""
    text = resources_flag or ""
    try:
        total = Resources.parse(text, default_role) if text else Resources()
    except ResourcesError as exc:
        raise ResourcesError(f"Invalid --resources: {exc}") from None
    # As Mesos, "named in the flag" is a substring test, so `cpus:0` disables detection.
    detected = []
    if "cpus" not in text:
        detected.append(f"cpus:{os.cpu_count() or 1}")
    if "mem" not in text:
        mem = total_memory()
        mem = mem - GB if mem >= 2 * GB else mem // 2
        detected.append(f"mem:{mem // MB}")
    if "disk" not in text:
        os.makedirs(work_dir, exist_ok=True)
        disk = filesystem_size(work_dir)
        disk = disk - 5 * GB if disk >= 10 * GB else disk // 2
        detected.append(f"disk:{disk // MB}")
    if "ports" not in text:
        detected.append(f"ports:{DEFAULT_PORTS}")
    return total + Resources.parse(";".join(detected), default_role)


def parse_attributes(text: str | None) -> list[Attribute]:
    """Mesos's `--attributes` format: ``rack:a;zone:b;level:3;slots:[1-4]``.

    A value is a scalar if it is a number, ranges if bracketed, text otherwise.
    """
    attributes: list[Attribute] = []
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        name, sep, value = part.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise AttributesError(
                f"Invalid attribute '{part}' in --attributes: expecting name:value"
            )
        attributes.append(_attribute(name, value))
    return attributes


def _attribute(name: str, value: str) -> Attribute:
    if value.startswith("["):
        try:
            pairs = parse_ranges(value, f"attribute '{name}'")
        except ValueError as exc:
            message = str(exc)  # a start-up error: capitalized, as the agent's others
            raise AttributesError(message[:1].upper() + message[1:]) from None
        ranges = [Range(begin=begin, end=end) for begin, end in pairs]
        return Attribute(name=name, type=ValueType.RANGES, ranges=Ranges(range=ranges))
    if value.startswith("{"):
        raise AttributesError(
            f"Attribute '{name}' is a set; attributes may be scalars, ranges or text"
        )
    try:
        number = float(value)
    except ValueError:
        return Attribute(name=name, type=ValueType.TEXT, text=Text(value=value))
    return Attribute(name=name, type=ValueType.SCALAR, scalar=Scalar(value=number))
