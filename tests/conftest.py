"""Shared test set-up: marker prerequisites and small fixtures.

Markers (registered in pyproject.toml) state what a test needs; a test whose
prerequisite is missing is skipped with the reason, except under CI, where a
missing prerequisite is an error: CI installs everything.
"""

from __future__ import annotations

import os
import shutil
import socket

import pytest

IN_CI = bool(os.environ.get("CI"))

# Session-wide real parts: a docker-registry and busybox test images.
pytest_plugins = ["tests.fixtures.images", "tests.fixtures.linux_launcher", "tests.fixtures.clusters"]


def _missing(marker: str) -> str | None:
    if marker == "root" and os.geteuid() != 0:
        return "needs root"
    if marker == "registry" and shutil.which("docker-registry") is None:
        return "needs Debian's docker-registry (scripts/setup.sh installs it)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in ("root", "registry"):
            if item.get_closest_marker(marker) is None:
                continue
            reason = _missing(marker)
            if reason is None:
                continue
            # Under CI the test runs anyway and fails loudly: CI must have it all.
            if not IN_CI:
                item.add_marker(pytest.mark.skip(reason=reason))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unused_port() -> int:
    return free_port()
