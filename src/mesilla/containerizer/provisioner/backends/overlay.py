"""The overlay backend: the image's layers as read-only lower directories of an
overlayfs mount, with a per-rootfs upper directory taking the container's writes.

Layers are stacked in their `rootfs.overlay` form, where whiteouts already are
overlayfs's own (0/0 character devices, `trusted.overlay.opaque`). The lower
directories are named through short symlinks in the scratch directory, since
the mount options must fit in one page however many layers an image has.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import tempfile
from typing import ClassVar

from mesilla.containerizer.provisioner._fs import remove
from mesilla.containerizer.provisioner.backends import _mount
from mesilla.containerizer.provisioner.backends.base import Backend
from mesilla.containerizer.provisioner.errors import BackendError

_DT_UNKNOWN = 0


class OverlayBackend(Backend):
    name: ClassVar[str] = "overlay"
    layer_form: ClassVar[str] = "rootfs.overlay"

    @classmethod
    def check(cls, store_dir: str) -> None:
        with open("/proc/filesystems") as f:
            if not any(line.split()[-1] == "overlay" for line in f if line.strip()):
                raise BackendError(
                    "The overlay backend needs overlayfs in the kernel (modprobe overlay)"
                )
        if os.geteuid() != 0:
            raise BackendError("The overlay backend needs root to mount")
        os.makedirs(store_dir, exist_ok=True)
        with tempfile.TemporaryDirectory(
            prefix=".overlay-check-", dir=store_dir
        ) as probe:
            os.mkdir(os.path.join(probe, "lower"))
            if not _has_d_type(probe):
                raise BackendError(
                    f"The filesystem of --docker_store_dir={store_dir} does not report file "
                    "types (d_type), which overlayfs needs: use another filesystem or "
                    "--image_provisioner_backend=copy"
                )
            for sub in ("upperdir", "workdir", "merged"):
                os.mkdir(os.path.join(probe, sub))
            merged = os.path.join(probe, "merged")
            _mount.mount(
                "overlay",
                merged,
                "overlay",
                0,
                _options(probe, [os.path.join(probe, "lower")]),
            )
            _mount.unmount(probe, merged)

    async def provision(self, layers: list[str], rootfs: str, backend_dir: str) -> None:
        # All of it in a thread: directory creation waits for the filesystem's journal,
        # which other containers' fsyncs keep busy while a pod launches.
        await asyncio.to_thread(_build, layers, rootfs, _scratch(rootfs, backend_dir))

    async def destroy(self, rootfs: str, backend_dir: str) -> None:
        for point in _mount.mount_points_under(rootfs):
            await asyncio.to_thread(_mount.unmount, backend_dir, point)
        await asyncio.to_thread(remove, backend_dir, rootfs)
        await asyncio.to_thread(remove, backend_dir, _scratch(rootfs, backend_dir))


def _build(layers: list[str], rootfs: str, scratch: str) -> None:
    links = os.path.join(scratch, "links")
    for sub in ("upperdir", "workdir", "links"):
        os.makedirs(os.path.join(scratch, sub), exist_ok=True)
    lowers = []
    for index, layer in enumerate(_without_repeats(layers)):
        link = os.path.join(links, str(index))
        if not os.path.islink(link):
            os.symlink(layer, link)
        lowers.append(link)
    os.makedirs(rootfs, exist_ok=True)
    _mount.mount("overlay", rootfs, "overlay", 0, _options(scratch, lowers))


def _without_repeats(layers: list[str]) -> list[str]:
    """Each layer once, at its topmost place: overlayfs refuses a directory twice, and
    since a layer's upper occurrence overrides all its lower one did, the result is
    the same (images with repeated empty layers are common)."""
    topmost = {layer: index for index, layer in enumerate(layers)}
    return [layer for index, layer in enumerate(layers) if topmost[layer] == index]


def _scratch(rootfs: str, backend_dir: str) -> str:
    return os.path.join(backend_dir, "scratch", os.path.basename(rootfs))


def _options(scratch: str, lowers: list[str]) -> str:
    """Mount options for `lowers` (bottom first) with `<scratch>/upperdir` and `workdir`."""
    upper = os.path.join(scratch, "upperdir")
    work = os.path.join(scratch, "workdir")
    for path in (upper, *lowers):
        if "," in path or ":" in path:
            raise BackendError(
                f"Path '{path}' has ',' or ':', which overlay mount options cannot carry: "
                "use a --docker_store_dir without them"
            )
    # overlayfs lists lower directories topmost first.
    return f"lowerdir={':'.join(reversed(lowers))},upperdir={upper},workdir={work}"


class _Dirent(ctypes.Structure):
    _fields_ = [
        ("d_ino", ctypes.c_uint64),
        ("d_off", ctypes.c_int64),
        ("d_reclen", ctypes.c_ushort),
        ("d_type", ctypes.c_ubyte),
        ("d_name", ctypes.c_char * 256),
    ]


def _has_d_type(directory: str) -> bool:
    """Whether readdir(3) on `directory`'s filesystem fills in entry types."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.opendir.restype = ctypes.c_void_p
    libc.readdir64.restype = ctypes.POINTER(_Dirent)
    libc.readdir64.argtypes = [ctypes.c_void_p]
    libc.closedir.argtypes = [ctypes.c_void_p]
    handle = libc.opendir(directory.encode())
    if not handle:
        raise BackendError(
            f"Cannot read directory '{directory}': {os.strerror(ctypes.get_errno())}"
        )
    try:
        while entry := libc.readdir64(handle):
            if entry.contents.d_name not in (b".", b".."):
                return bool(entry.contents.d_type != _DT_UNKNOWN)
        return False
    finally:
        libc.closedir(handle)
