"""Atomic file replacement: old or new content after any failure, no temporary left behind."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from mesilla.common import files


def test_replaces_content_creating_the_directory(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "file.info"
    files.write_atomically(str(path), b"one")
    files.write_atomically(str(path), b"two")
    assert path.read_bytes() == b"two"
    assert os.listdir(path.parent) == ["file.info"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.mark.parametrize("failure", [OSError(errno.EIO, "I/O error"), KeyboardInterrupt()])
def test_failed_write_keeps_old_content_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    path = tmp_path / "file.info"
    files.write_atomically(str(path), b"old")
    temporaries: list[str] = []

    def failing_fsync(fd: int) -> None:
        temporaries.extend(n for n in os.listdir(tmp_path) if n != "file.info")
        raise failure  # what a failing disk (or a Ctrl-C) does between write and rename

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(type(failure)):
        files.write_atomically(str(path), b"new content, never complete")
    monkeypatch.undo()

    # Readers of the directory know the temporary for one, should a crash leave it.
    assert len(temporaries) == 1 and files.is_temporary(temporaries[0])
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["file.info"]


def test_failed_rename_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    (target / "child").mkdir(parents=True)  # a non-empty directory cannot be replaced
    with pytest.raises(OSError):
        files.write_atomically(str(target), b"data")
    assert os.listdir(tmp_path) == ["taken"]
    assert os.listdir(target) == ["child"]


def test_a_batch_replaces_every_file_and_syncs_each_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "kept.info").write_bytes(b"old")
    synced: list[str] = []
    real = files.fsync_directory
    monkeypatch.setattr(files, "fsync_directory", lambda p: (synced.append(p), real(p)))
    batch = [
        (str(tmp_path / "old" / "kept.info"), b"new"),
        (str(tmp_path / "old" / "added.info"), b"added"),
        (str(tmp_path / "a" / "b" / "deep.info"), b"deep"),
    ]
    files.write_all_atomically(batch)
    assert [Path(p).read_bytes() for p, _ in batch] == [b"new", b"added", b"deep"]
    assert sorted(os.listdir(tmp_path / "old")) == ["added.info", "kept.info"]
    # The files' directories, and the parents of the directories it created.
    expected = [tmp_path / "old", tmp_path / "a" / "b", tmp_path / "a", tmp_path]
    assert sorted(synced) == sorted(str(p) for p in expected)


def test_a_failed_batch_renames_nothing_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files.write_atomically(str(tmp_path / "one.info"), b"old")
    calls = [0]
    real_fsync = os.fsync

    def second_fsync_fails(fd: int) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(errno.EIO, "I/O error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", second_fsync_fails)
    with pytest.raises(OSError, match="I/O error"):
        files.write_all_atomically(
            [(str(tmp_path / "one.info"), b"new"), (str(tmp_path / "two.info"), b"two")]
        )
    assert os.listdir(tmp_path) == ["one.info"]
    assert (tmp_path / "one.info").read_bytes() == b"old"


# --- confinement to a root ---------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/ with a file, a dir, a link out and a link in; victim/ beside it."""
    root = tmp_path / "root"
    (root / "dir").mkdir(parents=True)
    (root / "file").write_text("x")
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "precious").write_text("keep")
    os.symlink(tmp_path / "victim", root / "out")
    os.symlink(root / "dir", root / "in")
    return root


@pytest.mark.parametrize(
    "path", ["..", "../victim", "dir/../../victim", "/", "out/precious", "out/../victim", "."]
)
def test_destructive_helpers_refuse_targets_outside_their_root(tree: Path, path: str) -> None:
    victim = tree.parent / "victim"
    for call in (
        lambda: files.remove_tree(str(tree), path),
        lambda: files.remove_file(str(tree), path),
        lambda: files.remove_dir(str(tree), path),
        lambda: files.replace(str(tree), "file", path),
        lambda: files.replace(str(tree), path, "file"),
        lambda: files.unmount(str(tree), path),
    ):
        with pytest.raises(files.OutsideRoot):
            call()
    assert (victim / "precious").read_text() == "keep"
    assert (tree / "file").read_text() == "x"


def test_a_link_is_removed_itself_never_its_target(tree: Path) -> None:
    files.remove_file(str(tree), "out")
    assert not os.path.lexists(tree / "out")
    assert (tree.parent / "victim" / "precious").read_text() == "keep"


def test_helpers_act_inside_their_root(tree: Path) -> None:
    files.replace(str(tree), "file", "dir/moved")
    assert (tree / "dir" / "moved").read_text() == "x"
    files.remove_file(str(tree), str(tree / "dir" / "moved"))  # absolute paths too
    files.remove_tree(str(tree), "in/../dir")
    assert not (tree / "dir").exists()


def test_inside_follows_links_only_when_asked(tree: Path) -> None:
    assert files.inside(str(tree), "in") == os.path.join(os.path.realpath(tree), "in")
    assert files.inside(str(tree), "in", follow=True) == os.path.realpath(tree / "dir")
    with pytest.raises(files.OutsideRoot):
        files.inside(str(tree), "out", follow=True)
