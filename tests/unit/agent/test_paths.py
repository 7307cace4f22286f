"""The Mesos layout of sandboxes and checkpoints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mesilla.agent import checkpoints, paths
from mesilla.common import files


def test_sandbox_and_meta_layout() -> None:
    assert paths.executor_run_dir("/w", "A", "F", "E", "C") == (
        "/w/slaves/A/frameworks/F/executors/E/runs/C"
    )
    assert paths.task_updates_path("/w", "A", "F", "E", "C", "T") == (
        "/w/meta/slaves/A/frameworks/F/executors/E/runs/C/tasks/T/task.updates"
    )
    assert paths.forked_pid_path("/w", "A", "F", "E", "C").endswith("runs/C/pids/forked.pid")
    assert paths.latest_agent_path("/w") == "/w/meta/slaves/latest"
    assert paths.executor_virtual_path("F", "E") == "/frameworks/F/executors/E/runs/latest"


def test_latest_symlink_is_replaced(tmp_path: Any) -> None:
    link = str(tmp_path / "latest")
    paths.update_latest_symlink(link, "/one")
    paths.update_latest_symlink(link, "/two")
    assert os.readlink(link) == "/two"


def test_a_latest_link_left_half_made_is_skipped_by_the_run_listing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "r1").mkdir(parents=True)
    link = str(runs / paths.LATEST)
    paths.update_latest_symlink(link, str(runs / "r1"))
    # A crash between symlink and rename leaves the temporary link behind.
    os.symlink(str(runs / "r1"), str(runs / f"{files.TMP_PREFIX}{paths.LATEST}.123"))
    assert [n for n in os.listdir(runs) if files.is_temporary(n)]
    assert checkpoints.listdir_ids(str(runs)) == ["r1"]
