"""Test images built from Debian's busybox-static, never downloaded.

`build_image()` makes a small image: a base layer with `/bin/busybox`, its
applets as symlinks, `/etc/passwd` and a few marker files, and optionally a
second layer with whiteouts (it deletes `/etc/removed-by-upper` and makes
`/opt/dir` opaque, hiding `/opt/dir/lower-file`). Bytes are deterministic, so
digests are stable across runs.

The image can be written as a `docker save` tarball (`write_docker_save`), as
an OCI image layout (`write_oci_layout`), or pushed to a registry with the
Registry HTTP API v2 in one request or in chunks (`push_image`, `push_index`).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import platform
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

BUSYBOX = "/bin/busybox"
APPLETS = (
    "sh",
    "ls",
    "cat",
    "echo",
    "true",
    "false",
    "sleep",
    "env",
    "id",
    "pwd",
    "test",
    "mkdir",
    "rm",
    "touch",
    "ps",
    "kill",
    "hostname",
    "cp",
    "mv",
    "wc",
    "head",
    "grep",
    "sed",
    "dd",
    "whoami",
    "stat",
    "readlink",
    "uname",
    "yes",
    "seq",
    "find",
    "chmod",
    "printf",
    "mount",
)
MTIME = 1_700_000_000

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Layer:
    tar: bytes  # uncompressed

    @functools.cached_property
    def gzipped(self) -> bytes:
        return _gzip(self.tar)

    @functools.cached_property
    def diff_id(self) -> str:
        return sha256(self.tar)

    @functools.cached_property
    def digest(self) -> str:
        """The digest of the gzipped blob, as registries and OCI layouts address it."""
        return sha256(self.gzipped)


@functools.lru_cache(maxsize=16)
def _gzip(data: bytes) -> bytes:
    # Deterministic (no timestamp); cached because tests build the same layers often.
    return gzip.compress(data, compresslevel=6, mtime=0)


@dataclass
class BuiltImage:
    layers: list[Layer]
    config: dict[str, Any]
    oci: bool = False  # media types: OCI, else Docker schema 2

    @property
    def config_bytes(self) -> bytes:
        return json.dumps(self.config, sort_keys=True).encode()

    @property
    def config_digest(self) -> str:
        return sha256(self.config_bytes)

    @property
    def media_type(self) -> str:
        return OCI_MANIFEST if self.oci else DOCKER_MANIFEST

    @property
    def manifest_bytes(self) -> bytes:
        layer_type = OCI_LAYER if self.oci else DOCKER_LAYER
        manifest = {
            "schemaVersion": 2,
            "mediaType": self.media_type,
            "config": {
                "mediaType": OCI_CONFIG if self.oci else DOCKER_CONFIG,
                "size": len(self.config_bytes),
                "digest": self.config_digest,
            },
            "layers": [
                {
                    "mediaType": layer_type,
                    "size": len(layer.gzipped),
                    "digest": layer.digest,
                }
                for layer in self.layers
            ],
        }
        return json.dumps(manifest, sort_keys=True).encode()

    @property
    def manifest_digest(self) -> str:
        return sha256(self.manifest_bytes)

    def blobs(self) -> dict[str, bytes]:
        return {self.config_digest: self.config_bytes} | {
            layer.digest: layer.gzipped for layer in self.layers
        }


@dataclass
class Platform:
    architecture: str
    os: str = "linux"
    variant: str | None = None

    def as_json(self) -> dict[str, str]:
        value = {"architecture": self.architecture, "os": self.os}
        return value | ({"variant": self.variant} if self.variant else {})


def host_architecture() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def base_layer(extra_files: dict[str, bytes] | None = None) -> Layer:
    """busybox with its applets, /etc/passwd, and marker files the whiteout layer hides."""
    return _base_layer(tuple(sorted((extra_files or {}).items())))


@functools.lru_cache(maxsize=16)
def _base_layer(extra_files: tuple[tuple[str, bytes], ...]) -> Layer:
    builder = _TarBuilder()
    # /mnt/mesos/sandbox: where the sandbox is mounted, present even in a read-only rootfs.
    directories = (
        "bin",
        "dev",
        "etc",
        "proc",
        "sys",
        "root",
        "opt",
        "opt/dir",
        "usr",
        "mnt",
        "mnt/mesos",
        "mnt/mesos/sandbox",
    )
    for directory in directories:
        builder.directory(directory)
    builder.directory("tmp", 0o1777)
    with open(BUSYBOX, "rb") as f:
        builder.file("bin/busybox", f.read(), 0o755)
    for applet in APPLETS:
        builder.symlink(f"bin/{applet}", "busybox")
    builder.file(
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )
    builder.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    builder.file("etc/removed-by-upper", b"the upper layer deletes me\n")
    builder.file("opt/dir/lower-file", b"hidden by the opaque upper directory\n")
    builder.file("etc/base-marker", b"base\n")
    for path, content in extra_files:
        builder.file(path, content)
    return Layer(builder.getvalue())


def whiteout_layer() -> Layer:
    builder = _TarBuilder()
    builder.directory("etc")
    builder.file("etc/.wh.removed-by-upper", b"")
    builder.file("etc/upper-marker", b"upper\n")
    builder.directory("opt")
    builder.directory("opt/dir")
    builder.file("opt/dir/.wh..wh..opq", b"")
    builder.file("opt/dir/upper-file", b"from the upper layer\n")
    return Layer(builder.getvalue())


def build_image(
    *,
    with_whiteouts: bool = False,
    entrypoint: list[str] | None = None,
    cmd: list[str] | None = None,
    env: list[str] | None = None,
    working_dir: str = "",
    user: str = "",
    architecture: str | None = None,
    oci: bool = False,
    extra_files: dict[str, bytes] | None = None,
) -> BuiltImage:
    layers = [base_layer(extra_files)] + ([whiteout_layer()] if with_whiteouts else [])
    config = {
        "architecture": architecture or host_architecture(),
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": {
            "Entrypoint": entrypoint,
            "Cmd": ["/bin/sh"] if cmd is None else cmd,
            "Env": env if env is not None else ["PATH=/bin:/usr/bin"],
            "WorkingDir": working_dir,
            "User": user,
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
    }
    return BuiltImage(layers, config, oci)


def write_docker_save(image: BuiltImage, path: str, repo_tags: list[str]) -> None:
    """A tarball laid out as `docker save` writes it (uncompressed layers, manifest.json)."""
    builder = _TarBuilder()
    layer_paths = []
    for layer in image.layers:
        hexdigest = layer.diff_id.split(":", 1)[1]
        builder.directory(hexdigest)
        builder.file(f"{hexdigest}/layer.tar", layer.tar)
        builder.file(f"{hexdigest}/VERSION", b"1.0")
        layer_paths.append(f"{hexdigest}/layer.tar")
    config_name = image.config_digest.split(":", 1)[1] + ".json"
    builder.file(config_name, image.config_bytes)
    manifest = [{"Config": config_name, "RepoTags": repo_tags, "Layers": layer_paths}]
    builder.file("manifest.json", json.dumps(manifest).encode())
    repositories: dict[str, dict[str, str]] = {}
    for repo_tag in repo_tags:
        repo, _, tag = repo_tag.rpartition(":")
        repositories.setdefault(repo, {})[tag] = layer_paths[-1].split("/")[0]
    builder.file("repositories", json.dumps(repositories).encode())
    with open(path, "wb") as f:
        f.write(builder.getvalue())


def write_oci_layout(
    directory: str,
    images: list[tuple[BuiltImage, Platform | None]],
    ref_name: str | None = "latest",
) -> str:
    """An OCI image layout; with several images, `index.json` points at an image index
    of them by platform. Returns the digest `index.json` refers to."""
    blobs: dict[str, bytes] = {}
    for image, _ in images:
        blobs |= image.blobs()
        blobs[image.manifest_digest] = image.manifest_bytes
    if len(images) == 1:
        top_type, top_bytes = images[0][0].media_type, images[0][0].manifest_bytes
    else:
        top_type, top_bytes = OCI_INDEX, _index_bytes(images, OCI_INDEX)
    top_digest = sha256(top_bytes)
    blobs[top_digest] = top_bytes
    os.makedirs(os.path.join(directory, "blobs", "sha256"), exist_ok=True)
    for digest, data in blobs.items():
        with open(
            os.path.join(directory, "blobs", "sha256", digest.split(":", 1)[1]), "wb"
        ) as f:
            f.write(data)
    entry: dict[str, Any] = {
        "mediaType": top_type,
        "digest": top_digest,
        "size": len(top_bytes),
    }
    if ref_name:
        entry["annotations"] = {"org.opencontainers.image.ref.name": ref_name}
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}
    with open(os.path.join(directory, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(directory, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return top_digest


def push_image(
    registry_url: str,
    repository: str,
    tag: str,
    image: BuiltImage,
    *,
    chunk_size: int | None = None,
) -> str:
    """Push blobs (monolithic, or in `chunk_size` PATCHes) then the manifest; returns its digest."""
    for digest, data in image.blobs().items():
        push_blob(registry_url, repository, digest, data, chunk_size=chunk_size)
    return put_manifest(
        registry_url, repository, tag, image.manifest_bytes, image.media_type
    )


def push_index(
    registry_url: str,
    repository: str,
    tag: str,
    images: list[tuple[BuiltImage, Platform | None]],
    *,
    media_type: str = OCI_INDEX,
) -> str:
    """Push every image by digest and a multi-platform index (or manifest list) under `tag`."""
    for image, _ in images:
        push_image(registry_url, repository, image.manifest_digest, image)
    return put_manifest(
        registry_url, repository, tag, _index_bytes(images, media_type), media_type
    )


def push_blob(
    registry_url: str,
    repository: str,
    digest: str,
    data: bytes,
    *,
    chunk_size: int | None = None,
) -> None:
    if (
        _request(
            "HEAD", f"{registry_url}/v2/{repository}/blobs/{digest}", ok=(200, 404)
        )[0]
        == 200
    ):
        return
    _, headers = _request(
        "POST", f"{registry_url}/v2/{repository}/blobs/uploads/", ok=(202,)
    )
    location = urllib.parse.urljoin(registry_url, headers["Location"])
    body = data
    if chunk_size:
        for start in range(0, len(data), chunk_size):
            chunk = data[start : start + chunk_size]
            _, headers = _request(
                "PATCH",
                location,
                chunk,
                ok=(202,),
                headers={"Content-Range": f"{start}-{start + len(chunk) - 1}"},
            )
            location = urllib.parse.urljoin(registry_url, headers["Location"])
        body = b""
    separator = "&" if "?" in location else "?"
    _request(
        "PUT",
        f"{location}{separator}digest={urllib.parse.quote(digest)}",
        body,
        ok=(201,),
    )


def put_manifest(
    registry_url: str, repository: str, reference: str, body: bytes, media_type: str
) -> str:
    _, headers = _request(
        "PUT",
        f"{registry_url}/v2/{repository}/manifests/{reference}",
        body,
        ok=(201,),
        headers={"Content-Type": media_type},
    )
    return headers.get("Docker-Content-Digest", sha256(body))


def _index_bytes(
    images: list[tuple[BuiltImage, Platform | None]], media_type: str
) -> bytes:
    manifests = []
    for image, plat in images:
        entry: dict[str, Any] = {
            "mediaType": image.media_type,
            "digest": image.manifest_digest,
            "size": len(image.manifest_bytes),
        }
        if plat is not None:
            entry["platform"] = plat.as_json()
        manifests.append(entry)
    return json.dumps(
        {"schemaVersion": 2, "mediaType": media_type, "manifests": manifests}
    ).encode()


def _request(
    method: str,
    url: str,
    body: bytes | None = None,
    *,
    ok: tuple[int, ...],
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(
        url, data=body, method=method, headers=headers or {}
    )
    if body is not None and "Content-Type" not in (headers or {}):
        request.add_header("Content-Type", "application/octet-stream")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, response_headers = response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        status, response_headers = exc.code, dict(exc.headers)
        if status not in ok:
            raise RuntimeError(
                f"{method} {url} answered {status}: {exc.read()[:500]!r}"
            ) from None
    if status not in ok:
        raise RuntimeError(f"{method} {url} answered {status}, expected {ok}")
    return status, response_headers


class _TarBuilder:
    """A deterministic tar: fixed mtime, root ownership, entries in insertion order."""

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        self._tar = tarfile.open(
            fileobj=self._buffer, mode="w", format=tarfile.PAX_FORMAT
        )

    def directory(self, path: str, mode: int = 0o755) -> None:
        self._tar.addfile(self._info(path, tarfile.DIRTYPE, mode))

    def file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        info = self._info(path, tarfile.REGTYPE, mode)
        info.size = len(content)
        self._tar.addfile(info, io.BytesIO(content))

    def symlink(self, path: str, target: str) -> None:
        info = self._info(path, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self._tar.addfile(info)

    def getvalue(self) -> bytes:
        self._tar.close()
        return self._buffer.getvalue()

    @staticmethod
    def _info(path: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(path)
        info.type, info.mode, info.mtime = kind, mode, MTIME
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info
