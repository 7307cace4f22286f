"""mesos-go 0.0.6 (Debian's, unmodified) against `mesilla local`: the v1 scheduler
and operator APIs in both encodings, and the v0 libprocess scheduler and executor drivers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mesilla.testing.cluster import LocalCluster

pytestmark = [pytest.mark.compat, pytest.mark.integration]


def run_client(cluster: LocalCluster, argv: list[str], env: dict[str, str] | None = None) -> str:
    """Runs a client against the cluster's master; returns its stdout, which ends in `check passed`."""
    result = subprocess.run(argv, env={**os.environ, "MASTER": cluster.master, **(env or {})},
                            capture_output=True, text=True, timeout=180)  # fmt: skip
    assert result.returncode == 0 and "check passed" in result.stdout, (
        f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}\n"
        f"--- cluster log ---\n{cluster.log_tail()}"
    )
    return result.stdout


@pytest.mark.parametrize("codec", ["json", "protobuf"])
@pytest.mark.parametrize("mode", ["launch", "fail", "kill", "group"])
def test_v1_scheduler(cluster: LocalCluster, mesos_go: Path, mode: str, codec: str) -> None:
    run_client(cluster, [str(mesos_go / "v1sched"), f"-codec={codec}", f"-mode={mode}"])


@pytest.mark.parametrize("codec", ["json", "protobuf"])
def test_v1_operator(cluster: LocalCluster, mesos_go: Path, codec: str) -> None:
    run_client(cluster, [str(mesos_go / "v1operator"), f"-codec={codec}"])


@pytest.mark.parametrize("mode", ["launch", "kill"])
def test_v0_scheduler(cluster: LocalCluster, mesos_go: Path, mode: str) -> None:
    run_client(cluster, [str(mesos_go / "v0sched"), f"-mode={mode}"])


def test_v0_scheduler_with_a_v0_executor(cluster: LocalCluster, mesos_go: Path) -> None:
    run_client(cluster, [str(mesos_go / "v0sched"), f"-executor={mesos_go / 'v0exec'}"])
