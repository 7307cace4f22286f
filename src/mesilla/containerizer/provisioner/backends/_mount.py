"""mount(2) and umount2(2) through libc: the backends' only privileged calls."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re

from mesilla.containerizer.provisioner.errors import BackendError

MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MNT_DETACH = 0x2
# mountinfo writes space, tab, newline and backslash in paths as \ooo (octal).
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount(
    source: str, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    result = _libc.mount(
        source.encode(),
        target.encode(),
        None if fstype is None else fstype.encode(),
        ctypes.c_ulong(flags),
        None if data is None else data.encode(),
    )
    if result != 0:
        code = ctypes.get_errno()
        raise BackendError(
            f"Failed to mount {fstype or 'bind'} '{source}' at '{target}' "
            f"({data or 'no options'}): {os.strerror(code)}"
        )


def unmount(target: str) -> None:
    """Unmount `target`; if it is busy, detach it (it goes once the last user leaves)."""
    if _libc.umount2(target.encode(), 0) == 0:
        return
    code = ctypes.get_errno()
    if code == errno.EBUSY and _libc.umount2(target.encode(), MNT_DETACH) == 0:
        return
    code = ctypes.get_errno() if code == errno.EBUSY else code
    if code in (errno.EINVAL, errno.ENOENT):  # not a mount point (any more)
        return
    raise BackendError(f"Failed to unmount '{target}': {os.strerror(code)}")


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
