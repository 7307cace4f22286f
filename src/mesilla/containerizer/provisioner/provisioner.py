"""The provisioner: a container's image pulled into the store and stacked into a rootfs.

Per container, under `<work_dir>/provisioner` (Mesos's layout; a containerizer run
without an agent, and so with no `--work_dir`, uses `<docker_store_dir>/../provisioner`):

    containers/<id>[/containers/<child id>...]/
        images.json                         images provisioned for it (layers in use)
        backends/<backend>/rootfses/<uuid>  each rootfs
        backends/<backend>/scratch/<uuid>   the backend's work space (overlay upper dir)

`images.json` is written (atomically, not fsynced, as Mesos) before the rootfs is
built, so a crash midway leaves something `recover` can find and remove. Image GC (`prune`) keeps the images
asked for and every layer any container's rootfs still stacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from mesilla.common.blocking import in_thread
from mesilla.common.errors import BadRequest
from mesilla.common.files import write_atomically
from mesilla.common.validation import validate_container_id
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.provisioner._fs import remove
from mesilla.containerizer.provisioner.backends import choose_backend, load_backend
from mesilla.containerizer.provisioner.backends._mount import (
    mount_points_under,
    unmount,
)
from mesilla.containerizer.provisioner.backends.base import Backend
from mesilla.containerizer.provisioner.errors import ProvisionerError, UnsupportedImageProviders
from mesilla.containerizer.provisioner.stores.docker import DockerStore
from mesilla.containerizer.provisioner.stores.registry_client import (
    Credential,
    ProgressCallback,
)
from mesilla.v1.mesos import ContainerID, Image

log = logging.getLogger(__name__)

SUPPORTED_PROVIDERS = ("docker",)


@dataclass
class ProvisionInfo:
    rootfs: str
    # The image's config blob: `config` holds Entrypoint, Cmd, Env, WorkingDir, User.
    image_config: dict[str, Any]
    layers: list[str] = field(default_factory=list)  # store paths, bottom first


class Provisioner:
    def __init__(
        self, store: DockerStore, backend: Backend, provisioner_dir: str
    ) -> None:
        self.store = store
        self.backend = backend
        self.provisioner_dir = provisioner_dir
        os.makedirs(os.path.join(provisioner_dir, "containers"), exist_ok=True)

    @classmethod
    async def create(
        cls, flags: ContainerizerFlags, progress: ProgressCallback | None = None
    ) -> Provisioner:
        providers = flags.image_providers
        unknown = [p for p in providers if p.lower() not in SUPPORTED_PROVIDERS]
        if unknown:
            raise UnsupportedImageProviders(
                f"Unsupported --image_providers {', '.join(unknown)}: only 'docker' is supported"
            )
        store_dir = os.path.abspath(flags.docker_store_dir)
        backend = choose_backend(flags.image_provisioner_backend, store_dir)
        log.info("Provisioning rootfses with the %s backend", backend.name)
        store = DockerStore(store_dir, flags.docker_registry, progress=progress)
        await store.recover()
        return cls(store, backend, provisioner_dir(flags, store_dir))

    async def close(self) -> None:
        await self.store.close()

    async def provision(self, container_id: ContainerID, image: Image) -> ProvisionInfo:
        name = _docker_name(image)
        credential = None
        if image.docker is not None and image.docker.credential:
            secret = image.docker.credential
            credential = Credential(
                str(secret.get("principal", "")), str(secret.get("secret", ""))
            )
        stored, layers = await self.store.get(
            name, self.backend.layer_form, cached=image.cached, credential=credential
        )
        container_dir = self._container_dir(container_id)
        os.makedirs(container_dir, exist_ok=True)
        records = self._records(container_dir)
        records.append({"image": stored.name, "layers": layers})
        # Atomic, not fsynced, as Mesos checkpoints its layers file (sync=false): an agent
        # that crashes finds it in the page cache, and after a machine crash no rootfs
        # survives to need it. The fsync was 5-50 ms of every nested launch with an image.
        write_atomically(
            os.path.join(container_dir, "images.json"), json.dumps(records).encode(), durable=False
        )

        backend_dir = os.path.join(container_dir, "backends", self.backend.name)
        rootfs = os.path.join(backend_dir, "rootfses", str(uuid.uuid4()))
        build = asyncio.ensure_future(
            self.backend.provision(layers, rootfs, backend_dir)
        )
        try:
            await asyncio.shield(build)
        except BaseException:
            # Cancelled (the container is being destroyed): let the build finish first,
            # so that no mount appears after it was undone.
            with contextlib.suppress(BaseException):
                await build
            await self.backend.destroy(rootfs, backend_dir)
            raise
        log.info(
            "Provisioned rootfs %s for container %s from image '%s'",
            rootfs,
            container_id,
            name,
        )
        return ProvisionInfo(rootfs, stored.config, layers)

    async def destroy(self, container_id: ContainerID) -> bool:
        """Remove every rootfs of the container and its nested ones; False if it had none."""
        container_dir = self._container_dir(container_id)
        if not os.path.isdir(container_dir):
            return False
        await self._destroy_dir(container_dir)
        return True

    async def recover(self, container_ids: list[ContainerID]) -> None:
        """Keep the rootfses of `container_ids`, destroy every other (orphan) one."""
        known = {tuple(cid.path()) for cid in container_ids}
        for path in self._recorded(
            os.path.join(self.provisioner_dir, "containers"), ()
        ):
            if path not in known:
                log.info("Removing the rootfs of orphan container %s", ".".join(path))
                await self._destroy_dir(self._path_dir(path))

    async def prune(self, excluded_images: list[Image], in_use: list[Image]) -> None:
        """Image GC: drop every image except `excluded_images` and `in_use`, and every
        layer none of those nor any container's rootfs uses."""
        keep_images = {
            self.store.key_of(_docker_name(image))
            for image in [*excluded_images, *in_use]
            if image.type == "DOCKER" and image.docker is not None
        }
        keep_layers: set[str] = set()
        for path in self._recorded(
            os.path.join(self.provisioner_dir, "containers"), ()
        ):
            for record in self._records(self._path_dir(path)):
                keep_layers.update(record["layers"])
        await self.store.prune(keep_images, keep_layers)

    def _container_dir(self, container_id: ContainerID) -> str:
        return self._path_dir(tuple(container_id.path()))

    def _path_dir(self, path: tuple[str, ...]) -> str:
        parts = [self.provisioner_dir]
        for value in path:
            parts += ["containers", value]
        return os.path.join(*parts)

    def _recorded(
        self, containers_dir: str, parent: tuple[str, ...]
    ) -> list[tuple[str, ...]]:
        """Container paths (root value first) with a directory here, parents before children."""
        found: list[tuple[str, ...]] = []
        if not os.path.isdir(containers_dir):
            return found
        for value in sorted(os.listdir(containers_dir)):
            try:
                validate_container_id(ContainerID(value=value))
            except BadRequest as exc:  # not ours: never followed, never removed
                log.warning("Skipping '%s' in %s: %s", value, containers_dir, exc)
                continue
            path = (*parent, value)
            found.append(path)
            found += self._recorded(
                os.path.join(containers_dir, value, "containers"), path
            )
        return found

    @staticmethod
    def _records(container_dir: str) -> list[dict[str, Any]]:
        try:
            with open(os.path.join(container_dir, "images.json")) as f:
                records: list[dict[str, Any]] = json.load(f)
                return records
        except FileNotFoundError:
            return []

    async def _destroy_dir(self, container_dir: str) -> None:
        nested = os.path.join(container_dir, "containers")
        if os.path.isdir(nested):
            for child in os.listdir(nested):
                await self._destroy_dir(os.path.join(nested, child))
        backends = os.path.join(container_dir, "backends")
        for name in os.listdir(backends) if os.path.isdir(backends) else []:
            backend = (
                self.backend if name == self.backend.name else load_backend(name)()
            )
            backend_dir = os.path.join(backends, name)
            rootfses = os.path.join(backend_dir, "rootfses")
            for rootfs_id in os.listdir(rootfses) if os.path.isdir(rootfses) else []:
                await backend.destroy(os.path.join(rootfses, rootfs_id), backend_dir)
        # Whatever is still mounted below (a sandbox bound in by hand, say) must not be
        # deleted through the mount.
        for point in mount_points_under(container_dir):
            unmount(self.provisioner_dir, point)
        await in_thread(remove, self.provisioner_dir, container_dir)


def provisioner_dir(flags: ContainerizerFlags, store_dir: str) -> str:
    """The agent's own directory of rootfses: under its `--work_dir`, as Mesos's, so that
    two agents sharing one image store never take each other's rootfses for orphans."""
    work_dir = flags.work_dir
    base = os.path.abspath(work_dir) if work_dir else os.path.dirname(store_dir)
    return os.path.join(base, "provisioner")


def _docker_name(image: Image) -> str:
    if image.type != "DOCKER" or image.docker is None or not image.docker.name:
        raise ProvisionerError(
            f"Unsupported image of type '{image.type}': only DOCKER images with a name "
            "(Image.docker.name) can be provisioned"
        )
    return image.docker.name
