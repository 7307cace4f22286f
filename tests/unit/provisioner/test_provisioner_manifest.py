from __future__ import annotations

import pytest

from mesilla.containerizer.provisioner.errors import (
    BlobDigestMismatch,
    UnsupportedImage,
)
from mesilla.containerizer.provisioner.stores import manifest
from mesilla.containerizer.provisioner.stores.manifest import Descriptor

D1, D2, D3 = ("sha256:" + c * 64 for c in "123")


def index(*platforms: dict[str, str]) -> dict[str, object]:
    digests = [D1, D2, D3]
    return {
        "manifests": [
            {"digest": digests[i], "platform": p} for i, p in enumerate(platforms)
        ]
    }


def test_select_platform_picks_this_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest.platform, "machine", lambda: "x86_64")
    chosen = manifest.select_platform(
        index(
            {"os": "linux", "architecture": "arm64"},
            {"os": "windows", "architecture": "amd64"},
            {"os": "linux", "architecture": "amd64"},
        ),
        "test",
    )
    assert chosen.digest == D3


def test_select_platform_prefers_the_exact_variant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(manifest.platform, "machine", lambda: "armv7l")
    chosen = manifest.select_platform(
        index(
            {"os": "linux", "architecture": "arm", "variant": "v6"},
            {"os": "linux", "architecture": "arm", "variant": "v7"},
        ),
        "test",
    )
    assert chosen.digest == D2


def test_select_platform_names_what_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest.platform, "machine", lambda: "x86_64")
    with pytest.raises(UnsupportedImage, match=r"linux/amd64.*linux/s390x"):
        manifest.select_platform(
            index({"os": "linux", "architecture": "s390x"}), "Image 'x'"
        )


def test_schema1_is_refused_with_the_fix() -> None:
    with pytest.raises(UnsupportedImage, match="schema 1"):
        manifest.media_type_of(
            {"schemaVersion": 1},
            "application/vnd.docker.distribution.manifest.v1+prettyjws",
        )
    with pytest.raises(UnsupportedImage, match="schema 1"):
        manifest.media_type_of({}, "application/vnd.docker.distribution.manifest.v1+json")


def test_media_type_from_header_or_shape() -> None:
    assert manifest.media_type_of({"layers": []}, "") == manifest.OCI_MANIFEST
    assert manifest.media_type_of({"manifests": []}, None) == manifest.OCI_INDEX
    assert (
        manifest.media_type_of({}, manifest.DOCKER_MANIFEST + "; charset=utf-8")
        == manifest.DOCKER_MANIFEST
    )


def test_manifest_parts_checks_digests_and_layer_types() -> None:
    good = {
        "config": {"digest": D1},
        "layers": [
            {
                "digest": D2,
                "mediaType": manifest.OCI_MANIFEST.replace(
                    "manifest.v1+json", "layer.v1.tar+gzip"
                ),
            }
        ],
    }
    assert manifest.manifest_parts(good, "x") == (
        Descriptor(D1),
        [Descriptor(D2, "application/vnd.oci.image.layer.v1.tar+gzip")],
    )
    with pytest.raises(UnsupportedImage, match="zstd"):
        manifest.manifest_parts(
            {
                "config": {"digest": D1},
                "layers": [
                    {
                        "digest": D2,
                        "mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
                    }
                ],
            },
            "x",
        )
    with pytest.raises(UnsupportedImage, match="sha256"):
        manifest.manifest_parts(
            {"config": {"digest": "sha256:../../etc"}, "layers": []}, "x"
        )


def test_verify() -> None:
    manifest.verify(b"abc", manifest.digest_of(b"abc"), "blob")
    with pytest.raises(BlobDigestMismatch, match="expected"):
        manifest.verify(b"abd", manifest.digest_of(b"abc"), "blob")
