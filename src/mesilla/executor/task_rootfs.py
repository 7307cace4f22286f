"""Entering a command task's image rootfs, for the command executor's `--rootfs`.

As in Mesos, a command task with an image runs its executor on the host's
filesystem and only the task inside the image: the task's process, between
fork and exec, gets a mount namespace of its own, sees the sandbox at
`--sandbox_directory` and fresh /proc, /dev and /sys inside the rootfs, and
chroots there. Its mounts die with it, so nothing is left to clean up. Needs
root (CAP_SYS_ADMIN); ctypes is imported only by executors that need this.
"""

from __future__ import annotations

import ctypes
import os
import pwd
from collections.abc import Callable

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            None,
        ),
        f"mount {source or fstype} on {target}",
    )


def _inside(rootfs: str, path: str) -> str:
    target = os.path.join(rootfs, path.lstrip("/"))
    os.makedirs(target, exist_ok=True)
    return target


def enter_rootfs(
    rootfs: str, sandbox: str, sandbox_directory: str, working_directory: str | None,
    user: str | None,
) -> Callable[[], None]:  # fmt: skip
    """The function to run in the task's process before exec (a `preexec_fn`)."""
    if not os.path.isdir(rootfs):
        raise FileNotFoundError(f"The task's rootfs '{rootfs}' is not visible to the executor")
    # Resolved now, against the host's user database, before the chroot hides it.
    account = pwd.getpwnam(user) if user else None

    def enter() -> None:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        # Our mounts must not propagate back to the executor's namespace.
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _mount(sandbox, _inside(rootfs, sandbox_directory), None, MS_BIND | MS_REC)
        _mount("proc", _inside(rootfs, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _mount("/dev", _inside(rootfs, "/dev"), None, MS_BIND | MS_REC)
        _mount("/sys", _inside(rootfs, "/sys"), None, MS_BIND | MS_REC)
        os.chroot(rootfs)
        os.chdir(working_directory or sandbox_directory)
        if account is not None:
            os.initgroups(account.pw_name, account.pw_gid)
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)

    return enter
