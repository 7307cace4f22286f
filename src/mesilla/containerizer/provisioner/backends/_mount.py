"""mount(2) through `mesilla.common.syscalls`, umount2(2) through `mesilla.common.files`: the
backends' only privileged calls, failures as BackendError."""

from __future__ import annotations

import errno
import os
import re

from mesilla.common import files, syscalls
from mesilla.containerizer.provisioner.errors import BackendError

# mountinfo writes space, tab, newline and backslash in paths as \ooo (octal).
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")

def mount(
    source: str, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    try:
        syscalls.mount(source, target, fstype, flags, data)
    except OSError as exc:
        raise BackendError(
            f"Failed to mount {fstype or 'bind'} '{source}' at '{target}' "
            f"({data or 'no options'}): {os.strerror(exc.errno or 0)}"
        ) from None


def unmount(root: str, target: str) -> None:
    """Unmount `target` within `root`; if it is busy, detach it (it goes once the last user leaves)."""
    try:
        try:
            files.unmount(root, target)
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            files.unmount(root, target, detach=True)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):  # not a mount point (any more)
            return
        raise BackendError(f"Failed to unmount '{target}': {os.strerror(exc.errno or 0)}") from None


def mount_points_under(path: str) -> list[str]:
    """Mount points at or below `path`, deepest first (so they can be unmounted in order)."""
    prefix = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)
