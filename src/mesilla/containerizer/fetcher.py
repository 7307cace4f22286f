"""The fetcher: puts a command's URIs (`CommandInfo.uris`) into its sandbox.

As Mesos's fetcher (`src/launcher/fetcher.cpp`, `docs/fetcher.md`): http(s)
URIs are downloaded, local paths and `file://` URIs copied, each to
`<sandbox>/<output_file or basename>`; `executable` makes the file executable
(and is never extracted); otherwise archives are extracted into the sandbox
when `extract` is true (the default): .tar, .tar.gz, .tgz, .tar.bz2, .tbz2,
.tar.xz, .txz and .zip, and a lone .gz is decompressed beside itself. The
files are given to the container's user when the agent runs as root.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import pwd
import shutil
import tarfile
import urllib.parse
import zipfile
from typing import BinaryIO

from mesilla.common import files
from mesilla.v1.mesos import CommandURI

_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_CHUNK = 1 << 16
# A hung server must not hold a launch forever.
_HTTP_TIMEOUT_SECS = 600


class FetchError(Exception):
    """A URI could not be fetched; the message names it and says why."""


async def fetch(uris: list[CommandURI], sandbox: str, user: str | None = None) -> None:
    """Fetches every URI into the sandbox, then gives what it holds to `user` (as root)."""
    for uri in uris:
        await fetch_one(uri, sandbox)
    if uris and user and os.geteuid() == 0:
        await asyncio.to_thread(_chown_tree, sandbox, user)


async def fetch_one(uri: CommandURI, sandbox: str) -> str:
    """Fetches one URI; returns the path it was saved to."""
    parsed = urllib.parse.urlsplit(uri.value)
    name = uri.output_file or os.path.basename(parsed.path.rstrip("/"))
    if not name:
        raise FetchError(f"Cannot fetch '{uri.value}': it names no file; set output_file")
    try:
        # Followed to the end: a link a task left in a kept sandbox must not be written through.
        target = files.inside(sandbox, name, follow=True)
    except files.OutsideRoot:
        raise FetchError(
            f"Cannot fetch '{uri.value}': output_file '{name}' leaves the sandbox"
        ) from None
    os.makedirs(os.path.dirname(target), exist_ok=True)

    if parsed.scheme in ("http", "https"):
        await _download(uri.value, sandbox, target)
    elif parsed.scheme in ("", "file"):
        source = urllib.parse.unquote(parsed.path) if parsed.scheme == "file" else uri.value
        if not os.path.isabs(source):
            raise FetchError(f"Cannot fetch '{uri.value}': a local path must be absolute")
        await asyncio.to_thread(_copy, uri.value, source, target)
    else:
        raise FetchError(
            f"Cannot fetch '{uri.value}': unsupported scheme '{parsed.scheme}' "
            "(use http, https, file or an absolute path)"
        )

    if uri.executable:
        os.chmod(target, 0o755)
    elif uri.extract:
        await asyncio.to_thread(_extract, uri.value, target, sandbox)
    return target


def _create(path: str) -> BinaryIO:
    return open(path, "wb")


async def _download(url: str, sandbox: str, target: str) -> None:
    import aiohttp  # the agent has it loaded; executors never fetch

    partial = f"{target}.partial"
    timeout = aiohttp.ClientTimeout(total=_HTTP_TIMEOUT_SECS)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url) as response:
                if response.status != 200:
                    raise FetchError(
                        f"Failed to fetch '{url}': HTTP {response.status} {response.reason}"
                    )
                with await asyncio.to_thread(_create, partial) as out:
                    async for chunk in response.content.iter_chunked(_CHUNK):
                        out.write(chunk)  # into the page cache: nothing waits for the disk
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        _unlink(sandbox, partial)
        raise FetchError(f"Failed to fetch '{url}': {exc or type(exc).__name__}") from exc
    except FetchError:
        _unlink(sandbox, partial)
        raise
    files.replace(sandbox, partial, target)


def _copy(uri: str, source: str, target: str) -> None:
    try:
        shutil.copyfile(source, target)
    except OSError as exc:
        raise FetchError(f"Failed to fetch '{uri}': {exc.strerror}: {source}") from exc


def _extract(uri: str, path: str, sandbox: str) -> None:
    lowered = path.lower()
    try:
        if lowered.endswith(_TAR_SUFFIXES):
            with tarfile.open(path) as archive:
                archive.extractall(sandbox, filter="data")  # no escapes, no devices
        elif lowered.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                archive.extractall(sandbox)  # zipfile drops '..' and absolute names
        elif lowered.endswith(".gz"):
            with gzip.open(path, "rb") as src, open(path[: -len(".gz")], "wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise FetchError(f"Failed to extract '{uri}': {exc}") from exc


def _chown_tree(root: str, user: str) -> None:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise FetchError(f"Cannot give the fetched files to user '{user}': no such user") from None
    for directory, dirs, regular in os.walk(root):
        for name in [*dirs, *regular]:
            os.lchown(os.path.join(directory, name), entry.pw_uid, entry.pw_gid)
    os.lchown(root, entry.pw_uid, entry.pw_gid)


def _unlink(sandbox: str, path: str) -> None:
    try:
        files.remove_file(sandbox, path)
    except FileNotFoundError:
        pass
