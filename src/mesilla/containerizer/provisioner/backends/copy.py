"""The copy backend: each layer copied on top of the previous ones into the rootfs.

Works on any filesystem and without special kernel support, at the cost of a
full copy per container. Before a layer is copied, its whiteouts are applied
(hidden entries deleted, opaque directories emptied) and entries whose type
changes (a directory replacing a file or symlink, or the reverse) are removed,
so that copying never writes through a symlink of a lower layer.
"""

from __future__ import annotations

import asyncio
import os
import stat
from typing import ClassVar

from mesilla.containerizer.provisioner import whiteouts
from mesilla.containerizer.provisioner._fs import remove
from mesilla.containerizer.provisioner.backends.base import Backend
from mesilla.containerizer.provisioner.errors import BackendError


class CopyBackend(Backend):
    name: ClassVar[str] = "copy"

    async def provision(self, layers: list[str], rootfs: str, backend_dir: str) -> None:
        os.makedirs(rootfs, exist_ok=True)
        for layer in layers:
            markers = await asyncio.to_thread(_prepare, layer, rootfs)
            process = await asyncio.create_subprocess_exec(
                "cp",
                "-a",
                "--remove-destination",
                "--",
                f"{layer}/.",
                f"{rootfs}/",
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            _, error = await process.communicate()
            if process.returncode != 0:
                raise BackendError(
                    f"Failed to copy layer '{layer}' into '{rootfs}': {error.decode(errors='replace')}"
                )
            for marker in markers:
                await asyncio.to_thread(remove, rootfs, os.path.join(rootfs, marker))

    async def destroy(self, rootfs: str, backend_dir: str) -> None:
        await asyncio.to_thread(remove, backend_dir, rootfs)


def _prepare(layer: str, rootfs: str) -> list[str]:
    """Make `rootfs` ready for `layer` to be copied on top; returns its whiteout markers."""
    markers = whiteouts.apply_to(layer, rootfs)
    for current, dirs, files in os.walk(layer):
        relative = os.path.relpath(current, layer)
        for name in dirs + files:
            source_is_dir = stat.S_ISDIR(os.lstat(os.path.join(current, name)).st_mode)
            target = os.path.normpath(os.path.join(rootfs, relative, name))
            try:
                target_is_dir = stat.S_ISDIR(os.lstat(target).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if source_is_dir != target_is_dir:
                remove(rootfs, target)
    return markers
