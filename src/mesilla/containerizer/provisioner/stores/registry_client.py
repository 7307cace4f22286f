"""A client of the Docker Registry HTTP API v2, enough to pull images.

Anonymous or Bearer-token access (the `WWW-Authenticate` challenge names the
token realm, service and scope; Basic credentials are sent to the realm when
the image carries some), schema 2 / OCI manifests and indexes, and blobs
streamed to a file while their sha256 is checked.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.containerizer.provisioner.errors import (
    BlobDigestMismatch,
    ImageNotFound,
    RegistryAuthError,
    RegistryError,
    UnsupportedImage,
)
from mesilla.containerizer.provisioner.stores import manifest as manifests
from mesilla.containerizer.provisioner.stores.manifest import Descriptor, ResolvedImage
from mesilla.containerizer.provisioner.stores.reference import ImageReference

log = logging.getLogger(__name__)

_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')
_DOCKER_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}


@dataclass(frozen=True)
class PullProgress:
    image: str
    layer: str  # the blob's digest
    done: int  # bytes received so far
    total: int | None  # from the manifest, when it says


ProgressCallback = Callable[[PullProgress], None]


@dataclass(frozen=True)
class Credential:
    """Docker Hub-style user and password (Mesos's `Image.Docker.credential`)."""

    principal: str
    secret: str = ""

    def basic(self) -> str:
        token = base64.b64encode(f"{self.principal}:{self.secret}".encode()).decode()
        return f"Basic {token}"


class RegistryClient:
    def __init__(self, session: aiohttp.ClientSession, default_registry: str) -> None:
        self._session = session
        default = urlsplit(default_registry)
        self._default_scheme = default.scheme or "https"
        self._default_host = default.netloc
        # (registry URL, repository) -> Authorization header that worked.
        self._authorizations: dict[tuple[str, str], str] = {}

    def normalize(self, reference: ImageReference) -> ImageReference:
        return normalize(reference, self._default_host)

    def registry_url(self, reference: ImageReference) -> str:
        host = reference.registry or self._default_host
        if host in _DOCKER_HUB_ALIASES:
            host = "registry-1.docker.io"
        # The scheme comes from `--docker_registry` for its own host; others use TLS.
        scheme = self._default_scheme if host == self._default_host else "https"
        return f"{scheme}://{host}"

    async def resolve(
        self, reference: ImageReference, credential: Credential | None = None
    ) -> ResolvedImage:
        what = f"Image '{reference}'"
        body, content_type, header_digest = await self._manifest(
            reference, reference.reference, credential
        )
        manifest_digest = manifests.digest_of(body)
        # By tag, the registry's Docker-Content-Digest header is all there is to check.
        expected = reference.digest or header_digest
        if expected:
            manifests.verify(body, expected, f"Manifest of {what}")
        document = manifests.load_json(body, f"Manifest of {what}")
        if manifests.media_type_of(document, content_type) in manifests.INDEXES:
            chosen = manifests.select_platform(document, what)
            body, content_type, _ = await self._manifest(
                reference, chosen.digest, credential
            )
            manifests.verify(body, chosen.digest, f"Platform manifest of {what}")
            manifest_digest = chosen.digest
            document = manifests.load_json(body, f"Manifest of {what}")
        if manifests.media_type_of(document, content_type) not in manifests.MANIFESTS:
            raise UnsupportedImage(
                f"{what} has a manifest of unsupported media type '{content_type}'"
            )
        config_descriptor, layers = manifests.manifest_parts(document, what)
        config_blob = await self._blob_bytes(reference, config_descriptor, credential)
        manifests.verify(config_blob, config_descriptor.digest, f"Config of {what}")
        config = manifests.load_json(config_blob, f"Config of {what}")
        return ResolvedImage(manifest_digest, config, layers)

    async def fetch_blob(
        self,
        reference: ImageReference,
        blob: Descriptor,
        target: str,
        progress: ProgressCallback | None = None,
        credential: Credential | None = None,
    ) -> None:
        """Stream a blob into the new file `target`; on a digest mismatch the file is removed."""
        url = f"{self.registry_url(reference)}/v2/{reference.repository}/blobs/{blob.digest}"
        hasher = hashlib.sha256()
        done = 0
        async with await self._get(reference, url, {}, credential) as response:
            if response.status != 200:
                raise await self._error(
                    response, f"Blob {blob.digest} of image '{reference}'"
                )
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                with os.fdopen(fd, "wb") as out:
                    async for chunk in response.content.iter_chunked(1 << 20):
                        hasher.update(chunk)
                        out.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(
                                PullProgress(
                                    str(reference), blob.digest, done, blob.size
                                )
                            )
                    out.flush()
                    await in_thread(os.fsync, out.fileno())
            except aiohttp.ClientError as exc:
                raise RegistryError(
                    f"Download of blob {blob.digest} of image '{reference}' broke off after "
                    f"{done} bytes: {exc}"
                ) from exc
        actual = "sha256:" + hasher.hexdigest()
        if actual != blob.digest:
            files.remove_file(os.path.dirname(target), target)
            raise BlobDigestMismatch(
                f"Blob {blob.digest} of image '{reference}' from {self.registry_url(reference)} "
                f"has digest {actual}: the registry holds corrupted data"
            )

    async def _manifest(
        self, reference: ImageReference, which: str, credential: Credential | None
    ) -> tuple[bytes, str, str | None]:
        """(body, Content-Type, Docker-Content-Digest) of a manifest."""
        url = f"{self.registry_url(reference)}/v2/{reference.repository}/manifests/{which}"
        headers = {"Accept": manifests.ACCEPT}
        async with await self._get(reference, url, headers, credential) as response:
            if response.status == 404:
                raise ImageNotFound(
                    f"Image '{reference}' not found in registry {self.registry_url(reference)}: "
                    "check the name and tag, or set --docker_registry"
                )
            if response.status != 200:
                raise await self._error(response, f"Manifest of image '{reference}'")
            return (
                await response.read(),
                response.headers.get("Content-Type", ""),
                response.headers.get("Docker-Content-Digest"),
            )

    async def _blob_bytes(
        self, reference: ImageReference, blob: Descriptor, credential: Credential | None
    ) -> bytes:
        url = f"{self.registry_url(reference)}/v2/{reference.repository}/blobs/{blob.digest}"
        async with await self._get(reference, url, {}, credential) as response:
            if response.status != 200:
                raise await self._error(
                    response, f"Blob {blob.digest} of image '{reference}'"
                )
            return await response.read()

    async def _get(
        self,
        reference: ImageReference,
        url: str,
        headers: dict[str, str],
        credential: Credential | None,
    ) -> aiohttp.ClientResponse:
        key = (self.registry_url(reference), reference.repository)
        try:
            authorization = self._authorizations.get(key)
            response = await self._session.get(
                url, headers=_with_auth(headers, authorization)
            )
            if response.status != 401:
                return response
            challenge = response.headers.get("WWW-Authenticate", "")
            response.release()
            authorization = await self._authorize(reference, challenge, credential)
            self._authorizations[key] = authorization
            response = await self._session.get(
                url, headers=_with_auth(headers, authorization)
            )
        except aiohttp.ClientError as exc:
            raise RegistryError(f"Registry request {url} failed: {exc}") from exc
        if response.status == 401:
            response.release()
            raise RegistryAuthError(
                f"Registry {key[0]} refused access to '{reference.repository}' even after "
                "authenticating: check the image's credential"
            )
        return response

    async def _authorize(
        self, reference: ImageReference, challenge: str, credential: Credential | None
    ) -> str:
        scheme, _, params_text = challenge.partition(" ")
        params = dict(_CHALLENGE_PARAM.findall(params_text))
        registry = self.registry_url(reference)
        if scheme.lower() == "basic":
            if credential is None:
                raise RegistryAuthError(
                    f"Registry {registry} needs a user and password for '{reference.repository}': "
                    "give the image a credential"
                )
            return credential.basic()
        if scheme.lower() != "bearer" or "realm" not in params:
            raise RegistryAuthError(
                f"Registry {registry} answered 401 with an unusable challenge '{challenge}'"
            )
        query = {
            "scope": params.get("scope", f"repository:{reference.repository}:pull")
        }
        if "service" in params:
            query["service"] = params["service"]
        headers = {} if credential is None else {"Authorization": credential.basic()}
        async with self._session.get(
            params["realm"], params=query, headers=headers
        ) as response:
            if response.status != 200:
                raise RegistryAuthError(
                    f"Token server {params['realm']} refused a token for "
                    f"'{reference.repository}' ({response.status}): check the credential"
                )
            body: dict[str, Any] = await response.json(content_type=None)
        token = body.get("token") or body.get("access_token")
        if not isinstance(token, str):
            raise RegistryAuthError(
                f"Token server {params['realm']} answered without a token"
            )
        log.debug(
            "Got a registry token for %s from %s", reference.repository, params["realm"]
        )
        return f"Bearer {token}"

    @staticmethod
    async def _error(response: aiohttp.ClientResponse, what: str) -> RegistryError:
        text = (await response.text(errors="replace"))[:500]
        return RegistryError(
            f"{what}: registry answered {response.status} {response.reason}: {text}"
        )


def normalize(reference: ImageReference, default_host: str) -> ImageReference:
    """Docker Hub keeps official images under `library/`, as Mesos assumes."""
    host = reference.registry or default_host
    if host in _DOCKER_HUB_ALIASES and "/" not in reference.repository:
        return reference.with_repository(f"library/{reference.repository}")
    return reference


def _with_auth(headers: dict[str, str], authorization: str | None) -> dict[str, str]:
    return (
        headers
        if authorization is None
        else {**headers, "Authorization": authorization}
    )
