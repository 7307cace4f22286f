"""Extracting layer tarballs: content, safety, and the two whiteout forms."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from mesilla.containerizer.provisioner.errors import LayerExtractionError
from mesilla.containerizer.provisioner.stores.layers import extract_layer


def make_tar(path: Path, entries: list[tuple[str, str, object]]) -> str:
    """entries: (name, kind, payload) with kind dir|file|symlink|hardlink."""
    with tarfile.open(path, "w") as tar:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1_600_000_000
            data = None
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, int(payload or 0o755)  # type: ignore[call-overload]
            elif kind == "file":
                content = bytes(payload)  # type: ignore[call-overload]
                info.size, info.mode, data = len(content), 0o644, io.BytesIO(content)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(payload)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(payload)
            tar.addfile(info, data)
    return str(path)


def test_extracts_files_links_and_modes(tmp_path: Path) -> None:
    tarball = make_tar(
        tmp_path / "l.tar",
        [
            ("bin", "dir", 0o555),
            ("bin/tool", "file", b"#!x"),
            ("bin/alias", "symlink", "/bin/tool"),
            ("bin/hard", "hardlink", "bin/tool"),
            ("etc/implicit/parent", "file", b"p"),
            ("etc/dup", "file", b"first"),
            ("etc/dup", "file", b"second"),
        ],
    )
    dest = tmp_path / "rootfs"

    extract_layer(tarball, str(dest), overlay_whiteouts=False)

    assert (dest / "bin" / "tool").read_bytes() == b"#!x"
    assert (
        os.readlink(dest / "bin" / "alias") == "/bin/tool"
    )  # kept verbatim, never followed
    assert (
        os.stat(dest / "bin" / "hard").st_ino == os.stat(dest / "bin" / "tool").st_ino
    )
    assert (dest / "etc" / "implicit" / "parent").read_bytes() == b"p"
    assert (dest / "etc" / "dup").read_bytes() == b"second"
    assert stat.S_IMODE(os.stat(dest / "bin").st_mode) & 0o555 == 0o555
    assert os.stat(dest / "bin" / "tool").st_mtime == 1_600_000_000


@pytest.mark.parametrize(
    "entries",
    [
        [("../escape", "file", b"x")],
        [("lib", "symlink", "/tmp"), ("lib/planted", "file", b"x")],
        [("etc", "dir", None), ("etc/hard", "hardlink", "../../etc/passwd")],
    ],
    ids=["dotdot", "through-symlink", "hardlink-outside"],
)
def test_unsafe_entries_are_refused(
    tmp_path: Path, entries: list[tuple[str, str, object]]
) -> None:
    tarball = make_tar(tmp_path / "evil.tar", entries)
    with pytest.raises(LayerExtractionError, match=r"unsafe|outside"):
        extract_layer(tarball, str(tmp_path / "rootfs"), overlay_whiteouts=False)
    assert not os.path.exists("/tmp/planted")


def test_whiteouts_kept_as_files_in_the_plain_form(tmp_path: Path) -> None:
    tarball = make_tar(
        tmp_path / "w.tar",
        [
            ("etc/.wh.gone", "file", b""),
            ("opt/.wh..wh..opq", "file", b""),
        ],
    )
    extract_layer(tarball, str(tmp_path / "rootfs"), overlay_whiteouts=False)
    assert (tmp_path / "rootfs" / "etc" / ".wh.gone").is_file()
    assert (tmp_path / "rootfs" / "opt" / ".wh..wh..opq").is_file()


@pytest.mark.root
def test_whiteouts_converted_for_overlay(tmp_path: Path) -> None:
    tarball = make_tar(
        tmp_path / "w.tar",
        [
            ("etc/.wh.gone", "file", b""),
            ("opt/.wh..wh..opq", "file", b""),
            ("opt/kept", "file", b"k"),
        ],
    )
    dest = tmp_path / "rootfs"
    extract_layer(tarball, str(dest), overlay_whiteouts=True)

    gone = os.lstat(dest / "etc" / "gone")
    assert stat.S_ISCHR(gone.st_mode) and gone.st_rdev == os.makedev(0, 0)
    assert os.getxattr(dest / "opt", "trusted.overlay.opaque") == b"y"
    assert sorted(os.listdir(dest / "etc") + os.listdir(dest / "opt")) == [
        "gone",
        "kept",
    ]


def test_corrupt_tarball_is_an_extraction_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00" + b"garbage" * 100)
    with pytest.raises(LayerExtractionError, match=r"broken\.tar\.gz"):
        extract_layer(str(broken), str(tmp_path / "rootfs"), overlay_whiteouts=False)
