"""A seeded chaos run per seed: agents and the master killed and restarted, agents
hung, executors, task processes and conmon monitors killed or stopped, an executor
hung across its agent's restart, an agent's sandbox disk filled, an agent's link to
the master cut, lossy or slow, the image registry killed mid-pull, all under a
steady load of pods and command tasks; the history checker judges the outcome.

A failure prints the seed and its schedule; `MESILLA_CHAOS_SEED=<seed>` reruns it
(the same faults in the same order), `benchmarks/chaos.py --seed=<seed> --shrink`
looks for a smaller failing schedule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mesilla.containerizer.launcher.linux import LinuxLauncher
from mesilla.testing.chaos.run import chaos_cluster, push_images, run_chaos
from mesilla.testing.chaos.schedule import make_schedule
from mesilla.testing.registry import start_registry
from tests.chaos.conftest import chaos_seconds

pytestmark = [
    pytest.mark.root,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.registry,
    pytest.mark.chaos,
]

# Fixed for CI: the same schedules on every run, a fault every 3-8 s; together they
# draw every kind of fault (34: agent, executor, task and conmon kills, a stopped and
# a hung executor, every network fault; 40: hung agents, master failover, a stopped
# conmon, a hung executor, every network fault; 81: the full disk, the registry
# killed, hung agents, a stopped conmon, lossy and slow links). About five minutes.
SEEDS = [34, 40, 81]
SECONDS = 50.0
GAP = (3.0, 8.0)


@pytest.mark.timeout(900)
async def test_chaos_under_load(tmp_path: Path, chaos_seed: int, request: pytest.FixtureRequest) -> None:
    if not LinuxLauncher.available():
        pytest.skip("needs conmon and runc that run containers here")
    seconds = chaos_seconds(request.config, SECONDS)
    schedule = make_schedule(chaos_seed, seconds, agents=2, gap=GAP)
    # The run's own registry: its registry_down faults kill and restart it.
    with start_registry() as registry:
        image, variants = push_images(registry)
        cluster = chaos_cluster(tmp_path / "cluster", registry.url)
        try:
            report = await run_chaos(cluster, image, schedule, seed=chaos_seed, seconds=seconds,
                                     registry=registry, variants=variants)  # fmt: skip
        finally:
            cluster.cleanup()
    print(report.text())
    assert not report.violations, report.text()
