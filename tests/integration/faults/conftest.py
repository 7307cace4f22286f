"""Fault-injection fixtures: a master and agents as separate processes, under the test's tmp_path.

`make_cluster(master_flags=..., agent_flags=...)` builds and starts a
`mesilla.testing.processes.Cluster` (linux launcher on runc, the docker
provisioner pulling from the session's docker-registry, its own cgroups root);
whatever happens to the test, the fixture stops every daemon by its pid and
removes what they left. `make_framework(...)` subscribes a checkpointing
framework that acknowledges each update, closed at the end (before the cluster
goes). Each test asserts itself that its workload left nothing behind.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mesilla.containerizer.launcher.linux import LinuxLauncher
from mesilla.testing.processes import LINUX_AGENT_FLAGS as AGENT_FLAGS
from mesilla.testing.processes import Cluster
from mesilla.testing.registry import Registry
from mesilla.testing.scheduler import Framework


def _require_parts() -> None:
    if shutil.which("runc") is None or not LinuxLauncher.available():
        pytest.skip("needs conmon and runc that run containers here")


@pytest.fixture
def make_cluster(tmp_path: Path, docker_registry: Registry) -> Iterator[Callable[..., Cluster]]:
    _require_parts()
    clusters: list[Cluster] = []

    def make(
        *, num_agents: int = 1, master_flags: list[str] | None = None,
        agent_flags: list[str] | None = None, start: bool = True,
    ) -> Cluster:
        cluster = Cluster(
            tmp_path / f"cluster-{len(clusters)}",
            num_agents=num_agents,
            master_flags=master_flags,
            agent_flags=[*AGENT_FLAGS, f"--docker_registry={docker_registry.url}", *(agent_flags or [])],
        )
        clusters.append(cluster)
        if start:
            cluster.start()
        return cluster

    try:
        yield make
    finally:
        for cluster in clusters:
            removed = cluster.cleanup()
            if removed:
                # The test's own assertions judge leaks; this tells what a failure left.
                warnings.warn(f"cleanup of {cluster.root} removed: {removed}", stacklevel=1)


@pytest.fixture
async def make_framework(
    make_cluster: Callable[..., Cluster],  # frameworks close before their clusters go
) -> AsyncIterator[Callable[..., Awaitable[Framework]]]:
    frameworks: list[Framework] = []

    async def make(cluster: Cluster, **options: Any) -> Framework:
        options.setdefault("failover_timeout", 3600.0)
        framework = Framework(cluster.master_address, **options)
        frameworks.append(framework)
        await framework.subscribe()
        return framework

    try:
        yield make
    finally:
        for framework in frameworks:
            await framework.close()
