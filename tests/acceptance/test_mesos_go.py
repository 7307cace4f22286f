"""The shared mesos-go acceptance checks (Debian's mesos-go 0.0.6), run against a real `mesilla local`.

The v1 scheduler and operator clients in both encodings (JSON and protobuf,
mesos-go's default), and the v0 scheduler driver over libprocess, also with
mesos-go's v0 custom executor on the agent's libprocess endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.acceptance.test_pymesos import require_shared, run_client

from mesilla.testing.cluster import LocalCluster

MESOS_GO_BIN = Path(os.environ.get("MESOS_GO_BIN", "/tmp/acceptance-mesos-go/bin"))

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_shared(MESOS_GO_BIN / "mesos-go-v1-sched")
    with LocalCluster(tmp_path_factory.mktemp("acceptance-mesos-go")) as running:
        yield running


def run_check(cluster: LocalCluster, program: str, *args: str) -> None:
    assert "check passed" in run_client(cluster, [str(MESOS_GO_BIN / program), *args])


@pytest.mark.parametrize("codec", ["json", "protobuf"])
@pytest.mark.parametrize("mode", ["launch", "group", "kill", "fail"])
def test_mesos_go_v1_scheduler(cluster: LocalCluster, mode: str, codec: str) -> None:
    run_check(cluster, "mesos-go-v1-sched", f"-codec={codec}", f"-mode={mode}")


@pytest.mark.parametrize("codec", ["json", "protobuf"])
def test_mesos_go_v1_operator(cluster: LocalCluster, codec: str) -> None:
    run_check(cluster, "mesos-go-v1-operator", f"-codec={codec}")


@pytest.mark.parametrize("mode", ["launch", "kill", "reconcile"])
def test_mesos_go_v0_scheduler(cluster: LocalCluster, mode: str) -> None:
    run_check(cluster, "mesos-go-v0-sched", f"-mode={mode}")


def test_mesos_go_v0_scheduler_with_the_v0_executor(cluster: LocalCluster) -> None:
    run_check(cluster, "mesos-go-v0-sched", "-mode=launch", f"-executor={MESOS_GO_BIN / 'mesos-go-v0-exec'}")
