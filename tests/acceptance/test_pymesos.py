"""The shared pymesos acceptance checks (../shared), run against a real `mesilla local`.

pymesos is an unmodified Mesos client; these checks are the bar the issues set.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesilla.testing.cluster import LocalCluster

ACCEPTANCE = (
    Path(os.environ.get("MESILLA_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "acceptance"
)
PYMESOS_PYTHON = Path(os.environ.get("PYMESOS_VENV", "/tmp/acceptance-pymesos")) / "bin" / "python"

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_shared(PYMESOS_PYTHON)
    with LocalCluster(tmp_path_factory.mktemp("acceptance")) as running:
        yield running


def require_shared(client: Path) -> None:
    """Skips without ../shared (a public clone: tests/compat is the project's own suite);
    with it, a client missing under CI is a failure: CI installs it (scripts/setup.sh)."""
    if not ACCEPTANCE.is_dir():
        pytest.skip(f"the shared acceptance checks are not here ({ACCEPTANCE})")
    if not client.exists():
        if os.environ.get("CI"):
            pytest.fail(f"acceptance client missing ({client})")
        pytest.skip(f"acceptance client not installed ({client}; scripts/setup.sh installs it)")


def run_client(cluster: LocalCluster, argv: list[str], env: dict[str, str] | None = None) -> str:
    """Runs an acceptance client against the cluster's master; returns its stdout."""
    result = subprocess.run(
        argv,
        env={**os.environ, "MASTER": cluster.master, "TIMEOUT": "60", **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, (
        f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}\n"
        f"--- cluster log ---\n{cluster.log_tail()}"
    )
    return result.stdout


def run_check(cluster: LocalCluster, script: str, *args: str, env: dict[str, str] | None = None) -> None:
    run_client(cluster, [str(PYMESOS_PYTHON), str(ACCEPTANCE / script), *args], env)


@pytest.mark.parametrize("args", [(), ("--fail",), ("--kill",)], ids=["plain", "fail", "kill"])
def test_pymesos_launch(cluster: LocalCluster, args: tuple[str, ...]) -> None:
    run_check(cluster, "pymesos_launch.py", *args)


def test_pymesos_custom_executor(cluster: LocalCluster) -> None:
    run_check(cluster, "pymesos_custom.py")


@pytest.mark.parametrize("args", [(), ("--kill",), ("--fail",)], ids=["plain", "kill", "fail"])
def test_pymesos_group_strict(cluster: LocalCluster, args: tuple[str, ...]) -> None:
    run_check(cluster, "pymesos_group.py", *args, env={"STRICT": "1"})
