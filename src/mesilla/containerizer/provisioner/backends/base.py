"""The rootfs backend interface (Mesos `provisioner/backend.hpp`).

A backend stacks an image's layers (paths in the store, bottom first) into a
container's root filesystem at `rootfs`, keeping any scratch space it needs in
`backend_dir` (`<provisioner>/containers/<id>/backends/<name>`), and undoes it
all in `destroy`, which must also work after an agent restart.
"""

from __future__ import annotations

from typing import ClassVar


class Backend:
    name: ClassVar[str]
    # Which on-disk form of the store's layers it stacks (see `whiteouts`).
    layer_form: ClassVar[str] = "rootfs"

    @classmethod
    def check(cls, store_dir: str) -> None:
        """Raise `BackendError` saying why this host cannot use the backend."""

    async def provision(self, layers: list[str], rootfs: str, backend_dir: str) -> None:
        raise NotImplementedError

    async def destroy(self, rootfs: str, backend_dir: str) -> None:
        raise NotImplementedError
