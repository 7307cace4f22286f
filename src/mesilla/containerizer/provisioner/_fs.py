"""Removing whatever the provisioner left on disk, whatever its kind."""

from __future__ import annotations

import os
import stat

from mesilla.common import files


def remove(root: str, path: str) -> None:
    """Remove a file, link or whole directory tree within `root` if present (never following links)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        files.remove_tree(root, path)
    else:
        files.remove_file(root, path)
