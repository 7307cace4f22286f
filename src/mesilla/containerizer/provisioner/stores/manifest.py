"""Image manifests and indexes (Docker v2 schema 2 and OCI), as pullers see them.

Both pullers (registry and local archive) resolve an image to the same thing:
a `ResolvedImage` with the config blob parsed and the ordered layer
descriptors, after picking this host's platform out of an index.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass, field
from typing import Any

from mesilla.containerizer.provisioner.errors import (
    BlobDigestMismatch,
    UnsupportedImage,
)
from mesilla.containerizer.provisioner.stores.reference import DIGEST

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFESTS = (DOCKER_MANIFEST, OCI_MANIFEST)
INDEXES = (DOCKER_MANIFEST_LIST, OCI_INDEX)
_SCHEMA1 = "application/vnd.docker.distribution.manifest.v1"
ACCEPT = ", ".join((*MANIFESTS, *INDEXES))

LAYER_MEDIA_TYPES = {
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
}

# Python's machine names -> OCI architecture (and variant).
_ARCHITECTURES = {
    "x86_64": ("amd64", None),
    "amd64": ("amd64", None),
    "aarch64": ("arm64", None),
    "arm64": ("arm64", None),
    "armv7l": ("arm", "v7"),
    "armv6l": ("arm", "v6"),
    "i686": ("386", None),
    "ppc64le": ("ppc64le", None),
    "s390x": ("s390x", None),
    "riscv64": ("riscv64", None),
}


@dataclass(frozen=True)
class Descriptor:
    digest: str
    media_type: str = ""
    size: int | None = None


@dataclass
class ResolvedImage:
    manifest_digest: str
    config: dict[str, Any]
    layers: list[Descriptor] = field(default_factory=list)


def host_platform() -> tuple[str, str, str | None]:
    """(os, architecture, variant) of this host in OCI terms."""
    machine = platform.machine().lower()
    architecture, variant = _ARCHITECTURES.get(machine, (machine, None))
    return "linux", architecture, variant


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def verify(data: bytes, digest: str, what: str) -> None:
    if not digest.startswith("sha256:"):
        raise UnsupportedImage(
            f"{what} has digest '{digest}': only sha256 digests are supported"
        )
    actual = digest_of(data)
    if actual != digest:
        raise BlobDigestMismatch(f"{what} has digest {actual}, expected {digest}")


def load_json(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise UnsupportedImage(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UnsupportedImage(f"{what} is not a JSON object")
    return value


def media_type_of(document: dict[str, Any], header: str | None) -> str:
    """A manifest's media type, from its `mediaType` field or the HTTP Content-Type."""
    media_type = document.get("mediaType") or (header or "").split(";")[0].strip()
    if not media_type and "manifests" in document:
        return OCI_INDEX
    if not media_type and "layers" in document:
        return OCI_MANIFEST
    if document.get("schemaVersion") == 1 or media_type.startswith(_SCHEMA1):
        raise UnsupportedImage(
            "Docker image manifest schema 1 is not supported: push the image with schema 2"
        )
    return media_type


def select_platform(index: dict[str, Any], what: str) -> Descriptor:
    """The manifest of an index for this host (os, architecture, and variant if given)."""
    host_os, architecture, variant = host_platform()
    candidates = []
    for entry in index.get("manifests", []):
        plat = entry.get("platform") or {}
        if (
            plat.get("os", host_os) != host_os
            or plat.get("architecture", architecture) != architecture
        ):
            continue
        exact_variant = variant is None or plat.get("variant") in (None, variant)
        candidates.append((not exact_variant, descriptor(entry, what)))
    if not candidates:
        platforms = [e.get("platform") or {} for e in index.get("manifests", [])]
        available = sorted(
            f"{p.get('os', '?')}/{p.get('architecture', '?')}" for p in platforms
        )
        raise UnsupportedImage(
            f"{what} has no manifest for this host's platform {host_os}/{architecture} "
            f"(it has: {', '.join(available) or 'none'})"
        )
    candidates.sort(key=lambda pair: pair[0])
    return candidates[0][1]


def manifest_parts(
    manifest: dict[str, Any], what: str
) -> tuple[Descriptor, list[Descriptor]]:
    """(config descriptor, layer descriptors bottom first) of an image manifest."""
    if "config" not in manifest or "layers" not in manifest:
        raise UnsupportedImage(f"{what} is not an image manifest (no config or layers)")
    layers = [descriptor(layer, what) for layer in manifest["layers"]]
    for layer in layers:
        if layer.media_type and layer.media_type not in LAYER_MEDIA_TYPES:
            raise UnsupportedImage(
                f"{what} has layer {layer.digest} of media type '{layer.media_type}', "
                "which is not supported (only tar and tar+gzip layers are)"
            )
    return descriptor(manifest["config"], what), layers


def checked_digest(digest: Any, what: str) -> str:
    """`digest` if it is a well-formed sha256 digest (it becomes part of paths and URLs)."""
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise UnsupportedImage(
            f"{what} has digest '{digest}': expected sha256:<64 hex digits>"
        )
    return digest


def descriptor(entry: Any, what: str) -> Descriptor:
    if not isinstance(entry, dict):
        raise UnsupportedImage(f"{what} has a descriptor that is not an object")
    digest = checked_digest(entry.get("digest"), what)
    return Descriptor(digest, entry.get("mediaType", ""), entry.get("size"))
