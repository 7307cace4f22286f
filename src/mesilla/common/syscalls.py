"""Checked libc calls (mount, capabilities, ...) and their flags, for the agent's own
mounts (bundles' tmpfs, network namespaces, the provisioner's backends) and for the
processes that set themselves up.

Three first processes make their own namespaces, mounts and capabilities: a
forked default executor (`mesilla.executor.zygote`, which imports this), a
DEBUG container's `containerizer/launcher/enter.py` and an image task's
`executor/task_rootfs.py`. The last two run as `python -I -S`, outside the
package and before any Python path is set up, so they load this file by its
path (`runpy.run_path`) instead of holding a copy. Hence the standard library
only, and no import of the package. Capability sets are bit masks of kernel
capability numbers.
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID = 0x20000, 0x4000000, 0x8000000, 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC = 0x20, 0x1000, 0x4000
MS_PRIVATE, MS_SLAVE, MS_STRICTATIME = 1 << 18, 1 << 19, 1 << 24
MNT_DETACH = 2
# pivot_root(2) has no wrapper in older libcs; its number by architecture (others keep runc).
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
PR_CAPBSET_DROP = 24
LINUX_CAPABILITY_VERSION_3 = 0x20080522
LAST_CAP_PATH = "/proc/sys/kernel/cap_last_cap"

libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    """Raises the OSError of a libc call that failed (`result` not 0)."""
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    check(
        libc.mount(
            source.encode() if source else None, target.encode(),
            fstype.encode() if fstype else None, ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source or fstype} on {target}",
    )  # fmt: skip


def last_capability() -> int:
    """The kernel's highest capability number."""
    with open(LAST_CAP_PATH) as f:
        return int(f.read())


def drop_bounding(bounding: int) -> None:
    """Drops every capability not in `bounding` from the bounding set."""
    for number in range(last_capability() + 1):
        if not bounding >> number & 1:
            check(libc.prctl(PR_CAPBSET_DROP, number, 0, 0, 0), f"dropping capability {number}")


def set_capabilities(effective: int, permitted: int, inheritable: int) -> None:
    """This process's effective, permitted and inheritable sets (capset(2), version 3:
    two 32-bit words of each)."""
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)  # 0: this process
    data = (ctypes.c_uint32 * 6)()
    for word in range(2):
        for index, bits in enumerate((effective, permitted, inheritable)):
            data[word * 3 + index] = bits >> (32 * word) & 0xFFFFFFFF
    check(libc.capset(header, data), "setting capabilities")
