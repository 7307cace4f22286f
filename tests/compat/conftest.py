"""The clients, built or installed once per session, and a `mesilla local` per test file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mesilla.testing.cluster import LocalCluster
from tests.compat import install


@pytest.fixture(scope="session")
def mesos_go() -> Path:
    with install.locked():
        return install.build_mesos_go()


@pytest.fixture(scope="session")
def pymesos_python() -> Path:
    with install.locked():
        return install.install_pymesos()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("compat")) as running:
        yield running
