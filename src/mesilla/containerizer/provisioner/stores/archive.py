"""Images from a local directory (`--docker_registry=/some/dir`), as Mesos's
image tarball puller: `docker save` tarballs and OCI image layouts.

For the image `name` (e.g. `busybox:latest`), it looks for, in order,
`<dir>/<name>.tar`, `<dir>/<repository>:<tag>.tar`, then an OCI layout
directory `<dir>/<name>` or `<dir>/<repository>` (a tarball of an OCI layout
works too). Every blob is checked against its digest as it is copied out:
layers of a classic `docker save` against the config's `rootfs.diff_ids`,
everything else against the digest in its `blobs/sha256/<hex>` name.

The calls are blocking; the store runs them in a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tarfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import IO, Any

from mesilla.common import files
from mesilla.containerizer.provisioner.errors import (
    BlobDigestMismatch,
    ImageNotFound,
    UnsupportedImage,
)
from mesilla.containerizer.provisioner.stores import manifest as manifests
from mesilla.containerizer.provisioner.stores.manifest import Descriptor, ResolvedImage
from mesilla.containerizer.provisioner.stores.reference import (
    DEFAULT_TAG,
    ImageReference,
)

_REF_NAME = "org.opencontainers.image.ref.name"


# Opens a member of the image (a file of the layout, or of the tarball) for reading.
_Opener = Callable[[str], AbstractContextManager[IO[bytes]]]


class ArchiveSource:
    """One image found in the local directory; `resolve` first, then `fetch_blob`."""

    def __init__(self, directory: str, name: str, reference: ImageReference) -> None:
        self.name = name
        self.reference = reference
        self.tag = reference.tag or DEFAULT_TAG
        self.path, self._open = _locate(directory, name, reference)
        # digest -> member path inside the tarball or layout directory.
        self._members: dict[str, str] = {}

    def resolve(self) -> ResolvedImage:
        if self._exists("manifest.json"):
            return self._resolve_docker_save()
        if self._exists("index.json"):
            return self._resolve_oci_layout()
        raise UnsupportedImage(
            f"'{self.path}' is neither a docker save archive (manifest.json) nor an "
            "OCI image layout (index.json)"
        )

    def fetch_blob(self, blob: Descriptor, target: str) -> None:
        member = self._members.get(blob.digest) or _blob_path(blob.digest)
        hasher = hashlib.sha256()
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with self._open(member) as source, os.fdopen(fd, "wb") as out:
            while chunk := source.read(1 << 20):
                hasher.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if "sha256:" + hasher.hexdigest() != blob.digest:
            files.remove_file(os.path.dirname(target), target)
            raise BlobDigestMismatch(
                f"Blob '{member}' of image archive '{self.path}' does not match its digest "
                f"{blob.digest}: the archive is corrupted"
            )

    def _resolve_docker_save(self) -> ResolvedImage:
        entries = json.loads(self._read("manifest.json"))
        wanted = {self.name, f"{self.reference.repository}:{self.tag}"}
        entry = next(
            (e for e in entries if wanted & set(e.get("RepoTags") or [])),
            entries[0] if len(entries) == 1 else None,
        )
        if entry is None:
            raise ImageNotFound(
                f"Archive '{self.path}' has no image tagged '{self.name}'"
            )
        config_bytes = self._read(entry["Config"])
        config_digest = _digest_in_name(entry["Config"]) or manifests.digest_of(
            config_bytes
        )
        manifests.verify(
            config_bytes, config_digest, f"Config of archive '{self.path}'"
        )
        config = manifests.load_json(config_bytes, f"Config of archive '{self.path}'")
        diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
        if len(diff_ids) != len(entry["Layers"]):
            raise UnsupportedImage(
                f"Archive '{self.path}' lists {len(entry['Layers'])} layers but its config has "
                f"{len(diff_ids)} diff_ids"
            )
        layers = []
        for member, diff_id in zip(entry["Layers"], diff_ids, strict=True):
            digest = _digest_in_name(member) or manifests.checked_digest(
                diff_id, self.path
            )
            self._members[digest] = member
            layers.append(Descriptor(digest, "application/vnd.oci.image.layer.v1.tar"))
        return ResolvedImage(config_digest, config, layers)

    def _resolve_oci_layout(self) -> ResolvedImage:
        what = f"OCI layout '{self.path}'"
        index = manifests.load_json(self._read("index.json"), what)
        descriptor = self._pick(index, what)
        body = self._read(_blob_path(descriptor.digest))
        manifests.verify(body, descriptor.digest, f"Manifest of {what}")
        document = manifests.load_json(body, f"Manifest of {what}")
        if (
            manifests.media_type_of(document, descriptor.media_type)
            in manifests.INDEXES
        ):
            descriptor = manifests.select_platform(document, what)
            body = self._read(_blob_path(descriptor.digest))
            manifests.verify(body, descriptor.digest, f"Manifest of {what}")
            document = manifests.load_json(body, f"Manifest of {what}")
        config_descriptor, layers = manifests.manifest_parts(document, what)
        config_bytes = self._read(_blob_path(config_descriptor.digest))
        manifests.verify(config_bytes, config_descriptor.digest, f"Config of {what}")
        return ResolvedImage(
            descriptor.digest, manifests.load_json(config_bytes, what), layers
        )

    def _pick(self, index: dict[str, Any], what: str) -> Descriptor:
        """The index entry named by the tag, else the only one, else this host's platform."""
        entries = index.get("manifests") or []
        for entry in entries:
            ref_name = (entry.get("annotations") or {}).get(_REF_NAME)
            if ref_name in (
                self.tag,
                self.name,
                f"{self.reference.repository}:{self.tag}",
            ):
                return manifests.descriptor(entry, what)
        if len(entries) == 1:
            return manifests.descriptor(entries[0], what)
        return manifests.select_platform(index, what)

    def _exists(self, member: str) -> bool:
        try:
            with self._open(member):
                pass
        except (FileNotFoundError, KeyError):
            return False
        return True

    def _read(self, member: str) -> bytes:
        try:
            with self._open(member) as f:
                return f.read()
        except (FileNotFoundError, KeyError):
            raise UnsupportedImage(f"'{self.path}' lacks '{member}'") from None


def _locate(
    directory: str, name: str, reference: ImageReference
) -> tuple[str, _Opener]:
    tag = reference.tag or DEFAULT_TAG
    tarballs = [f"{name}.tar", f"{reference.repository}:{tag}.tar"]
    layouts = [name, reference.repository]
    for candidate in tarballs:
        path = os.path.join(directory, candidate)
        if os.path.isfile(path):
            return path, _tar_opener(path)
    for candidate in layouts:
        path = os.path.join(directory, candidate)
        if os.path.isfile(os.path.join(path, "oci-layout")):
            return path, _directory_opener(path)
    tried = ", ".join(
        os.path.join(directory, c) for c in dict.fromkeys(tarballs + layouts)
    )
    raise ImageNotFound(
        f"Image '{name}' not found in local directory '{directory}' (tried {tried}): "
        "put a `docker save` tarball or an OCI layout there"
    )


def _directory_opener(root: str) -> _Opener:
    def open_member(member: str) -> AbstractContextManager[IO[bytes]]:
        return open(os.path.join(root, member), "rb")

    return open_member


def _tar_opener(path: str) -> _Opener:
    @contextlib.contextmanager
    def open_member(member: str) -> Iterator[IO[bytes]]:
        with tarfile.open(path, "r:") as tar:
            source = tar.extractfile(os.path.normpath(member))
            if source is None:
                raise KeyError(member)
            with source:
                yield source

    return open_member


def _blob_path(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _digest_in_name(member: str) -> str | None:
    """`sha256:<hex>` when a member is named by its digest (`blobs/sha256/<hex>`, `<hex>.json`)."""
    base = os.path.basename(member).removesuffix(".json")
    if len(base) == 64 and all(c in "0123456789abcdef" for c in base):
        return f"sha256:{base}"
    return None
