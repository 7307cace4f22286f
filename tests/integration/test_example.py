"""The README's main job, `examples/hello_pod.py`, keeps working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello_pod.py"


@pytest.mark.root
@pytest.mark.integration
def test_example_runs_a_command_task_and_a_pod(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), f"--work_dir={tmp_path}"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all tasks finished" in result.stdout
    assert "line 3" in result.stdout  # the reader saw what the writer wrote in the shared volume
