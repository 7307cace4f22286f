"""The chaos schedule: made from the seed alone, every kind in CI's seeds, readable lines."""

from __future__ import annotations

from tests.chaos import test_chaos

from mesilla.testing.chaos import schedule
from mesilla.testing.chaos.schedule import KINDS, Fault, make_schedule


def test_a_seed_gives_the_same_schedule() -> None:
    assert make_schedule(7, 120, agents=2) == make_schedule(7, 120, agents=2)
    assert make_schedule(7, 120, agents=2) != make_schedule(8, 120, agents=2)
    assert schedule.loads(schedule.dumps(make_schedule(7, 120, agents=2))) == make_schedule(7, 120, agents=2)


def test_the_ci_seeds_draw_every_kind_of_fault() -> None:
    drawn = {
        f.kind
        for seed in test_chaos.SEEDS
        for f in make_schedule(seed, test_chaos.SECONDS, agents=2, gap=test_chaos.GAP)
    }
    assert drawn == set(KINDS)


def test_network_faults_say_how_bad() -> None:
    assert "loss 30%" in Fault(1.0, "net_loss", 0, 5.0, 0.5).line()
    assert "delay 0.42s" in Fault(1.0, "net_slow", 1, 5.0, 0.5).line()
    assert "registry" in Fault(1.0, "registry_down", 0, 5.0).line()
