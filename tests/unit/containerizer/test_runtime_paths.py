"""The runtime directory read back at recovery: only valid container ids, never followed out."""

from __future__ import annotations

from pathlib import Path

import pytest

from mesilla.common import files
from mesilla.containerizer.runtime_paths import RuntimeDir
from mesilla.v1.mesos import ContainerID


def test_names_that_are_no_container_ids_are_skipped(tmp_path: Path) -> None:
    containers = tmp_path / "containers"
    for name in ("ok", "a.b", "a b", "ok/containers/child", "ok/containers/x.y"):
        (containers / name).mkdir(parents=True)
    found = RuntimeDir(str(tmp_path)).containers()
    assert found == [
        ContainerID(value="ok"),
        ContainerID(value="child", parent=ContainerID(value="ok")),
    ]


def test_remove_stays_inside_the_runtime_directory(tmp_path: Path) -> None:
    (tmp_path / "victim").mkdir()
    runtime = tmp_path / "run"
    (runtime / "containers" / "c").mkdir(parents=True)
    runtime_dir = RuntimeDir(str(runtime))
    runtime_dir.remove(ContainerID(value="c"))
    assert not (runtime / "containers" / "c").exists()
    with pytest.raises(files.OutsideRoot):
        runtime_dir.remove(ContainerID(value="../../victim"))
    assert (tmp_path / "victim").is_dir()
