"""The bind backend: a single-layer image's layer, bind-mounted read-only as the rootfs.

Nothing is copied, so it is the cheapest backend, and the container cannot
write to its root filesystem (as in Mesos; a volume gives it writable space).
A layer that carries whiteouts is refused: alone, they would show up as
`.wh.` files rather than hide anything.
"""

from __future__ import annotations

import asyncio
import os
from typing import ClassVar

from mesilla.common import syscalls
from mesilla.containerizer.provisioner import whiteouts
from mesilla.containerizer.provisioner._fs import remove
from mesilla.containerizer.provisioner.backends import _mount
from mesilla.containerizer.provisioner.backends.base import Backend
from mesilla.containerizer.provisioner.errors import BackendError


class BindBackend(Backend):
    name: ClassVar[str] = "bind"

    @classmethod
    def check(cls, store_dir: str) -> None:
        if os.geteuid() != 0:
            raise BackendError("The bind backend needs root to mount")

    async def provision(self, layers: list[str], rootfs: str, backend_dir: str) -> None:
        if len(layers) != 1:
            raise BackendError(
                f"The bind backend takes single-layer images only, this one has {len(layers)} "
                "layers: use --image_provisioner_backend=overlay or copy"
            )
        marker = await asyncio.to_thread(_first_whiteout, layers[0])
        if marker is not None:
            raise BackendError(
                f"Layer '{layers[0]}' has the whiteout '{marker}', which the bind backend "
                "cannot hide: use --image_provisioner_backend=overlay or copy"
            )
        os.makedirs(rootfs, exist_ok=True)
        _mount.mount(layers[0], rootfs, None, syscalls.MS_BIND, None)
        try:
            # Read-only takes a second call: the first bind ignores MS_RDONLY.
            _mount.mount(
                layers[0],
                rootfs,
                None,
                syscalls.MS_BIND | syscalls.MS_REMOUNT | syscalls.MS_RDONLY,
                None,
            )
        except BackendError:
            _mount.unmount(backend_dir, rootfs)
            raise

    async def destroy(self, rootfs: str, backend_dir: str) -> None:
        for point in _mount.mount_points_under(rootfs):
            await asyncio.to_thread(_mount.unmount, backend_dir, point)
        await asyncio.to_thread(remove, backend_dir, rootfs)


def _first_whiteout(layer: str) -> str | None:
    for current, dirs, files in os.walk(layer):
        for name in files + dirs:
            if whiteouts.is_whiteout(name):
                return os.path.relpath(os.path.join(current, name), layer)
    return None
