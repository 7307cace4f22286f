"""The docker image store (`--image_providers=docker`).

On disk, under `--docker_store_dir`:

    layers/sha256/<hex>/rootfs           a layer, `.wh.` whiteouts kept (copy, bind)
    layers/sha256/<hex>/rootfs.overlay   the same layer in overlayfs's form
    images/<quoted image name>           JSON: manifest digest, config, layer digests
    staging/                             downloads and extractions in progress

Layers are content-addressed by their blob digest and shared between images.
Nothing under `layers/` or `images/` is ever half-written: a layer is
downloaded and verified into `staging/`, extracted there, then renamed into
place; an image file is written last, atomically. `staging/` is emptied at
start-up, so a crash mid-pull leaves no trace. Concurrent pulls of one image,
or of images sharing a layer, wait on the same in-flight work.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.common.files import fsync_directory, is_temporary, write_atomically
from mesilla.common.tasks import TaskOwner
from mesilla.containerizer.provisioner._fs import remove
from mesilla.containerizer.provisioner.errors import ProvisionerError
from mesilla.containerizer.provisioner.stores import reference as references
from mesilla.containerizer.provisioner.stores.archive import ArchiveSource
from mesilla.containerizer.provisioner.stores.layers import extract_layer
from mesilla.containerizer.provisioner.stores.manifest import Descriptor, ResolvedImage
from mesilla.containerizer.provisioner.stores.reference import ImageReference
from mesilla.containerizer.provisioner.stores.registry_client import (
    Credential,
    ProgressCallback,
    PullProgress,
    RegistryClient,
    normalize,
)

log = logging.getLogger(__name__)

LAYER_FORMS = ("rootfs", "rootfs.overlay")

# Downloads a layer (a registry's blob or an archive's member) to a path.
FetchLayer = Callable[[Descriptor, str], Awaitable[None]]


@dataclass
class StoredImage:
    name: str  # the store's key: the canonical reference (or the local name)
    manifest_digest: str
    config: dict[str, Any]
    layers: list[str]  # layer digests, bottom first


class DockerStore:
    def __init__(
        self,
        store_dir: str,
        default_registry: str,
        *,
        progress: ProgressCallback | None = None,
        parallel_downloads: int = 4,
    ) -> None:
        self.store_dir = os.path.abspath(store_dir)
        self.default_registry = default_registry
        self._local_dir = _local_directory(default_registry)
        self._progress = progress
        self._downloads = asyncio.Semaphore(parallel_downloads)
        self._session: aiohttp.ClientSession | None = None
        self._client: RegistryClient | None = None
        self._pulls: dict[tuple[str, str], asyncio.Task[StoredImage]] = {}
        self._layer_pulls: dict[tuple[str, str], asyncio.Task[None]] = {}
        # Both kinds of pull, shared by every caller that wants the same image or layer.
        self._tasks = TaskOwner("the docker store")
        # Pruning excludes pulling: a layer must not vanish under a pull that reuses it.
        self._gate = asyncio.Condition()
        self._active_pulls = 0
        self._pruning = False
        for sub in ("layers/sha256", "images", "staging"):
            os.makedirs(os.path.join(self.store_dir, sub), exist_ok=True)

    async def recover(self) -> None:
        """Drop whatever an earlier run left half-done (in `staging/`, temporary files)."""
        staging = os.path.join(self.store_dir, "staging")
        for entry in os.listdir(staging):
            await asyncio.to_thread(remove, staging, os.path.join(staging, entry))
        images = os.path.join(self.store_dir, "images")
        for entry in os.listdir(images):
            if is_temporary(entry):
                files.remove_file(images, entry)

    async def close(self) -> None:
        """Stop pulls in progress (their staging is removed) and the HTTP session."""
        await self._tasks.close()
        if self._session is not None:
            await self._session.close()
            self._session, self._client = None, None

    def layer_path(self, digest: str, form: str) -> str:
        return os.path.join(
            self.store_dir, "layers", "sha256", digest.split(":", 1)[1], form
        )

    def images(self) -> list[StoredImage]:
        directory = os.path.join(self.store_dir, "images")
        names = [name for name in os.listdir(directory) if not is_temporary(name)]
        return [image for name in names if (image := self._load(name))]

    async def get(
        self,
        name: str,
        form: str,
        *,
        cached: bool = True,
        credential: Credential | None = None,
    ) -> tuple[StoredImage, list[str]]:
        """The image `name` with its layers in `form`, pulled if needed: (image, layer paths)."""
        if form not in LAYER_FORMS:
            raise ValueError(
                f"Unknown layer form '{form}' (known: {', '.join(LAYER_FORMS)})"
            )
        reference = references.parse(name)
        key = self._key(name, reference)
        image = self._load(_file_name(key)) if cached else None
        if image is None or not self._complete(image, form):
            task = self._pulls.get((key, form))
            if task is None:
                # Its callers await it and see its failure: the owner need not log it.
                task = self._tasks.spawn(
                    self._pull(key, name, reference, form, credential),
                    f"pull of '{key}' ({form})",
                    log_failure=False,
                )
                self._pulls[(key, form)] = task
                task.add_done_callback(lambda _: self._pulls.pop((key, form), None))
            image = await asyncio.shield(task)
        return image, [self.layer_path(digest, form) for digest in image.layers]

    async def prune(self, keep_images: set[str], keep_layers: set[str]) -> None:
        """Remove images whose key is not in `keep_images` and every layer no kept image
        or `keep_layers` (paths or digests of layers in use) refers to."""
        async with self._gate:
            await self._gate.wait_for(
                lambda: self._active_pulls == 0 and not self._pruning
            )
            self._pruning = True
        try:
            keep_digests = {_digest_of_layer_path(layer) for layer in keep_layers}
            for image in self.images():
                if image.name in keep_images:
                    keep_digests.update(image.layers)
                    continue
                log.info("Pruning image '%s'", image.name)
                images = os.path.join(self.store_dir, "images")
                files.remove_file(images, _file_name(image.name))
            layers_dir = os.path.join(self.store_dir, "layers", "sha256")
            for hexdigest in os.listdir(layers_dir):
                if f"sha256:{hexdigest}" in keep_digests:
                    continue
                log.info("Pruning layer sha256:%s", hexdigest)
                # Renamed away first, so a crash never leaves a partial layer in place.
                doomed = tempfile.mkdtemp(
                    prefix="gc-", dir=os.path.join(self.store_dir, "staging")
                )
                files.replace(
                    self.store_dir,
                    os.path.join(layers_dir, hexdigest),
                    os.path.join(doomed, "layer"),
                )
                await asyncio.to_thread(remove, self.store_dir, doomed)
        finally:
            async with self._gate:
                self._pruning = False
                self._gate.notify_all()

    def key_of(self, name: str) -> str:
        """The store's key for an image name (what `prune`'s `keep_images` holds)."""
        return self._key(name, references.parse(name))

    def _key(self, name: str, reference: ImageReference) -> str:
        if self._uses_archive(reference):
            return name
        return str(normalize(reference, urlsplit(self.default_registry).netloc))

    def _uses_archive(self, reference: ImageReference) -> bool:
        return self._local_dir is not None and reference.registry is None

    def _complete(self, image: StoredImage, form: str) -> bool:
        return all(
            os.path.isdir(self.layer_path(digest, form)) for digest in image.layers
        )

    def _load(self, file_name: str) -> StoredImage | None:
        try:
            with open(os.path.join(self.store_dir, "images", file_name)) as f:
                return StoredImage(**json.load(f))
        except FileNotFoundError:
            return None

    def _registry_client(self) -> RegistryClient:
        if self._client is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
            self._session = aiohttp.ClientSession(timeout=timeout)
            self._client = RegistryClient(self._session, self.default_registry)
        return self._client

    async def _pull(
        self,
        key: str,
        name: str,
        reference: ImageReference,
        form: str,
        credential: Credential | None,
    ) -> StoredImage:
        async with self._gate:
            await self._gate.wait_for(lambda: not self._pruning)
            self._active_pulls += 1
        try:
            log.info("Pulling image '%s'", key)
            fetch: FetchLayer
            if self._uses_archive(reference):
                assert self._local_dir is not None
                source = ArchiveSource(self._local_dir, name, reference)
                resolved: ResolvedImage = await asyncio.to_thread(source.resolve)

                async def fetch(blob: Descriptor, target: str) -> None:
                    await in_thread(source.fetch_blob, blob, target)
            else:
                client = self._registry_client()
                normalized = client.normalize(reference)
                resolved = await client.resolve(normalized, credential)

                async def fetch(blob: Descriptor, target: str) -> None:
                    await client.fetch_blob(
                        normalized, blob, target, self._progress, credential
                    )

            await _gather_all(
                [
                    self._ensure_layer(key, layer, form, fetch)
                    for layer in resolved.layers
                ]
            )
            image = StoredImage(
                key,
                resolved.manifest_digest,
                resolved.config,
                [layer.digest for layer in resolved.layers],
            )
            await in_thread(
                write_atomically,
                os.path.join(self.store_dir, "images", _file_name(key)),
                json.dumps(asdict(image)).encode(),
            )
            log.info("Pulled image '%s' (%s)", key, image.manifest_digest)
            return image
        finally:
            async with self._gate:
                self._active_pulls -= 1
                self._gate.notify_all()

    async def _ensure_layer(self, image: str, layer: Descriptor, form: str, fetch: FetchLayer) -> None:
        if os.path.isdir(self.layer_path(layer.digest, form)):
            return
        task = self._layer_pulls.get((layer.digest, form))
        if task is None:
            task = self._tasks.spawn(
                self._pull_layer(image, layer, form, fetch),
                f"pull of layer {layer.digest} ({form})",
                log_failure=False,
            )
            self._layer_pulls[(layer.digest, form)] = task
            task.add_done_callback(
                lambda _: self._layer_pulls.pop((layer.digest, form), None)
            )
        await asyncio.shield(task)

    async def _pull_layer(self, image: str, layer: Descriptor, form: str, fetch: FetchLayer) -> None:
        staging = tempfile.mkdtemp(
            prefix="layer-", dir=os.path.join(self.store_dir, "staging")
        )
        try:
            blob = os.path.join(staging, "blob")
            async with self._downloads:
                log.info(
                    "Downloading layer %s of '%s' (%s bytes)",
                    layer.digest,
                    image,
                    layer.size,
                )
                await fetch(layer, blob)
            if self._progress is not None:
                size = os.path.getsize(blob)
                self._progress(PullProgress(image, layer.digest, size, size))
            extracted = os.path.join(staging, form)
            await in_thread(
                extract_layer,
                blob,
                extracted,
                overlay_whiteouts=form == "rootfs.overlay",
            )
            final = self.layer_path(layer.digest, form)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            files.replace(self.store_dir, extracted, final)
            await in_thread(fsync_directory, os.path.dirname(final))
            log.info("Layer %s of '%s' is in the store", layer.digest, image)
        finally:
            await asyncio.to_thread(remove, self.store_dir, staging)


async def _gather_all(awaitables: list[Awaitable[None]]) -> None:
    """Wait for all (so none is left running unobserved), then raise the first failure."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _local_directory(registry: str) -> str | None:
    if registry.startswith("file://"):
        return registry[len("file://") :]
    if registry.startswith("/"):
        return registry
    if "://" not in registry:
        raise ProvisionerError(
            f"--docker_registry='{registry}' is neither an http(s) URL nor an absolute local path"
        )
    return None


def _file_name(key: str) -> str:
    return urllib.parse.quote(key, safe="")


def _digest_of_layer_path(layer: str) -> str:
    """`.../layers/sha256/<hex>/rootfs` or a digest -> `sha256:<hex>`."""
    if layer.startswith("sha256:"):
        return layer
    return "sha256:" + os.path.basename(os.path.dirname(layer.rstrip("/")))
