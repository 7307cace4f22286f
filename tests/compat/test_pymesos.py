"""pymesos 0.3.15 (PyPI, unmodified) against `mesilla local`: v1 scheduler and executor APIs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mesilla.testing.cluster import LocalCluster
from tests.compat.install import CLIENTS
from tests.compat.test_mesos_go import run_client

pytestmark = [pytest.mark.compat, pytest.mark.integration]


@pytest.mark.parametrize("mode", ["launch", "kill", "group", "custom"])
def test_pymesos(cluster: LocalCluster, pymesos_python: Path, mode: str) -> None:
    run_client(cluster, [str(pymesos_python), str(CLIENTS / "pymesos_scheduler.py"), mode])


def test_pymesos_hears_a_lost_agent(tmp_path: Path, pymesos_python: Path) -> None:
    """Its own cluster: the check marks the agent gone."""
    with LocalCluster(tmp_path / "cluster") as cluster:
        out = run_client(cluster, [str(pymesos_python), str(CLIENTS / "pymesos_scheduler.py"), "agent_lost"])
    assert "ok: slaveLost" in out and "TASK_LOST" in out
