"""The Mesos layout of sandboxes and checkpoints."""

from __future__ import annotations

import os
from typing import Any

from mesilla.agent import paths


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
