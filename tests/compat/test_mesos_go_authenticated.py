"""mesos-go's v0 scheduler driver against a `mesilla local` with --authenticate_frameworks:
it authenticates with CRAM-MD5 (mesos-go's own SASL authenticatee) against --credentials."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesilla.testing.cluster import LocalCluster
from tests.compat.test_mesos_go import run_client

pytestmark = [pytest.mark.compat, pytest.mark.integration]

PRINCIPAL, SECRET = "v0-framework", "v0-secret"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    work_dir = tmp_path_factory.mktemp("compat-auth")
    credentials = work_dir / "credentials.json"
    credentials.write_text(json.dumps({"credentials": [{"principal": PRINCIPAL, "secret": SECRET}]}))
    credentials.chmod(0o600)
    flags = ["--authenticate_frameworks", f"--credentials={credentials}"]
    with LocalCluster(work_dir / "cluster", extra_flags=flags) as running:
        yield running


def test_v0_scheduler_authenticates(cluster: LocalCluster, mesos_go: Path) -> None:
    credentials = {"PRINCIPAL": PRINCIPAL, "SECRET": SECRET}
    out = run_client(cluster, [str(mesos_go / "v0sched"), "-mode=launch"], credentials)
    assert "ok: registered" in out
    assert "authenticated principal 'v0-framework'" in cluster.log_path.read_text()
    principals = {f["principal"] for f in cluster.get_json("/state")["completed_frameworks"]}
    assert PRINCIPAL in principals


@pytest.mark.parametrize(
    ("credentials", "logged"),
    [({}, "is not authenticated"), ({"PRINCIPAL": PRINCIPAL, "SECRET": "wrong"}, "invalid credentials")],
    ids=["none", "wrong"],
)
def test_v0_scheduler_without_the_secret_is_refused(
    cluster: LocalCluster, mesos_go: Path, credentials: dict[str, str], logged: str
) -> None:
    result = subprocess.run(
        [str(mesos_go / "v0sched"), "-mode=launch"],
        env={**os.environ, "MASTER": cluster.master, "TIMEOUT": "15", **credentials},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0, result.stdout
    assert "ok: registered" not in result.stdout
    assert not [f for f in cluster.get_json("/frameworks")["frameworks"] if f["active"]]
    assert logged in cluster.log_path.read_text()
