"""The fetcher against a real HTTP server on 127.0.0.1 and real local files."""

from __future__ import annotations

import gzip
import io
import os
import pwd
import stat
import tarfile
import zipfile
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from mesilla.containerizer.fetcher import FetchError, fetch, fetch_one
from mesilla.v1.mesos import CommandURI


def tgz_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


FILES = {
    "/plain.txt": b"plain\n",
    "/bundle.tgz": tgz_bytes({"app/run.sh": b"echo run\n", "app/data": b"42"}),
    "/bundle.zip": zip_bytes({"z/one": b"1"}),
    "/single.json.gz": gzip.compress(b'{"a": 1}'),
    "/evil.tgz": tgz_bytes({"../escaped": b"x"}),
}


@pytest.fixture
async def server(unused_port: int) -> AsyncIterator[str]:
    async def serve(request: web.Request) -> web.Response:
        body = FILES.get(request.path)
        if body is None:
            return web.Response(status=404, text="not here")
        return web.Response(body=body)

    app = web.Application()
    app.router.add_get("/{tail:.*}", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{unused_port}"
    finally:
        await runner.cleanup()


async def test_http_plain_file(server: str, tmp_path: Any) -> None:
    path = await fetch_one(CommandURI(value=f"{server}/plain.txt"), str(tmp_path))
    assert path == str(tmp_path / "plain.txt")
    assert (tmp_path / "plain.txt").read_bytes() == b"plain\n"


async def test_http_archives_are_extracted(server: str, tmp_path: Any) -> None:
    await fetch(
        [
            CommandURI(value=f"{server}/bundle.tgz"),
            CommandURI(value=f"{server}/bundle.zip"),
            CommandURI(value=f"{server}/single.json.gz"),
        ],
        str(tmp_path),
    )
    assert (tmp_path / "app" / "run.sh").read_bytes() == b"echo run\n"
    assert (tmp_path / "z" / "one").read_bytes() == b"1"
    assert (tmp_path / "single.json").read_bytes() == b'{"a": 1}'


async def test_extract_false_keeps_the_archive(server: str, tmp_path: Any) -> None:
    await fetch_one(CommandURI(value=f"{server}/bundle.tgz", extract=False), str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["bundle.tgz"]


async def test_executable_and_output_file(server: str, tmp_path: Any) -> None:
    uri = CommandURI(value=f"{server}/plain.txt", executable=True, output_file="bin/tool")
    await fetch_one(uri, str(tmp_path))
    mode = (tmp_path / "bin" / "tool").stat().st_mode
    assert mode & stat.S_IXUSR


async def test_http_error_names_the_uri(server: str, tmp_path: Any) -> None:
    with pytest.raises(FetchError, match=r"missing\.txt.*404"):
        await fetch_one(CommandURI(value=f"{server}/missing.txt"), str(tmp_path))
    assert os.listdir(tmp_path) == []


async def test_unreachable_server(unused_port: int, tmp_path: Any) -> None:
    with pytest.raises(FetchError, match="Failed to fetch"):
        await fetch_one(CommandURI(value=f"http://127.0.0.1:{unused_port}/x"), str(tmp_path))


async def test_archive_cannot_escape_the_sandbox(server: str, tmp_path: Any) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    with pytest.raises(FetchError, match="extract"):
        await fetch_one(CommandURI(value=f"{server}/evil.tgz"), str(sandbox))
    assert not (tmp_path / "escaped").exists()


async def test_output_file_cannot_escape_the_sandbox(server: str, tmp_path: Any) -> None:
    with pytest.raises(FetchError, match="leaves the sandbox"):
        await fetch_one(CommandURI(value=f"{server}/plain.txt", output_file="../x"), str(tmp_path))


@pytest.mark.parametrize("output_file", ["out", "dir/out"])
async def test_output_file_is_not_written_through_a_link_out(
    server: str, tmp_path: Any, output_file: str
) -> None:
    """A kept sandbox (a restarted task's) may hold links its task made."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (tmp_path / "victim").write_text("keep")
    os.symlink(tmp_path / "victim", sandbox / "out")
    os.symlink(tmp_path, sandbox / "dir")
    with pytest.raises(FetchError, match="leaves the sandbox"):
        await fetch_one(CommandURI(value=f"{server}/plain.txt", output_file=output_file), str(sandbox))
    assert (tmp_path / "victim").read_text() == "keep"


@pytest.mark.parametrize("scheme", ["", "file://"])
async def test_local_files(tmp_path: Any, scheme: str) -> None:
    source = tmp_path / "src" / "bundle.tgz"
    source.parent.mkdir()
    source.write_bytes(FILES["/bundle.tgz"])
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    await fetch_one(CommandURI(value=f"{scheme}{source}"), str(sandbox))
    assert (sandbox / "app" / "data").read_bytes() == b"42"


async def test_bad_local_uris(tmp_path: Any) -> None:
    with pytest.raises(FetchError, match="absolute"):
        await fetch_one(CommandURI(value="relative/file"), str(tmp_path))
    with pytest.raises(FetchError, match="No such file"):
        await fetch_one(CommandURI(value=str(tmp_path / "nope")), str(tmp_path))
    with pytest.raises(FetchError, match="unsupported scheme 'ftp'"):
        await fetch_one(CommandURI(value="ftp://host/file"), str(tmp_path))


@pytest.mark.root
async def test_fetched_files_belong_to_the_user(server: str, tmp_path: Any) -> None:
    await fetch([CommandURI(value=f"{server}/bundle.tgz")], str(tmp_path), user="nobody")
    nobody = pwd.getpwnam("nobody").pw_uid
    assert (tmp_path / "bundle.tgz").stat().st_uid == nobody
    assert (tmp_path / "app" / "run.sh").stat().st_uid == nobody
