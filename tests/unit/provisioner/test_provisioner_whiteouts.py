"""The copy backend stacking layers with whiteouts and type changes (no root needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mesilla.containerizer.provisioner import whiteouts
from mesilla.containerizer.provisioner.backends import load_backend
from mesilla.containerizer.provisioner.backends.copy import CopyBackend
from mesilla.containerizer.provisioner.errors import BackendError


def tree(root: Path, files: dict[str, str], links: dict[str, str] | None = None) -> str:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    for name, target in (links or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, root / name)
    return str(root)


def listing(root: Path) -> dict[str, str]:
    found = {}
    for current, dirs, files in os.walk(root):
        for name in files:
            path = Path(current, name)
            found[str(path.relative_to(root))] = (
                "->" + os.readlink(path) if path.is_symlink() else path.read_text()
            )
        for name in dirs:
            path = Path(current, name)
            if path.is_symlink():
                found[str(path.relative_to(root))] = "->" + os.readlink(path)
    return found


async def test_copy_applies_whiteouts_and_opaque_dirs(tmp_path: Path) -> None:
    lower = tree(
        tmp_path / "lower",
        {"etc/gone": "g", "etc/kept": "k", "opt/d/old": "o", "opt/d/sub/x": "x"},
    )
    upper = tree(
        tmp_path / "upper",
        {
            "etc/.wh.gone": "",
            "opt/d/.wh..wh..opq": "",
            "opt/d/new": "n",
            "etc/added": "a",
        },
    )
    rootfs = tmp_path / "rootfs"

    await CopyBackend().provision(
        [lower, upper], str(rootfs), str(tmp_path / "backend")
    )

    assert listing(rootfs) == {"etc/kept": "k", "etc/added": "a", "opt/d/new": "n"}
    assert listing(tmp_path / "lower")["etc/gone"] == "g"  # layers are never modified


async def test_copy_replaces_changed_types_without_writing_through_links(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("safe")
    lower = tree(
        tmp_path / "lower",
        {"was-file": "f", "dir/inner": "i"},
        {"lib": str(outside), "link-file": str(outside / "victim")},
    )
    upper = tree(
        tmp_path / "upper",
        {
            "was-file/now-dir": "d",
            "lib/real": "r",
            "link-file": "new",
            "lib/.wh.victim": "",
        },
    )
    (Path(upper) / "dir").write_text("dir became a file")
    rootfs = tmp_path / "rootfs"

    await CopyBackend().provision(
        [lower, upper], str(rootfs), str(tmp_path / "backend")
    )

    assert listing(rootfs) == {
        "was-file/now-dir": "d",
        "lib/real": "r",
        "link-file": "new",
        "dir": "dir became a file",
    }
    assert (outside / "victim").read_text() == "safe"
    assert sorted(os.listdir(outside)) == ["victim"]


def test_apply_to_ignores_whiteouts_under_a_symlinked_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    tree(outside, {"precious": "p"})
    rootfs = tree(tmp_path / "rootfs", {}, {"lib": str(outside)})
    layer = tree(tmp_path / "layer", {"lib/.wh.precious": "", "lib/.wh..wh..opq": ""})

    markers = whiteouts.apply_to(layer, rootfs)

    assert (outside / "precious").read_text() == "p"
    assert sorted(markers) == ["lib/.wh..wh..opq", "lib/.wh.precious"]


def test_hidden_name() -> None:
    assert whiteouts.hidden_name(".wh.file") == "file"
    assert whiteouts.hidden_name(".wh..wh..opq") is None
    assert whiteouts.hidden_name(".wh..wh.plnk") is None
    assert whiteouts.hidden_name("file") is None


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(BackendError, match="overlay, copy, bind"):
        load_backend("aufs")


@pytest.mark.root
def test_mount_points_with_spaces_are_found(tmp_path: Path) -> None:
    from mesilla.containerizer.provisioner.backends import _mount

    target = tmp_path / "with space"
    target.mkdir()
    _mount.mount("none", str(target), "tmpfs", 0, None)
    try:
        assert _mount.mount_points_under(str(tmp_path)) == [str(target)]
    finally:
        _mount.unmount(str(tmp_path), str(target))
    assert _mount.mount_points_under(str(tmp_path)) == []
