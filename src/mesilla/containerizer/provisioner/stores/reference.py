"""Docker image references: `busybox`, `library/busybox:1.36`, `host:5000/team/app:v1`,
`repo@sha256:<hex>` (Docker's grammar, as Mesos's `docker::spec::parseImageReference`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mesilla.containerizer.provisioner.errors import ImageReferenceError

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# The registry host of docker's reference grammar (a host name or [IPv6], and a port).
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?")
DEFAULT_TAG = "latest"


@dataclass(frozen=True)
class ImageReference:
    registry: str | None  # host[:port]; None: the `--docker_registry` default
    repository: str  # path inside the registry, e.g. `library/busybox`
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest when pinned, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    def with_repository(self, repository: str) -> ImageReference:
        return ImageReference(self.registry, repository, self.tag, self.digest)

    def __str__(self) -> str:
        name = (
            self.repository
            if self.registry is None
            else f"{self.registry}/{self.repository}"
        )
        if self.digest:
            return f"{name}@{self.digest}"
        return f"{name}:{self.tag or DEFAULT_TAG}"


def parse(name: str) -> ImageReference:
    if not name or name != name.strip():
        raise ImageReferenceError(
            f"Invalid docker image name '{name}': it is empty or has spaces"
        )
    rest, _, digest = name.partition("@")
    if digest and not DIGEST.fullmatch(digest):
        raise ImageReferenceError(
            f"Invalid digest in docker image name '{name}': expected sha256:<64 hex digits>"
        )
    registry: str | None = None
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        if not _DOMAIN.fullmatch(first):
            raise ImageReferenceError(
                f"Invalid registry '{first}' in docker image name '{name}': expected a host "
                "name or [IPv6 address], and a port"
            )
        registry, rest = first, remainder
    tag: str | None = None
    last_slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > last_slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ImageReferenceError(
                f"Invalid tag '{tag}' in docker image name '{name}'"
            )
    for component in rest.split("/"):
        if not _COMPONENT.fullmatch(component):
            raise ImageReferenceError(
                f"Invalid repository '{rest}' in docker image name '{name}': path components "
                "are lowercase letters and digits separated by '.', '_', '__' or '-'"
            )
    return ImageReference(registry, rest, tag, digest or None)
