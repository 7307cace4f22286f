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
"""

from __future__ import annotations

import concurrent.futures
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

TMP_PREFIX = ".tmp-"


def is_temporary(name: str) -> bool:
    """Whether a directory entry is a temporary file of `write_atomically`."""
    return name.startswith(TMP_PREFIX)


def write_atomically(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replaces `path` with `data` (durably unless told not to), creating its directory if needed."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp creates 0600; the files are read like any other the agent writes.
            os.fchmod(f.fileno(), 0o644)
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
                fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=directory)
                fds.append(fd)
                staged.append((tmp, path))
                os.fchmod(fd, 0o644)
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
