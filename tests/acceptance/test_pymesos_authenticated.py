"""The shared pymesos checks against a `mesilla local` that authenticates frameworks.

pymesos sends HTTP Basic credentials from its `principal`/`secret` (the
scripts' PRINCIPAL/SECRET): with them the checks pass, without them or with a
wrong secret they fail cleanly (non-zero exit, the master's 401 seen).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from tests.acceptance.test_pymesos import ACCEPTANCE, PYMESOS_PYTHON, require_shared, run_check

from mesilla.testing.cluster import LocalCluster

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]

PRINCIPAL, SECRET = "pymesos-check", "acceptance-secret"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_shared(PYMESOS_PYTHON)
    work_dir = tmp_path_factory.mktemp("acceptance-auth")
    credentials = work_dir / "credentials.json"
    credentials.write_text(json.dumps({"credentials": [{"principal": PRINCIPAL, "secret": SECRET}]}))
    credentials.chmod(0o600)
    flags = ["--authenticate_frameworks", "--authenticate_http_frameworks", f"--credentials={credentials}"]
    with LocalCluster(work_dir / "cluster", extra_flags=flags) as running:
        yield running


@pytest.mark.parametrize("script", ["pymesos_launch.py", "pymesos_group.py"])
def test_passes_with_credentials(cluster: LocalCluster, script: str) -> None:
    run_check(cluster, script, env={"PRINCIPAL": PRINCIPAL, "SECRET": SECRET})


@pytest.mark.parametrize(
    "credentials", [{}, {"PRINCIPAL": PRINCIPAL, "SECRET": "wrong"}], ids=["none", "wrong"]
)
@pytest.mark.parametrize("script", ["pymesos_launch.py", "pymesos_group.py"])
def test_fails_cleanly_without_them(cluster: LocalCluster, script: str, credentials: dict[str, str]) -> None:
    result = subprocess.run(
        [str(PYMESOS_PYTHON), str(ACCEPTANCE / script)],
        env={"PATH": "/usr/bin:/bin", "MASTER": cluster.master, "TIMEOUT": "20", **credentials},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0, result.stdout
    assert "401" in result.stdout + result.stderr, result.stderr
    assert not [f for f in cluster.get_json("/frameworks")["frameworks"] if f["active"]]
