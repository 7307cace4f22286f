"""A DEBUG container's command (a check, an exec session) run in its parent's filesystem."""

from __future__ import annotations

import json
import sys
from typing import Any

from mesilla.containerizer.launcher import enter, oci
from mesilla.containerizer.launcher.base import LaunchError


def enter_filesystem_of(
    pid: int,
    user: oci.User,
    capabilities: dict[str, list[str]],
    argv: list[str],
    console_socket: str | None = None,
    window_size: dict[str, Any] | None = None,
) -> list[str]:
    """`argv` run in the mount namespace, root and working directory of `pid`.

    As Mesos, a DEBUG container (a check, an exec session) sees its parent's
    filesystem: rootfs, volumes, sandbox. The OCI runtime cannot create a
    container inside an existing mount namespace without pivoting that
    namespace's root, so the container starts on the host view, in the
    parent's pid namespace, as root; `enter.py` moves over, takes the terminal,
    becomes `user` with `capabilities` (OCI process sets) and execs `argv`.

    With a `console_socket`, enter.py allocates the terminal itself, from the
    parent's /dev/ptmx once inside: a terminal of the runtime's would be in the
    DEBUG container's own devpts, which the parent's filesystem does not have,
    so `tty` (ttyname) would not find it (as Mesos, whose exec sessions in an
    image-less task see the host's /dev/pts/N they were given). It sizes the
    terminal (`window_size`) before the command runs: sized by the agent once
    received, a command that asks at once could find it 0 x 0.
    """
    spec = {
        # enter.py runs in the parent's pid namespace, where the parent has another pid.
        "target": innermost_pid(pid),
        "uid": user.uid,
        "gid": user.gid,
        "additional_gids": user.additional_gids,
        **{
            kind: oci.capability_mask(capabilities.get(kind, []))
            for kind in ("bounding", "effective", "permitted", "inheritable", "ambient")
        },
        **({"console_socket": console_socket} if console_socket is not None else {}),
        **({"window_size": window_size} if window_size else {}),
    }
    return [sys.executable, "-I", "-S", enter.__file__, json.dumps(spec), *argv]


def innermost_pid(pid: int) -> int:
    """`pid` as its own pid namespace numbers it (the last of /proc/<pid>/status NSpid)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except OSError as exc:
        raise LaunchError(f"Cannot read the pid namespaces of process {pid}: {exc}") from exc
    raise LaunchError(f"/proc/{pid}/status has no NSpid line: a kernel of 4.1 or later is needed")
