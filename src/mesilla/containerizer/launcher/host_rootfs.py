"""The rootfs of a container without an image: a read-only view of the host.

An OCI runtime pivots into the bundle's rootfs, and "/" cannot be pivoted
into, so the container gets a directory of its own whose top-level entries
mirror the host's: directories and files are read-only recursive bind mounts
(performed by the runtime inside the container's mount namespace, so nothing
is mounted on the host and removing the directory is the whole cleanup),
symlinks such as Debian's `/bin -> usr/bin` are recreated as symlinks, and
`/proc`, `/dev` and `/sys` are fresh (see `oci.base_mounts`).

`/tmp` is the host's, read-write, as Mesos gives such containers: frameworks
install executors there and expect to write temporary files.
"""

from __future__ import annotations

import os
from typing import Any

# Host entries the container gets fresh instead of shared.
FRESH = frozenset({"proc", "dev", "sys", "lost+found"})
# Host entries the container shares read-write.
SHARED_RW = frozenset({"tmp"})


def prepare(rootfs: str, host: str = "/") -> list[dict[str, Any]]:
    """Fills `rootfs` with the host's top-level symlinks; returns the OCI bind mounts."""
    mounts: list[dict[str, Any]] = []
    for entry in sorted(os.listdir(host)):
        if entry in FRESH:
            continue
        source = os.path.join(host, entry)
        if os.path.islink(source):
            target = os.path.join(rootfs, entry)
            if not os.path.lexists(target):
                os.symlink(os.readlink(source), target)
        elif os.path.isdir(source) or os.path.isfile(source):
            mounts.append(
                {
                    "destination": "/" + entry,
                    "type": "bind",
                    "source": source,
                    "options": ["rbind", "rw" if entry in SHARED_RW else "ro", "rprivate"],
                }
            )
    return mounts

