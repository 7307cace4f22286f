from __future__ import annotations

import pytest

from mesilla.containerizer.provisioner.errors import ImageReferenceError
from mesilla.containerizer.provisioner.stores.reference import ImageReference, parse

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("busybox", ImageReference(None, "busybox")),
        ("library/busybox:latest", ImageReference(None, "library/busybox", "latest")),
        (
            "127.0.0.1:5000/team/app:v1.2",
            ImageReference("127.0.0.1:5000", "team/app", "v1.2"),
        ),
        ("localhost/app", ImageReference("localhost", "app")),
        ("registry.example.com/a/b/c", ImageReference("registry.example.com", "a/b/c")),
        (f"repo@{DIGEST}", ImageReference(None, "repo", None, DIGEST)),
        (
            f"host:5000/repo:tag@{DIGEST}",
            ImageReference("host:5000", "repo", "tag", DIGEST),
        ),
        ("my_org/my-app__x", ImageReference(None, "my_org/my-app__x")),
    ],
)
def test_parse(name: str, expected: ImageReference) -> None:
    assert parse(name) == expected


def test_reference_prefers_digest_then_tag_then_latest() -> None:
    assert parse("a").reference == "latest"
    assert parse("a:1").reference == "1"
    assert parse(f"a:1@{DIGEST}").reference == DIGEST
    assert str(parse("h:1/a")) == "h:1/a:latest"
    assert str(parse(f"a@{DIGEST}")) == f"a@{DIGEST}"


@pytest.mark.parametrize(
    "name",
    [
        "",
        " busybox",
        "BusyBox",
        "repo@sha256:short",
        "repo:ta$g",
        "a//b",
        "repo:",
        "-x",
        # What would climb out of the store's or the local image directory's paths.
        "..",
        "../../etc",
        "a/../b",
        "a/./b",
        "localhost/../x",
        "..:5000/x",
        "../..:5000/x",
        "%2e%2e/x",
        "a\\b",
        "a\0b",
        "repo:../x",
        "repo@sha256:../../etc",
    ],
)
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(ImageReferenceError):
        parse(name)


def test_docker_hub_official_images_get_library() -> None:
    from mesilla.containerizer.provisioner.stores.registry_client import normalize

    assert (
        normalize(parse("busybox"), "registry-1.docker.io").repository
        == "library/busybox"
    )
    assert (
        normalize(parse("docker.io/busybox"), "127.0.0.1:5000").repository
        == "library/busybox"
    )
    assert normalize(parse("team/app"), "registry-1.docker.io").repository == "team/app"
    assert normalize(parse("busybox"), "127.0.0.1:5000").repository == "busybox"
