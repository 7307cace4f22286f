"""Moves a DEBUG container's command into its parent's filesystem, then execs it.

The linux launcher's DEBUG container (a check, an exec session) starts as an
OCI container on the host view, in its parent's pid, network, UTS and IPC
namespaces, with the capabilities that entering a mount namespace takes. This
program is that container's first process:

    python -I -S enter.py '<json>' <command> [args...]

where the JSON gives `target` (the parent's pid as this pid namespace numbers
it), the user (`uid`, `gid`, `additional_gids`) and the capability sets the
command keeps (`bounding`, `effective`, `permitted`, `inheritable`, `ambient`:
bit masks of kernel capability numbers), and for a session with a terminal
`console_socket`. It joins the target's mount namespace, root and working
directory; with a console socket it allocates a pseudo-terminal there (the
parent's /dev/ptmx, so that the slave is the /dev/pts/N the command's `tty`
names) for its stdin, stdout and stderr and sends the master over the socket,
as an OCI runtime does; it makes its terminal (if stdin is one) the
controlling terminal of its session, drops to the user and capabilities, and
execs the command, which so holds nothing its parent task did not.

It runs before the Python path is set up (`-S`) and outside the package, so
it uses the standard library only, and `mesilla/common/syscalls.py` loaded by
its path.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import runpy
import socket
import struct
import sys
import termios
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mesilla.common import syscalls
else:  # outside the package (see the docstring): the module's file, by its path
    syscalls = SimpleNamespace(**runpy.run_path(f"{os.path.dirname(__file__)}/../../common/syscalls.py"))

PR_SET_KEEPCAPS = 8
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
TIOCGPTN = 0x80045430  # the pty's number
TIOCSPTLCK = 0x40045431  # (un)lock its slave

def enter_filesystem(target: int) -> None:
    """Joins `target`'s mount namespace, then its root and working directory."""
    mnt = os.open(f"/proc/{target}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    root = os.open(f"/proc/{target}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    cwd = os.open(f"/proc/{target}/cwd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    syscalls.check(
        syscalls.libc.setns(mnt, syscalls.CLONE_NEWNS), f"setns into the mount namespace of {target}"
    )
    os.fchdir(root)
    os.chroot(".")
    os.fchdir(cwd)
    for fd in (mnt, root, cwd):
        os.close(fd)


def connect_console(path: str | None) -> socket.socket | None:
    """The console socket, connected while its path is still in view (the agent's host)."""
    if path is None:
        return None
    console = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    console.connect(path)
    return console


def allocate_terminal(
    console: socket.socket, uid: int, window_size: dict[str, Any] | None = None
) -> None:
    """A pseudo-terminal of the filesystem entered, of `window_size` (TTYInfo's rows and
    columns), becomes stdin, stdout and stderr (its slave `uid`'s, as Mesos chowns it to
    the container's user); its master goes over the console socket: one message, the
    slave's name as data and the master as SCM_RIGHTS."""
    master = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    if window_size:
        rows, columns = int(window_size.get("rows", 0)), int(window_size.get("columns", 0))
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    fcntl.ioctl(master, TIOCSPTLCK, struct.pack("i", 0))
    (number,) = struct.unpack("I", fcntl.ioctl(master, TIOCGPTN, struct.pack("I", 0)))
    name = f"/dev/pts/{number}"
    slave = os.open(name, os.O_RDWR | os.O_NOCTTY)
    os.fchown(slave, uid, -1)
    console.sendmsg(
        [name.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [master]))]
    )
    console.close()
    os.close(master)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    os.close(slave)


def take_terminal() -> None:
    """Makes stdin, a terminal, the controlling one of this session (as a login does)."""
    if not os.isatty(0):
        return
    try:
        os.setsid()
    except PermissionError:
        pass  # already a session leader: the OCI runtime's init made us one
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def drop_privileges(spec: dict[str, Any]) -> None:
    """Becomes the spec's user holding exactly its capability sets (bit masks)."""
    syscalls.drop_bounding(int(spec["bounding"]))
    syscalls.check(syscalls.libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "keeping capabilities across setuid")
    uid, gid = int(spec["uid"]), int(spec["gid"])
    os.setgroups([int(g) for g in spec.get("additional_gids", [])])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    syscalls.check(syscalls.libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0), "resetting keep-capabilities")
    syscalls.set_capabilities(*(int(spec[name]) for name in ("effective", "permitted", "inheritable")))
    ambient = int(spec["ambient"])
    for number in range(syscalls.last_capability() + 1):
        if ambient >> number & 1:
            syscalls.check(
                syscalls.libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, number, 0, 0),
                f"raising ambient capability {number}",
            )


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit("usage: enter.py '<json>' <command> [args...]")
    spec = json.loads(argv[0])
    try:
        console = connect_console(spec.get("console_socket"))
        enter_filesystem(int(spec["target"]))
        if console is not None:
            allocate_terminal(console, int(spec["uid"]), spec.get("window_size"))
        take_terminal()
        drop_privileges(spec)
        os.execvp(argv[1], argv[1:])
    except OSError as exc:
        print(
            f"Failed to enter container of process {spec['target']}: {exc}",
            file=sys.stderr,
        )
        sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main(sys.argv[1:])
