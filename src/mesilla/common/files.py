"""Crash-safe file replacement: a crash leaves the old or the new content, never a mix.

`write_atomically` writes a temporary file next to the target (same filesystem,
so the rename is atomic), fsyncs it, renames it over the target and fsyncs the
directory so that the rename itself is durable. With `durable=False` (Mesos's
`checkpoint(..., sync=false)`) it skips both fsyncs: still atomic for a crashed
process, whose writes the page cache keeps, not for a crashed machine. Temporary files carry
`TMP_PREFIX`; a crash between creating and renaming one can leave it behind,
so code that lists such a directory skips names for which `is_temporary` holds.

`write_all_atomically` does the same for several files at once with the same
guarantee for each file (not for the set): every file is written, then all are
fsynced together, renamed, and each directory is fsynced once. Concurrent
fsyncs share the file system's journal commits (ext4, xfs), so ten files cost
about what two cost one after the other.

Outside input never chooses what is deleted: `inside` joins a path onto a
root and refuses (`OutsideRoot`) any result that leaves it, symlinks in the
parents resolved (the last component is not followed, so a link itself is
what gets removed); `remove_tree`, `remove_file`, `remove_dir`, `replace` and
`unmount` act only on a target strictly inside the root they are given. Every
destructive call of Mesilla goes through them (a unit test walks the source
to keep it so).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

TMP_PREFIX = ".tmp-"


class OutsideRoot(ValueError):
    """A path that would leave the directory it must stay in."""


def inside(root: str, path: str, *, follow: bool = False) -> str:
    """`path` (relative to `root`, or absolute) resolved, refused unless within `root`.

    Symlinks in its parents are resolved (realpath); its last component is
    kept as is, unless it is '.' or '..' or `follow` is set (for what is
    opened or mounted rather than removed), which resolve it too.
    """
    real_root = os.path.realpath(root)
    parent, name = os.path.split(os.path.join(root, path))
    if follow or name in ("", ".", ".."):
        resolved = os.path.realpath(os.path.join(parent, name))
    else:
        resolved = os.path.join(os.path.realpath(parent), name)
    if os.path.commonpath([real_root, resolved]) != real_root:
        raise OutsideRoot(f"'{path}' is outside '{root}'")
    return resolved


def _target(root: str, path: str) -> str:
    """What a destructive call may act on: strictly inside `root`, never the root itself."""
    resolved = inside(root, path)
    if resolved == os.path.realpath(root):
        raise OutsideRoot(f"'{path}' is '{root}' itself, not a path inside it")
    return resolved


def remove_tree(root: str, path: str, *, ignore_errors: bool = False) -> None:
    """`shutil.rmtree` of `path` within `root` (links inside the tree are removed, not followed)."""
    import shutil  # here: every pod's executor imports this module, and needs no shutil

    shutil.rmtree(_target(root, path), ignore_errors=ignore_errors)


def remove_file(root: str, path: str) -> None:
    """`os.unlink` of `path` within `root`."""
    os.unlink(_target(root, path))


def remove_dir(root: str, path: str) -> None:
    """`os.rmdir` of the empty directory `path` within `root`."""
    os.rmdir(_target(root, path))


def replace(root: str, source: str, target: str) -> None:
    """`os.replace` of `source` by `target`, both within `root`."""
    os.replace(_target(root, source), _target(root, target))


MNT_DETACH = 0x2


def unmount(root: str, path: str, *, detach: bool = False) -> None:
    """umount2(2) of the mount point `path` within `root`; OSError with errno when it fails."""
    import ctypes  # here: every pod's executor imports this module, and unmounts nothing

    target = _target(root, path)
    if _libc().umount2(target.encode(), MNT_DETACH if detach else 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unmounting {target} failed: {os.strerror(code)}")


@functools.cache
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _temporary(directory: str) -> tuple[int, str]:
    """A new file for writing in `directory`, named with `TMP_PREFIX`, mode 0644 (as mkstemp,
    without importing tempfile and shutil into every pod's executor)."""
    while True:
        path = os.path.join(directory, TMP_PREFIX + os.urandom(6).hex())
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        # The files are read like any other the agent writes, whatever the umask.
        os.fchmod(fd, 0o644)
        return fd, path


def is_temporary(name: str) -> bool:
    """Whether a directory entry is a temporary file of `write_atomically`."""
    return name.startswith(TMP_PREFIX)


def write_atomically(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replaces `path` with `data` (durably unless told not to), creating its directory if needed."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = _temporary(directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    if durable:
        fsync_directory(directory)


def write_all_atomically(items: Iterable[tuple[str, bytes]]) -> None:
    """Durably replaces each path with its data, as `write_atomically`, in one batch.

    A crash may leave any subset of the files replaced (each one whole); a
    caller that needs all-or-nothing marks the batch itself. Directories it
    creates are made durable in their parents too.
    """
    synced: set[str] = set()
    fds: list[int] = []
    staged: list[tuple[str, str]] = []  # (temporary, target)
    try:
        try:
            for path, data in items:
                directory = os.path.dirname(path) or "."
                synced.update(_make_directories(directory))
                synced.add(directory)
                fd, tmp = _temporary(directory)
                fds.append(fd)
                staged.append((tmp, path))
                _write_all(fd, data)
            _concurrently(os.fsync, fds)
        finally:
            for fd in fds:
                os.close(fd)
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        raise
    _concurrently(fsync_directory, sorted(synced))


def _make_directories(path: str) -> list[str]:
    """Creates `path` and missing parents; the parents whose entries changed."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        os.makedirs(directory, exist_ok=True)
    return [os.path.dirname(d) or "." for d in missing]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# fsync blocks in the kernel without the GIL; a few at once let the journal batch them.
_fsyncs = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="fsync")


def _concurrently(fn: Callable[[T], None], args: list[T]) -> None:
    if len(args) == 1:
        fn(args[0])
        return
    futures = [_fsyncs.submit(fn, a) for a in args]
    # All finish before any error is raised: the caller then closes the descriptors.
    concurrent.futures.wait(futures)
    for future in futures:
        future.result()


def fsync_directory(path: str) -> None:
    """Makes the entries of directory `path` (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
