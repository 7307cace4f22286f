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
