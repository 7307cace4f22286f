"""Network namespaces for tests: everything a network test creates lives in one.

`network_namespace()` makes `mesilla-test-<random>` (`ip netns add`, loopback
up) and deletes it afterwards, which takes its bridges, veths, addresses and
iptables rules with it. `entered(name)` moves the calling thread into it and
back, so that a test's cluster (the processes it starts inherit the thread's
namespace) and the test's own connections to 127.0.0.1 stay inside.
`release_namespace_mounts(directory)` unbinds network namespaces a failed test
left bound under its directory (a pod namespace lives outside the test's).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import uuid
from collections.abc import Iterator

from mesilla.common import files

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def network_namespace(prefix: str = "mesilla-test") -> Iterator[str]:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


def namespace_mounts(directory: str) -> list[str]:
    """Network namespaces bound anywhere under `directory`."""
    prefix = os.path.realpath(directory) + "/"
    with open("/proc/self/mountinfo") as f:
        fields = [line.split() for line in f]
    return [f[4] for f in fields if f[4].startswith(prefix) and "nsfs" in f]


def release_namespace_mounts(directory: str) -> list[str]:
    """Unbinds them; returns what was left (a test that cleaned up leaves nothing)."""
    left = namespace_mounts(directory)
    for path in left:
        with contextlib.suppress(OSError):
            files.unmount(directory, path, detach=True)
    return left


def run_in(name: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`argv` run in namespace `name` (or a namespace file's path)."""
    target = f"--net={name}" if name.startswith("/") else f"--net=/run/netns/{name}"
    return subprocess.run(["nsenter", target, *argv], capture_output=True, text=True, check=check)
