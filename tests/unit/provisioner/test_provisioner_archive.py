"""The docker store loading images from a local directory: `docker save`
tarballs and OCI image layouts (`--docker_registry=/some/dir`)."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mesilla.containerizer.provisioner.errors import BlobDigestMismatch, ImageNotFound
from mesilla.containerizer.provisioner.stores.docker import DockerStore
from mesilla.testing.images import (
    Platform,
    build_image,
    host_architecture,
    write_docker_save,
    write_oci_layout,
)


@pytest.fixture
def images_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "images"
    directory.mkdir()
    return directory


@pytest.fixture
async def store(tmp_path: Path, images_dir: Path) -> AsyncIterator[DockerStore]:
    store = DockerStore(str(tmp_path / "store"), str(images_dir))
    yield store
    await store.close()


async def test_docker_save_tarball(store: DockerStore, images_dir: Path) -> None:
    built = build_image(with_whiteouts=True, env=["FROM=tarball"])
    write_docker_save(built, str(images_dir / "busybox:latest.tar"), ["busybox:latest"])

    image, layers = await store.get("busybox", "rootfs")

    assert image.name == "busybox"
    assert image.config["config"]["Env"] == ["FROM=tarball"]
    assert image.layers == [layer.diff_id for layer in built.layers]
    assert (Path(layers[0]) / "bin" / "busybox").is_file()
    assert (Path(layers[1]) / "etc" / ".wh.removed-by-upper").is_file()


async def test_docker_save_tarball_by_full_name(
    store: DockerStore, images_dir: Path
) -> None:
    (images_dir / "team").mkdir()
    write_docker_save(
        build_image(env=["X=v1"]),
        str(images_dir / "team" / "app:v1.tar"),
        ["team/app:v1"],
    )

    image, _ = await store.get("team/app:v1", "rootfs")

    assert image.config["config"]["Env"] == ["X=v1"]


async def test_oci_layout_by_tag(store: DockerStore, images_dir: Path) -> None:
    built = build_image(oci=True, env=["FROM=layout"])
    write_oci_layout(str(images_dir / "app"), [(built, None)], ref_name="v2")

    image, layers = await store.get("app:v2", "rootfs")

    assert image.manifest_digest == built.manifest_digest
    assert image.layers == [layer.digest for layer in built.layers]
    assert (Path(layers[0]) / "etc" / "base-marker").read_text() == "base\n"


async def test_oci_layout_index_selects_this_platform(
    store: DockerStore, images_dir: Path
) -> None:
    foreign = "s390x" if host_architecture() != "s390x" else "arm64"
    host = build_image(oci=True, env=["WHICH=host"])
    write_oci_layout(
        str(images_dir / "multi"),
        [
            (
                build_image(oci=True, architecture=foreign, env=["WHICH=foreign"]),
                Platform(foreign),
            ),
            (host, Platform(host_architecture())),
        ],
    )

    image, _ = await store.get("multi", "rootfs")

    assert image.config["config"]["Env"] == ["WHICH=host"]
    assert image.manifest_digest == host.manifest_digest


async def test_missing_image_names_the_paths_tried(
    store: DockerStore, images_dir: Path
) -> None:
    with pytest.raises(ImageNotFound, match=r"nothing:latest\.tar"):
        await store.get("nothing", "rootfs")


async def test_corrupted_layer_in_tarball_is_rejected(
    store: DockerStore, images_dir: Path, tmp_path: Path
) -> None:
    built = build_image()
    good = tmp_path / "good.tar"
    write_docker_save(built, str(good), ["bad:latest"])
    # Rewrite the archive with one byte of the layer changed.
    with (
        tarfile.open(good) as source,
        tarfile.open(images_dir / "bad:latest.tar", "w") as target,
    ):
        for member in source:
            data = source.extractfile(member) if member.isfile() else None
            if member.name.endswith("layer.tar"):
                content = bytearray(data.read())  # type: ignore[union-attr]
                content[-2000] ^= 0xFF
                data = io.BytesIO(bytes(content))
            target.addfile(member, data)

    with pytest.raises(BlobDigestMismatch, match="corrupted"):
        await store.get("bad", "rootfs")
    assert os.listdir(os.path.join(store.store_dir, "layers", "sha256")) == []
    assert os.listdir(os.path.join(store.store_dir, "staging")) == []


async def test_recover_clears_leftovers(tmp_path: Path, images_dir: Path) -> None:
    store = DockerStore(str(tmp_path / "store"), str(images_dir))
    leftover = tmp_path / "store" / "staging" / "layer-crashed" / "rootfs"
    leftover.mkdir(parents=True)
    (tmp_path / "store" / "images" / ".tmp-abc").write_text("{partial")

    await store.recover()

    assert os.listdir(tmp_path / "store" / "staging") == []
    assert store.images() == []
    await store.close()
