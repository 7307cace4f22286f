"""Whiteouts: how an upper image layer deletes what lower layers contain.

Image layers use the AUFS convention: an empty file `.wh.<name>` deletes
`<name>` from the layers below, and a `.wh..wh..opq` file makes its directory
opaque (lower layers' contents of that directory are hidden).

Two on-disk forms exist in the store, as in Mesos:
- `rootfs`: the layer as in its tarball, `.wh.` files kept; the copy backend
  applies them with `apply_to` while stacking layers.
- `rootfs.overlay`: whiteouts converted at extraction into what the kernel's
  overlayfs understands: a 0/0 character device for a deleted entry and the
  `trusted.overlay.opaque=y` xattr on an opaque directory.
"""

from __future__ import annotations

import os
import stat

from mesilla.containerizer.provisioner._fs import remove

PREFIX = ".wh."
OPAQUE = ".wh..wh..opq"
# Other `.wh..wh.` names are AUFS bookkeeping (hard link dirs), never content.
META_PREFIX = ".wh..wh."
OVERLAY_OPAQUE_XATTR = "trusted.overlay.opaque"


def is_whiteout(name: str) -> bool:
    return name.startswith(PREFIX)


def hidden_name(name: str) -> str | None:
    """The entry a `.wh.<name>` file deletes; None for opaque and bookkeeping markers."""
    if not name.startswith(PREFIX) or name.startswith(META_PREFIX):
        return None
    return name[len(PREFIX) :]


def make_overlay_whiteout(root: str, path: str) -> None:
    """Turn `path`, within `root`, into an overlay whiteout (character device 0/0)."""
    remove(root, path)
    os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))


def make_overlay_opaque(directory: str) -> None:
    os.setxattr(directory, OVERLAY_OPAQUE_XATTR, b"y", follow_symlinks=False)


def apply_to(layer: str, rootfs: str) -> list[str]:
    """Apply the whiteouts of an AUFS-form `layer` to `rootfs` before it is copied on top.

    Deletes hidden entries and empties opaque directories in `rootfs`; returns
    the whiteout files' paths relative to `layer` so the caller can remove the
    markers that copying brings along.
    """
    markers: list[str] = []
    for current, dirs, files in os.walk(layer):
        relative = os.path.relpath(current, layer)
        target_dir = os.path.normpath(os.path.join(rootfs, relative))
        names = files + [d for d in dirs if is_whiteout(d)]
        # A directory that is not a real one in `rootfs` (absent, or a symlink that
        # may point anywhere, even outside) gets replaced by the copy: nothing to hide.
        if not _real_directory(rootfs, relative):
            markers.extend(
                os.path.normpath(os.path.join(relative, n))
                for n in names
                if is_whiteout(n)
            )
            continue
        if OPAQUE in names:
            for entry in os.listdir(target_dir):
                remove(rootfs, os.path.join(target_dir, entry))
        for name in names:
            if not is_whiteout(name):
                continue
            markers.append(os.path.normpath(os.path.join(relative, name)))
            hidden = hidden_name(name)
            if hidden:
                remove(rootfs, os.path.join(target_dir, hidden))
    return markers


def _real_directory(rootfs: str, relative: str) -> bool:
    path = rootfs
    for part in [] if relative == "." else relative.split(os.sep):
        path = os.path.join(path, part)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False
        except FileNotFoundError:
            return False
    return True
