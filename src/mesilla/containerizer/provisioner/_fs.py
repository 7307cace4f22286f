"""Removing whatever the provisioner left on disk, whatever its kind."""

from __future__ import annotations

import os
import shutil
import stat


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
