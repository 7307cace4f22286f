"""Launchers: how a container's first process is created (`--launcher`).

`LAUNCHERS` maps Mesos's launcher names to `module:Class`; modules are
imported only when chosen, so a host without an OCI runtime never imports
the linux launcher's dependencies.
"""

from __future__ import annotations

from mesilla.common.errors import ConfigurationError
from mesilla.common.plugins import load_class
from mesilla.containerizer.launcher.base import Launcher

LAUNCHERS: dict[str, str] = {
    "posix": "mesilla.containerizer.launcher.posix:PosixLauncher",
    "linux": "mesilla.containerizer.launcher.linux:LinuxLauncher",
}


class UnknownLauncher(ConfigurationError, ValueError):
    """`--launcher` names no registered launcher."""


def load_launcher(name: str) -> type[Launcher]:
    """The launcher class registered as `name` (imported now)."""
    try:
        target = LAUNCHERS[name]
    except KeyError:
        known = ", ".join(sorted(LAUNCHERS))
        raise UnknownLauncher(
            f"Unknown launcher '{name}' in --launcher: use one of {known}"
        ) from None
    return load_class(target, Launcher)
