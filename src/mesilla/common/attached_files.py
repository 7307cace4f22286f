"""Files attached under virtual paths, as Mesos's `src/files/files.cpp`: the
`/files/browse`, `/files/read`, `/files/download`, `/files/debug` endpoints and
the LIST_FILES and READ_FILE operator calls, on the master and the agent alike.

A directory or a file is *attached* under a virtual path (the agent's sandboxes
under their real path and ``/frameworks/<fw>/executors/<e>/runs/latest``, a
daemon's log file as ``/master/log`` or ``/slave/log``); a request path
resolves through the longest attached prefix. Only attached trees are served: a
path that leaves its tree, by ``..`` or through a symlink, is refused (403), a
path below an attached file or anything not found is 404. A container can
change its sandbox between the check and the use, so what is read or listed is
opened first and the opened file's real path (``/proc/self/fd``) checked again.

Each attachment may bring its own authorization (the logs' access_mesos_logs);
the others take the one `Files` was made with (the agent's access_sandboxes).
"""

from __future__ import annotations

import asyncio
import grp
import mimetypes
import os
import pwd
import stat
import unicodedata
import urllib.parse
from collections.abc import Callable
from typing import BinaryIO

from aiohttp import web

from mesilla.common.authorization import Authorizer, require
from mesilla.common.errors import BadRequest, Forbidden, NotFound
from mesilla.common.http import Router, jsonp_response, numify
from mesilla.v1.mesos import FileInfo, ListFiles, ReadFile, ReadFileCall, TimeInfo

# Mesos caps a read at 16 pages.
MAX_READ_LENGTH = 16 * os.sysconf("SC_PAGESIZE")
_DOWNLOAD_CHUNK = 1 << 20

#: Raises (403) unless the request may read what an attachment serves.
Authorize = Callable[[web.Request], None]
#: The same for any attached path without an authorization of its own.
PathAuthorize = Callable[[web.Request, str], None]


class Files:
    def __init__(self, authorize: PathAuthorize | None = None) -> None:
        self._attached: dict[str, str] = {}  # normalized request path -> real directory or file
        self._authorizations: dict[str, Authorize] = {}
        self._default = authorize

    def attach(self, real: str, virtual: str, authorize: Authorize | None = None) -> None:
        virtual = _normalize(virtual)
        self._attached[virtual] = real
        if authorize is not None:
            self._authorizations[virtual] = authorize

    def attach_log(self, real: str, virtual: str, authorizer: Authorizer | None) -> None:
        """A daemon's log file (the web UI's LOG link), for whom access_mesos_logs allows
        (Mesos's `Master::initialize`, `Slave::initialize`)."""
        self.attach(real, virtual, lambda request: require(authorizer, request, "access_mesos_logs"))

    def detach(self, virtual: str) -> None:
        self._attached.pop(_normalize(virtual), None)
        self._authorizations.pop(_normalize(virtual), None)

    def attached(self) -> dict[str, str]:
        return dict(self._attached)

    def authorize(self, request: web.Request, path: str) -> None:
        """Raises unless the request may read `path`: the authorization of the attachment it
        lies in, or the default one (Mesos's `FilesProcess::authorize`)."""
        prefix = _normalize(path)
        while prefix not in self._authorizations and prefix not in self._attached and prefix != "/":
            prefix = os.path.dirname(prefix)
        check = self._authorizations.get(prefix)
        if check is not None:
            check(request)
        elif self._default is not None:
            self._default(request, path)

    def resolve(self, path: str) -> str:
        """The real file behind a request path, confined to its attached tree."""
        return self._resolve(path)[0]

    def open(self, path: str, flags: int = os.O_RDONLY) -> int:
        """A descriptor of the file behind a request path, opened inside its attached tree."""
        real, real_root = self._resolve(path)
        try:
            # Non-blocking: opening a FIFO a task left in its sandbox must not hang the daemon.
            fd = os.open(real, flags | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            raise NotFound(f"No file or directory at '{path}'") from None
        except NotADirectoryError:
            raise BadRequest(f"'{path}' is not a directory") from None
        if not _within(real_root, os.readlink(f"/proc/self/fd/{fd}")):
            os.close(fd)
            raise Forbidden(f"Path '{path}' leads outside of its sandbox")
        return fd

    def _resolve(self, path: str) -> tuple[str, str]:
        """(real path, real attached root) of a request path."""
        if any(unicodedata.category(c) == "Cc" for c in path):
            raise BadRequest(f"Path '{path.encode('unicode_escape').decode()}' contains invalid characters")
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
        if rest and not os.path.isdir(real_root):
            raise NotFound(f"No file or directory at '{path}'")  # nothing lies below a file
        real = os.path.realpath(os.path.join(real_root, rest))
        if not _within(real_root, real):
            raise Forbidden(f"Path '{path}' leads outside of its sandbox")
        if not os.path.exists(real):
            raise NotFound(f"No file or directory at '{path}'")
        return real, real_root


def _within(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root


def _normalize(path: str) -> str:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return "/" + "/".join(parts)


def _requested_path(request: web.Request) -> str:
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
        return numify(text, 64)  # off_t, ssize_t
    except ValueError as exc:
        raise BadRequest(f"Failed to parse {name}: {exc}.") from None


def entries(files: Files, path: str) -> list[tuple[str, os.stat_result]]:
    """(request path, stat) of each entry of a directory; a file lists nothing, as in Mesos."""
    fd = files.open(path)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            return []
        listing = []
        for entry in sorted(os.listdir(fd)):
            try:
                st = os.stat(entry, dir_fd=fd)
            except OSError:
                continue  # vanished, or a dangling symlink
            listing.append((_normalize(path).rstrip("/") + "/" + entry, st))
        return listing
    finally:
        os.close(fd)


def browse(files: Files, path: str) -> list[dict[str, object]]:
    return [file_info(entry, st) for entry, st in entries(files, path)]


def _open_regular(files: Files, path: str, what: str) -> BinaryIO:
    fd = files.open(path)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "directory" if stat.S_ISDIR(mode) else "special file"
        raise BadRequest(f"Cannot {what} a {kind}.")
    return os.fdopen(fd, "rb")


def read(files: Files, path: str, offset: int, length: int | None) -> tuple[int, bytes]:
    """(size, data) as Mesos's `_read`: past the end or a zero length gives the size."""
    with _open_regular(files, path, "read") as f:
        size = os.fstat(f.fileno()).st_size
        if offset >= size or length == 0:
            return size, b""
        length = min(size - offset if length is None else length, MAX_READ_LENGTH)
        f.seek(offset)
        return size, f.read(length)


def list_files(files: Files, request: web.Request, path: str) -> ListFiles:
    """LIST_FILES: the v1 FileInfos of what `/files/browse` lists."""
    files.authorize(request, path)
    return ListFiles(
        file_infos=[
            FileInfo(
                path=entry,
                nlink=st.st_nlink,
                size=st.st_size,
                mtime=TimeInfo(nanoseconds=int(st.st_mtime * 1e9)),
                mode=st.st_mode,
                uid=user_name(st.st_uid),
                gid=group_name(st.st_gid),
            )
            for entry, st in entries(files, path)
        ]
    )


def read_file(files: Files, request: web.Request, call: ReadFileCall) -> ReadFile:
    """READ_FILE: what `/files/read` reads, with the file's size."""
    if call.offset < 0 or (call.length is not None and call.length < 0):
        raise BadRequest("'read_file.offset' and 'read_file.length' may not be negative")
    files.authorize(request, call.path)
    size, data = read(files, call.path, call.offset, call.length)
    return ReadFile(size=size, data=data)


def install(router: Router, files: Files, realm: str, authorizer: Authorizer | None) -> None:
    """The /files endpoints in `realm` (the daemon's read-only one); `authorizer` guards
    /files/debug as any endpoint (get_endpoints)."""

    def _query_path(request: web.Request) -> str:
        path = _requested_path(request)
        files.authorize(request, path)
        return path

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
        with _open_regular(files, path, "download") as f:
            st = os.fstat(f.fileno())
            name = os.path.basename(os.readlink(f"/proc/self/fd/{f.fileno()}"))
            mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
            response = web.StreamResponse(
                headers={
                    "Content-Type": mime,
                    "Content-Disposition": f'attachment; filename="{name}"',
                }
            )
            response.content_length = st.st_size
            await response.prepare(request)
            # Streamed from the file, so a large log does not stall the daemon.
            remaining = st.st_size  # what Content-Length promised, though the file grows
            while remaining > 0:
                chunk = await asyncio.to_thread(f.read, min(_DOWNLOAD_CHUNK, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                await response.write(chunk)
            await response.write_eof()
            return response

    async def debug_handler(request: web.Request) -> web.StreamResponse:
        require(authorizer, request, "get_endpoints", "/files/debug")
        return jsonp_response(request, files.attached())

    for name, handler in (
        ("browse", browse_handler),
        ("read", read_handler),
        ("download", download_handler),
        ("debug", debug_handler),
    ):
        for path in (f"/files/{name}", f"/files/{name}.json"):
            router.add(path, handler, methods=("GET",), realm=realm)
