"""Small filesystem helpers for crash-safe state: atomic writes and removals."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

TMP_PREFIX = ".tmp-"


def write_atomically(path: str, data: bytes) -> None:
    """Replace `path` with `data`: a crash leaves the old or the new content, never a mix."""
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_directory(os.path.dirname(path))


def fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: str) -> None:
    """Remove a file, link or whole directory tree if present (never following links)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)
