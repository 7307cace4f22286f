"""Extracting one image layer tarball into a directory, safely.

A layer comes from a registry or an archive nobody vetted, so extraction never
follows a symlink: an entry that would land under a symlink, or outside the
directory through `..`, is refused. Ownership, device nodes and xattrs are kept
when running as root (they are part of the image) and skipped otherwise.
Whiteouts are kept as `.wh.` files, or converted to overlayfs's form (see
`whiteouts`).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tarfile

from mesilla.containerizer.provisioner import whiteouts
from mesilla.containerizer.provisioner._fs import remove
from mesilla.containerizer.provisioner.errors import LayerExtractionError

log = logging.getLogger(__name__)

_XATTR_PREFIX = "SCHILY.xattr."


def extract_layer(tarball: str, dest: str, *, overlay_whiteouts: bool) -> None:
    """Extract `tarball` (plain or gzip tar) into the new directory `dest`."""
    os.makedirs(dest)
    extractor = _Extractor(tarball, dest, overlay_whiteouts)
    try:
        with tarfile.open(tarball, "r:*") as tar:
            for member in tar:
                extractor.add(tar, member)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise LayerExtractionError(
            f"Failed to extract layer '{tarball}': {exc}"
        ) from exc
    extractor.finish()


class _Extractor:
    def __init__(self, tarball: str, dest: str, overlay_whiteouts: bool) -> None:
        self.tarball = tarball
        self.dest = dest
        self.overlay_whiteouts = overlay_whiteouts
        self.privileged = os.geteuid() == 0
        self.directories: list[tuple[str, tarfile.TarInfo]] = []

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        relative = self._relative(member.name)
        if relative is None:
            return
        parent_relative, name = os.path.split(relative)
        parent = self._directory(parent_relative, member.name)
        path = os.path.join(parent, name)
        if whiteouts.is_whiteout(name) and self.overlay_whiteouts:
            if name == whiteouts.OPAQUE:
                whiteouts.make_overlay_opaque(parent)
            elif (hidden := whiteouts.hidden_name(name)) is not None:
                whiteouts.make_overlay_whiteout(self.dest, os.path.join(parent, hidden))
            return
        self._create(tar, member, path)

    def finish(self) -> None:
        # Deepest first, so setting a parent's mode and mtime comes last.
        for path, member in reversed(self.directories):
            self._set_attributes(path, member)

    def _relative(self, name: str) -> str | None:
        normalized = os.path.normpath(name.lstrip("/"))
        if normalized == ".":
            return None
        if normalized == ".." or normalized.startswith("../"):
            raise LayerExtractionError(
                f"Layer '{self.tarball}' has entry '{name}' outside its root: the layer is unsafe"
            )
        return normalized

    def _directory(self, relative: str, entry: str) -> str:
        """The real directory `dest/relative`, created if missing, never through a symlink."""
        path = self.dest
        for part in [] if not relative else relative.split("/"):
            path = os.path.join(path, part)
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                os.mkdir(path, 0o755)
                continue
            if not stat.S_ISDIR(mode):
                raise LayerExtractionError(
                    f"Layer '{self.tarball}' has entry '{entry}' under '{part}', which is "
                    "not a directory in that layer: the layer is unsafe or malformed"
                )
        return path

    def _create(self, tar: tarfile.TarFile, member: tarfile.TarInfo, path: str) -> None:
        if member.isdir():
            if not os.path.isdir(path) or os.path.islink(path):
                remove(self.dest, path)
                os.mkdir(path, 0o700)
            self.directories.append((path, member))
            return
        remove(self.dest, path)
        if member.isreg():
            source = tar.extractfile(member)
            assert source is not None  # regular members always have content
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
            )
            with source, os.fdopen(fd, "wb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
        elif member.issym():
            os.symlink(member.linkname, path)
        elif member.islnk():
            source_relative = self._relative(member.linkname)
            if source_relative is None:
                raise LayerExtractionError(
                    f"Layer '{self.tarball}' hard-links '{member.name}' to its root directory"
                )
            parent, name = os.path.split(source_relative)
            source_path = os.path.join(self._directory(parent, member.name), name)
            os.link(source_path, path, follow_symlinks=False)
            return  # a hard link shares its source's attributes
        elif member.ischr() or member.isblk():
            if not self.privileged:
                log.debug("Skipping device node '%s' (not root)", member.name)
                return
            kind = stat.S_IFCHR if member.ischr() else stat.S_IFBLK
            os.mknod(path, kind | 0o600, os.makedev(member.devmajor, member.devminor))
        elif member.isfifo():
            os.mkfifo(path, 0o600)
        else:
            log.debug(
                "Skipping unsupported entry '%s' in '%s'", member.name, self.tarball
            )
            return
        self._set_attributes(path, member)

    def _set_attributes(self, path: str, member: tarfile.TarInfo) -> None:
        if self.privileged:
            os.chown(path, member.uid, member.gid, follow_symlinks=False)
            for key, value in member.pax_headers.items():
                if key.startswith(_XATTR_PREFIX):
                    os.setxattr(
                        path,
                        key[len(_XATTR_PREFIX) :],
                        value.encode("utf-8", "surrogateescape"),
                        follow_symlinks=False,
                    )
        if not member.issym():
            mode = member.mode & 0o7777
            # Unprivileged, keep directories writable by us so they can be removed later.
            os.chmod(
                path, mode if self.privileged or not member.isdir() else mode | 0o700
            )
        os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
