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
