"""Setting this process's capabilities: the bounding set, then the v3 capset(2) sets.

The first processes that set themselves up take their capabilities with it: a
forked default executor (`mesilla.executor.zygote`, which imports it), a DEBUG
container's `containerizer/launcher/enter.py` and an image task's
`executor/task_rootfs.py`. The last two run as `python -I -S`, outside the
package and before any Python path is set up, so they load this file by its
path (`runpy.run_path`) instead of holding a copy. Hence the standard library only, and no
import of the package. The sets are bit masks of kernel capability numbers;
`check` turns any failed libc call of theirs into an OSError.
"""

from __future__ import annotations

import ctypes
import os

PR_CAPBSET_DROP = 24
LINUX_CAPABILITY_VERSION_3 = 0x20080522
LAST_CAP_PATH = "/proc/sys/kernel/cap_last_cap"

_libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    """Raises the OSError of a libc call that failed (`result` not 0)."""
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def last_capability() -> int:
    """The kernel's highest capability number."""
    with open(LAST_CAP_PATH) as f:
        return int(f.read())


def drop_bounding(bounding: int) -> None:
    """Drops every capability not in `bounding` from the bounding set."""
    for number in range(last_capability() + 1):
        if not bounding >> number & 1:
            check(_libc.prctl(PR_CAPBSET_DROP, number, 0, 0, 0), f"dropping capability {number}")


def set_capabilities(effective: int, permitted: int, inheritable: int) -> None:
    """This process's effective, permitted and inheritable sets (capset(2), version 3:
    two 32-bit words of each)."""
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)  # 0: this process
    data = (ctypes.c_uint32 * 6)()
    for word in range(2):
        for index, bits in enumerate((effective, permitted, inheritable)):
            data[word * 3 + index] = bits >> (32 * word) & 0xFFFFFFFF
    check(_libc.capset(header, data), "setting capabilities")
