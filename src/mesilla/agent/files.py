"""Sandbox file endpoints: `/files/browse`, `/files/read`, `/files/download`, `/files/debug`.

As Mesos's `src/files/files.cpp`: directories are *attached* under a path
(the real sandbox path, and the virtual
``/frameworks/<fw>/executors/<e>/runs/latest``); a request path resolves
through the longest attached prefix. Only attached trees are served: a path
that leaves its tree, by ``..`` or through a symlink, is refused (403), and
anything not found is 404.
"""

from __future__ import annotations

import grp
import mimetypes
import os
import pwd
import stat
import urllib.parse

from aiohttp import web

from mesilla.common.errors import BadRequest, Forbidden, NotFound
from mesilla.common.http import Router, jsonp_response

# Mesos caps a read at 16 pages.
MAX_READ_LENGTH = 16 * os.sysconf("SC_PAGESIZE")


class Files:
    def __init__(self) -> None:
        self._attached: dict[str, str] = {}  # normalized request path -> real directory

    def attach(self, real: str, virtual: str) -> None:
        self._attached[_normalize(virtual)] = real

    def detach(self, virtual: str) -> None:
        self._attached.pop(_normalize(virtual), None)

    def attached(self) -> dict[str, str]:
        return dict(self._attached)

    def resolve(self, path: str) -> str:
        """The real file behind a request path, confined to its attached tree."""
        requested = _normalize(path)
        if ".." in requested.split("/"):
            raise Forbidden(f"Path '{path}' may not contain '..'")
        prefix = requested
        while prefix not in self._attached:
            if prefix == "/":
                raise NotFound(f"No file or directory at '{path}'")
            prefix = os.path.dirname(prefix)
        root = self._attached[prefix]
        rest = requested[len(prefix) :].lstrip("/")
        real_root = os.path.realpath(root)
        real = os.path.realpath(os.path.join(real_root, rest))
        if real != real_root and not real.startswith(real_root + os.sep):
            raise Forbidden(f"Path '{path}' leads outside of its sandbox")
        if not os.path.exists(real):
            raise NotFound(f"No file or directory at '{path}'")
        return real


def _normalize(path: str) -> str:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return "/" + "/".join(parts)


def _query_path(request: web.Request) -> str:
    path = request.query.get("path")
    if not path:
        raise BadRequest("Expecting 'path=value' in query.")
    return urllib.parse.unquote(path)


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def file_info(path: str, st: os.stat_result) -> dict[str, object]:
    """Mesos's v0 model of a FileInfo."""
    return {
        "path": path,
        "mode": stat.filemode(st.st_mode),
        "nlink": st.st_nlink,
        "uid": user_name(st.st_uid),
        "gid": group_name(st.st_gid),
        "size": st.st_size,
        "mtime": int(st.st_mtime),
    }


def _int_param(request: web.Request, name: str) -> int | None:
    text = request.query.get(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"Failed to parse {name}: '{text}' is not a number.") from None


def entries(files: Files, path: str) -> list[tuple[str, os.stat_result]]:
    """(request path, stat) of each entry of a directory; a file lists nothing, as in Mesos."""
    real = files.resolve(path)
    if not os.path.isdir(real):
        return []
    listing = []
    for entry in sorted(os.listdir(real)):
        try:
            st = os.stat(os.path.join(real, entry))
        except OSError:
            continue  # vanished, or a dangling symlink
        listing.append((_normalize(path).rstrip("/") + "/" + entry, st))
    return listing


def browse(files: Files, path: str) -> list[dict[str, object]]:
    return [file_info(entry, st) for entry, st in entries(files, path)]


def read(files: Files, path: str, offset: int, length: int | None) -> tuple[int, bytes]:
    """(size, data) as Mesos's `_read`: past the end or a zero length gives the size."""
    real = files.resolve(path)
    if os.path.isdir(real):
        raise BadRequest("Cannot read a directory.")
    with open(real, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if offset >= size or length == 0:
            return size, b""
        length = min(size - offset if length is None else length, MAX_READ_LENGTH)
        f.seek(offset)
        return size, f.read(length)


def install(router: Router, files: Files) -> None:
    async def browse_handler(request: web.Request) -> web.StreamResponse:
        return jsonp_response(request, browse(files, _query_path(request)))

    async def read_handler(request: web.Request) -> web.StreamResponse:
        path = _query_path(request)
        offset = _int_param(request, "offset")
        length = _int_param(request, "length")
        if offset is not None and offset < -1:
            raise BadRequest(f"Negative offset provided: {offset}.")
        if length is not None and length < -1:
            raise BadRequest(f"Negative length provided: {length}.")
        if length == -1:
            length = None  # the web UI's pager asks "to the end" this way
        if offset is None or offset == -1:
            size, _ = read(files, path, 0, 0)
            return jsonp_response(request, {"offset": size, "data": ""})
        _, data = read(files, path, offset, length)
        return jsonp_response(request, {"offset": offset, "data": data.decode("utf-8", "replace")})

    async def download_handler(request: web.Request) -> web.StreamResponse:
        path = _query_path(request)
        real = files.resolve(path)
        if os.path.isdir(real):
            raise BadRequest("Cannot download a directory.")
        name = os.path.basename(real)
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        # Streamed from the file, so a large log does not stall the agent.
        return web.FileResponse(
            real,
            headers={
                "Content-Type": mime,
                "Content-Disposition": f'attachment; filename="{name}"',
            },
        )

    async def debug_handler(request: web.Request) -> web.StreamResponse:
        return jsonp_response(request, files.attached())

    router.add("/files/browse", browse_handler, methods=("GET",), realm="mesos-agent-readonly")
    router.add("/files/browse.json", browse_handler, methods=("GET",), realm="mesos-agent-readonly")
    router.add("/files/read", read_handler, methods=("GET",), realm="mesos-agent-readonly")
    router.add("/files/read.json", read_handler, methods=("GET",), realm="mesos-agent-readonly")
    router.add("/files/download", download_handler, methods=("GET",), realm="mesos-agent-readonly")
    router.add(
        "/files/download.json", download_handler, methods=("GET",), realm="mesos-agent-readonly"
    )
    router.add("/files/debug", debug_handler, methods=("GET",), realm="mesos-agent-readonly")
    router.add("/files/debug.json", debug_handler, methods=("GET",), realm="mesos-agent-readonly")
