"""Crash-safe file replacement: a crash leaves the old or the new content, never a mix.

`write_atomically` writes a temporary file next to the target (same filesystem,
so the rename is atomic), fsyncs it, renames it over the target and fsyncs the
directory so that the rename itself is durable. With `durable=False` (Mesos's
`checkpoint(..., sync=false)`) it skips both fsyncs: still atomic for a crashed
process, whose writes the page cache keeps, not for a crashed machine. Temporary files carry
`TMP_PREFIX`; a crash between creating and renaming one can leave it behind,
so code that lists such a directory skips names for which `is_temporary` holds.
"""

from __future__ import annotations

import os
import tempfile

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


def fsync_directory(path: str) -> None:
    """Makes the entries of directory `path` (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
