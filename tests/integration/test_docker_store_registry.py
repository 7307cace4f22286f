"""The docker store pulling from a real docker-registry (Debian's `docker-registry`)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.fixtures.images import PushedImage, RegistryFront

from mesilla.containerizer.provisioner.errors import (
    BlobDigestMismatch,
    ImageNotFound,
    RegistryAuthError,
    RegistryError,
)
from mesilla.containerizer.provisioner.stores.docker import DockerStore
from mesilla.containerizer.provisioner.stores.registry_client import (
    Credential,
    PullProgress,
)
from mesilla.testing.images import (
    BuiltImage,
    Platform,
    build_image,
    host_architecture,
    push_image,
    push_index,
)
from mesilla.testing.registry import Registry

pytestmark = [pytest.mark.registry]


def unique_image(*, oci: bool = False, with_whiteouts: bool = False) -> BuiltImage:
    """An image whose base layer no other test pushed (so fetch counts are its own)."""
    marker = {"etc/test-id": uuid.uuid4().hex.encode()}
    return build_image(extra_files=marker, oci=oci, with_whiteouts=with_whiteouts)


@pytest.fixture
async def store(
    tmp_path: Path, docker_registry: Registry
) -> AsyncIterator[DockerStore]:
    store = DockerStore(os.path.join(tmp_path, "store"), docker_registry.url)
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def store_behind_front(
    registry: Registry, tmp_path: Path, **front_options: Any
) -> AsyncIterator[tuple[RegistryFront, DockerStore]]:
    """A store pulling through a `RegistryFront` of `registry`; both closed afterwards."""
    front = await RegistryFront(registry, **front_options).start()
    store = DockerStore(os.path.join(tmp_path, "store"), front.url)
    try:
        yield front, store
    finally:
        await store.close()
        await front.close()


def corrupt(path: str) -> None:
    """Change bytes in the middle of a file, keeping its size."""
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 64)


def staging_is_empty(store: DockerStore) -> bool:
    return os.listdir(os.path.join(store.store_dir, "staging")) == []


async def test_pull_by_tag_extracts_every_layer(
    store: DockerStore, busybox_image: PushedImage, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="mesilla.containerizer.provisioner"):
        image, layers = await store.get(busybox_image.name, "rootfs")

    for layer in busybox_image.image.layers:  # progress is logged per layer
        assert f"Downloading layer {layer.digest}" in caplog.text
        assert f"Layer {layer.digest} of '{image.name}' is in the store" in caplog.text

    assert image.manifest_digest == busybox_image.digest
    assert image.layers == [layer.digest for layer in busybox_image.image.layers]
    assert os.path.isfile(os.path.join(layers[0], "bin", "busybox"))
    assert os.path.isfile(os.path.join(layers[1], "etc", ".wh.removed-by-upper"))
    assert image.config["config"]["Cmd"] == ["/bin/sh"]
    assert staging_is_empty(store)


async def test_pull_by_digest(
    store: DockerStore, busybox_image: PushedImage, docker_registry: Registry
) -> None:
    name = f"{docker_registry.host}/{busybox_image.repository}@{busybox_image.digest}"

    image, _ = await store.get(name, "rootfs")

    assert image.manifest_digest == busybox_image.digest
    assert image.name == name


async def test_unknown_image_is_not_found(
    store: DockerStore, docker_registry: Registry
) -> None:
    with pytest.raises(ImageNotFound, match="nosuch"):
        await store.get(f"{docker_registry.host}/library/nosuch:latest", "rootfs")


async def test_short_name_uses_the_default_registry(
    store: DockerStore, busybox_image: PushedImage
) -> None:
    # Not Docker Hub, so no `library/` prefix is added: the repository is as written.
    image, _ = await store.get("library/busybox", "rootfs")

    assert image.manifest_digest == busybox_image.digest


async def test_oci_manifest_pushed_in_chunks(
    store: DockerStore, docker_registry: Registry
) -> None:
    built = unique_image(oci=True)
    digest = push_image(
        docker_registry.url, "chunked/oci", "v1", built, chunk_size=64 * 1024
    )

    image, layers = await store.get(f"{docker_registry.host}/chunked/oci:v1", "rootfs")

    assert image.manifest_digest == digest
    assert os.path.isfile(os.path.join(layers[0], "etc", "test-id"))


async def test_index_selects_this_hosts_platform(
    store: DockerStore, docker_registry: Registry
) -> None:
    foreign = "s390x" if host_architecture() != "s390x" else "arm64"
    images = [
        (
            build_image(architecture=foreign, env=["WHICH=foreign"], oci=True),
            Platform(foreign),
        ),
        (build_image(env=["WHICH=host"], oci=True), Platform(host_architecture())),
        (
            build_image(env=["WHICH=windows"], oci=True),
            Platform(host_architecture(), os="windows"),
        ),
    ]
    push_index(docker_registry.url, "multi/arch", "latest", images)

    image, _ = await store.get(f"{docker_registry.host}/multi/arch:latest", "rootfs")

    assert image.config["config"]["Env"] == ["WHICH=host"]
    assert image.manifest_digest == images[1][0].manifest_digest


async def test_manifest_list_without_this_platform_is_refused(
    store: DockerStore, docker_registry: Registry
) -> None:
    from mesilla.containerizer.provisioner.errors import UnsupportedImage
    from mesilla.testing.images import DOCKER_MANIFEST_LIST

    foreign = "s390x" if host_architecture() != "s390x" else "arm64"
    push_index(
        docker_registry.url,
        "multi/foreign",
        "latest",
        [(build_image(architecture=foreign), Platform(foreign))],
        media_type=DOCKER_MANIFEST_LIST,
    )

    with pytest.raises(UnsupportedImage, match=f"linux/{foreign}"):
        await store.get(f"{docker_registry.host}/multi/foreign:latest", "rootfs")


async def test_corrupted_blob_is_rejected_and_leaves_no_layer(
    store: DockerStore, docker_registry: Registry
) -> None:
    built = unique_image()
    push_image(docker_registry.url, "corrupt/me", "latest", built)
    layer = built.layers[0]
    data_path = docker_registry.blob_data_path(layer.digest)
    corrupt(data_path)

    with pytest.raises(BlobDigestMismatch, match=layer.digest):
        await store.get(f"{docker_registry.host}/corrupt/me:latest", "rootfs")

    assert not os.path.exists(os.path.dirname(store.layer_path(layer.digest, "rootfs")))
    assert store.images() == []
    assert staging_is_empty(store)


async def test_interrupted_pull_leaves_nothing_and_retry_succeeds(
    docker_registry: Registry, tmp_path: Path
) -> None:
    built = unique_image()
    push_image(docker_registry.url, "flaky/net", "latest", built)
    async with store_behind_front(docker_registry, tmp_path) as (front, store):
        front.cut_blobs = True
        name = f"{front.host}/flaky/net:latest"
        with pytest.raises(RegistryError, match="broke off"):
            await store.get(name, "rootfs")
        assert os.listdir(os.path.join(store.store_dir, "layers", "sha256")) == []
        assert store.images() == []
        assert staging_is_empty(store)

        front.cut_blobs = False
        image, layers = await store.get(name, "rootfs")
        assert os.path.isfile(os.path.join(layers[0], "bin", "busybox"))
        assert image.manifest_digest == built.manifest_digest


async def test_manifest_not_matching_its_digest_header_is_rejected(
    docker_registry: Registry, busybox_image: PushedImage, tmp_path: Path
) -> None:
    async with store_behind_front(docker_registry, tmp_path) as (front, store):
        front.wrong_manifest_digest = True
        with pytest.raises(BlobDigestMismatch, match="Manifest"):
            await store.get(f"{front.host}/library/busybox:latest", "rootfs")
        assert store.images() == []


async def test_concurrent_pulls_download_each_layer_once(
    docker_registry: Registry, tmp_path: Path
) -> None:
    built = unique_image(with_whiteouts=True)
    push_image(docker_registry.url, "concurrent/one", "latest", built)
    push_image(docker_registry.url, "concurrent/two", "latest", built)
    before = {
        layer.digest: docker_registry.blob_fetches(layer.digest)
        for layer in built.layers
    }
    progress: list[PullProgress] = []
    store = DockerStore(
        os.path.join(tmp_path, "store"), docker_registry.url, progress=progress.append
    )
    try:
        results = await asyncio.gather(
            *(
                store.get(f"{docker_registry.host}/concurrent/one:latest", "rootfs")
                for _ in range(3)
            ),
            store.get(f"{docker_registry.host}/concurrent/two:latest", "rootfs"),
        )
    finally:
        await store.close()

    assert (
        len({tuple(paths) for _, paths in results}) == 1
    )  # layers shared between images
    for layer in built.layers:
        assert docker_registry.blob_fetches(layer.digest) - before[layer.digest] == 1
    finished = {p.layer for p in progress if p.total is not None and p.done == p.total}
    assert finished == {layer.digest for layer in built.layers}


async def test_cached_image_is_not_pulled_again(
    store: DockerStore, docker_registry: Registry
) -> None:
    built = unique_image()
    push_image(docker_registry.url, "cached/image", "latest", built)
    name = f"{docker_registry.host}/cached/image:latest"
    await store.get(name, "rootfs")
    layer = built.layers[0]
    fetched = docker_registry.blob_fetches(layer.digest)

    await store.get(name, "rootfs")

    assert docker_registry.blob_fetches(layer.digest) == fetched


async def test_uncached_image_is_pulled_again(
    store: DockerStore, docker_registry: Registry
) -> None:
    name = f"{docker_registry.host}/moving/tag:latest"
    first, second = unique_image(), unique_image()
    push_image(docker_registry.url, "moving/tag", "latest", first)
    await store.get(name, "rootfs")
    push_image(docker_registry.url, "moving/tag", "latest", second)

    cached, _ = await store.get(name, "rootfs")
    fresh, _ = await store.get(name, "rootfs", cached=False)

    assert cached.manifest_digest == first.manifest_digest
    assert fresh.manifest_digest == second.manifest_digest
    assert (await store.get(name, "rootfs"))[
        0
    ].manifest_digest == second.manifest_digest


async def test_bearer_token_auth(
    docker_registry: Registry, busybox_image: PushedImage, tmp_path: Path
) -> None:
    async with store_behind_front(
        docker_registry,
        tmp_path,
        token="s3cret",
        user="alice",
        password="pw",
    ) as (front, store):
        name = f"{front.host}/library/busybox:latest"
        with pytest.raises(RegistryAuthError, match="token"):
            await store.get(name, "rootfs")

        image, _ = await store.get(name, "rootfs", credential=Credential("alice", "pw"))

        assert image.manifest_digest == busybox_image.digest
        assert front.token_requests[-1] == {
            "scope": "repository:library/busybox:pull",
            "service": "mesilla-test",
        }


async def test_close_stops_a_pull_and_leaves_nothing(
    docker_registry: Registry, tmp_path: Path
) -> None:
    built = unique_image()
    push_image(docker_registry.url, "closed/early", "latest", built)
    async with store_behind_front(docker_registry, tmp_path) as (front, store):
        front.stall_blobs = True
        pull = asyncio.create_task(
            store.get(f"{front.host}/closed/early:latest", "rootfs")
        )
        await front.stalled.wait()  # the layer download is under way

        await store.close()

        with pytest.raises(asyncio.CancelledError):
            await pull
        assert staging_is_empty(store)
        assert os.listdir(os.path.join(store.store_dir, "layers", "sha256")) == []


PULL_SCRIPT = """
import asyncio, sys
from mesilla.containerizer.provisioner.stores.docker import DockerStore

async def main():
    store = DockerStore(sys.argv[1], sys.argv[2])
    await store.get(sys.argv[3], "rootfs")

asyncio.run(main())
"""


async def test_a_pull_killed_mid_layer_is_cleared_by_recover(
    docker_registry: Registry, tmp_path: Path
) -> None:
    built = unique_image()
    push_image(docker_registry.url, "crash/mid", "latest", built)
    front = await RegistryFront(docker_registry).start()
    front.stall_blobs = True
    store_dir = os.path.join(tmp_path, "store")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PULL_SCRIPT,
        store_dir,
        front.url,
        f"{front.host}/crash/mid:latest",
    )
    try:
        await front.stalled.wait()  # half a layer is on disk, in staging
        assert os.listdir(os.path.join(store_dir, "staging")) != []
    finally:
        process.kill()
        await process.wait()
        await front.close()

    store = DockerStore(store_dir, docker_registry.url)
    await store.recover()
    try:
        assert staging_is_empty(store)
        assert os.listdir(os.path.join(store_dir, "layers", "sha256")) == []
        assert store.images() == []
        image, _ = await store.get(f"{docker_registry.host}/crash/mid:latest", "rootfs")
        assert image.manifest_digest == built.manifest_digest
    finally:
        await store.close()
