"""Persistent network namespaces: created afresh and bind-mounted on a file.

A namespace bound to a file outlives every process in it (and the agent), so
a container joins it by path and a restarted agent finds it again, as Mesos
keeps `<cni root>/<container>/ns`. It is made on a short-lived thread of our
own that unshares its network namespace (a per-thread attribute), brings the
loopback up there and binds `/proc/thread-self/ns/net` onto the file; the
thread then ends, so nothing else of the agent ever runs in the namespace.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import threading

from mesilla.common import files, syscalls

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def create(path: str) -> None:
    """A new network namespace (loopback up) bound on `path`, which is created."""
    with open(path, "x"):
        pass
    error: list[BaseException] = []

    def make() -> None:
        try:
            # os.unshare is 3.12's.
            syscalls.check(syscalls.libc.unshare(syscalls.CLONE_NEWNET), "unshare(CLONE_NEWNET)")
            _loopback_up()
            syscalls.mount("/proc/thread-self/ns/net", path, None, syscalls.MS_BIND)
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=make, name="netns")
    thread.start()
    thread.join()
    if error:
        # Nothing got bound (the bind is the last step): only the file is ours to undo.
        files.remove_file(os.path.dirname(path), path)
        raise error[0]


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def is_bound(path: str) -> bool:
    """Whether a namespace is bound on `path` (a bind-mounted nsfs file)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path and " nsfs " in line for line in f)


def remove(root: str, path: str) -> None:
    """Unbinds the namespace bound on `path` within `root` (it goes once nothing is in it)
    and removes the file.

    Containers whose view of the host includes the file hold copies of the bind in
    their mount namespaces; removing the file detaches those too (Linux 3.18+).
    """
    while is_bound(path):
        files.unmount(root, path, detach=True)
    if os.path.lexists(path):
        files.remove_file(root, path)
