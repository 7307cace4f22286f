"""Sandbox files: confinement of paths, browse and read semantics."""

from __future__ import annotations

import os
from typing import Any

import pytest

from mesilla.common import attached_files as files
from mesilla.common.errors import BadRequest, Forbidden, NotFound


@pytest.fixture
def sandbox(tmp_path: Any) -> tuple[files.Files, str]:
    root = tmp_path / "runs" / "C1"
    root.mkdir(parents=True)
    (root / "stdout").write_text("hello world")
    (root / "sub").mkdir()
    (tmp_path / "secret").write_text("outside")
    os.symlink(str(tmp_path / "secret"), str(root / "escape"))
    os.symlink(str(root), str(tmp_path / "runs" / "latest"))
    f = files.Files()
    f.attach(str(root), str(root))
    f.attach(str(tmp_path / "runs" / "latest"), "/frameworks/F/executors/E/runs/latest")
    return f, str(root)


def test_virtual_and_real_paths_resolve(sandbox: tuple[files.Files, str]) -> None:
    f, root = sandbox
    assert f.resolve("/frameworks/F/executors/E/runs/latest/stdout") == os.path.join(
        os.path.realpath(root), "stdout"
    )
    assert f.resolve(root + "/stdout").endswith("stdout")


@pytest.mark.parametrize(
    "path, error",
    [
        ("/frameworks/F/executors/E/runs/latest/../../../../secret", Forbidden),
        ("/frameworks/F/executors/E/runs/latest/escape", Forbidden),
        ("/frameworks/F/executors/E/runs/latest/missing", NotFound),
        ("/etc/passwd", NotFound),
        ("/", NotFound),
    ],
)
def test_paths_outside_sandboxes_are_refused(
    sandbox: tuple[files.Files, str], path: str, error: type[Exception]
) -> None:
    f, _ = sandbox
    with pytest.raises(error):
        f.resolve(path)


def test_browse_lists_entries_with_mesos_fields(sandbox: tuple[files.Files, str]) -> None:
    f, _ = sandbox
    listing = files.browse(f, "/frameworks/F/executors/E/runs/latest")
    names = [e["path"] for e in listing]
    assert "/frameworks/F/executors/E/runs/latest/stdout" in names
    stdout = next(e for e in listing if str(e["path"]).endswith("stdout"))
    assert set(stdout) == {"path", "mode", "nlink", "uid", "gid", "size", "mtime"}
    assert stdout["size"] == 11 and str(stdout["mode"]).startswith("-")


def test_read_offsets_and_lengths(sandbox: tuple[files.Files, str]) -> None:
    f, _ = sandbox
    path = "/frameworks/F/executors/E/runs/latest/stdout"
    assert files.read(f, path, 6, None) == (11, b"world")
    assert files.read(f, path, 0, 5) == (11, b"hello")
    assert files.read(f, path, 0, 0) == (11, b"")
    assert files.read(f, path, 100, None) == (11, b"")
    with pytest.raises(BadRequest, match="directory"):
        files.read(f, "/frameworks/F/executors/E/runs/latest/sub", 0, None)


def test_read_is_capped_at_16_pages(tmp_path: Any) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * (files.MAX_READ_LENGTH * 2))
    f = files.Files()
    f.attach(str(tmp_path), "/d")
    size, data = files.read(f, "/d/big", 0, None)
    assert size == files.MAX_READ_LENGTH * 2 and len(data) == files.MAX_READ_LENGTH


@pytest.mark.parametrize("path", ["/d/a\0b", "/d/\n", "/d/\x7f"])
def test_control_characters_are_bad_requests(tmp_path: Any, path: str) -> None:
    f = files.Files()
    f.attach(str(tmp_path), "/d")
    with pytest.raises(BadRequest, match="invalid characters"):
        f.resolve(path)


def test_a_fifo_is_refused_without_blocking(tmp_path: Any) -> None:
    os.mkfifo(tmp_path / "fifo")
    f = files.Files()
    f.attach(str(tmp_path), "/d")
    with pytest.raises(BadRequest, match="special file"):
        files.read(f, "/d/fifo", 0, None)


def test_what_is_opened_is_checked_again(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox changed between the check and the open (here: the check is told a lie)."""
    root = tmp_path / "sandbox"
    root.mkdir()
    (tmp_path / "secret").write_text("outside")
    f = files.Files()
    f.attach(str(root), "/d")
    monkeypatch.setattr(f, "_resolve", lambda path: (str(tmp_path / "secret"), str(root)))
    with pytest.raises(Forbidden):
        files.read(f, "/d/anything", 0, None)


def test_an_attachment_with_its_own_authorization_is_not_the_defaults(tmp_path: Any) -> None:
    asked: list[tuple[str, str]] = []
    f = files.Files(lambda _request, path: asked.append(("default", path)))
    (tmp_path / "sandbox").mkdir()
    (tmp_path / "mesos-agent.INFO").write_text("log")
    f.attach(str(tmp_path / "sandbox"), "/sandbox")
    f.attach(str(tmp_path / "mesos-agent.INFO"), "/slave/log", lambda _request: asked.append(("log", "")))
    request: Any = object()

    f.authorize(request, "/slave/log")
    f.authorize(request, "/slave/log/")
    f.authorize(request, "/sandbox/stdout")
    f.authorize(request, "/elsewhere")

    assert asked == [("log", ""), ("log", ""), ("default", "/sandbox/stdout"), ("default", "/elsewhere")]
    f.detach("/slave/log")
    f.authorize(request, "/slave/log")
    assert asked[-1] == ("default", "/slave/log")


def test_nothing_lies_below_an_attached_file(tmp_path: Any) -> None:
    (tmp_path / "log").write_text("line")
    f = files.Files()
    f.attach(str(tmp_path / "log"), "/master/log")
    assert files.read(f, "/master/log", 0, None) == (4, b"line")
    assert files.browse(f, "/master/log") == []
    with pytest.raises(NotFound):
        f.resolve("/master/log/log")
