"""What the allocator leans on: timer metrics and interned resource keys."""

from __future__ import annotations

import copy
import pickle

import pytest

from mesilla.common.resources import Resources
from mesilla.master.metrics import Timer, percentile


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([10.0], 0.99) == 10.0
    assert percentile([0.0, 10.0], 0.5) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.9) == pytest.approx(4.6)
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_timer_reports_last_value_and_window_statistics() -> None:
    timer = Timer("allocator/mesos/allocation_run_ms", window=3)
    assert timer.snapshot() == {}
    for value in (100.0, 1.0, 2.0, 3.0):  # 100 falls out of the window
        timer.record(value)

    snapshot = timer.snapshot()

    assert snapshot["allocator/mesos/allocation_run_ms"] == 3.0
    assert snapshot["allocator/mesos/allocation_run_ms/count"] == 3
    assert snapshot["allocator/mesos/allocation_run_ms/min"] == 1.0
    assert snapshot["allocator/mesos/allocation_run_ms/max"] == 3.0
    assert snapshot["allocator/mesos/allocation_run_ms/p50"] == 2.0
    assert set(snapshot) >= {
        f"allocator/mesos/allocation_run_ms/{p}" for p in ("p90", "p95", "p99", "p999", "p9999")
    }


def test_resources_stay_equal_through_copies_and_pickles() -> None:
    # The allocator compares resources by their interned keys' identity.
    resources = Resources.parse("cpus:1;mem(web):2;ports:[31000-31005];zones:{a,b}")
    for clone in (copy.copy(resources), copy.deepcopy(resources), pickle.loads(pickle.dumps(resources))):
        assert clone == resources
        assert not (clone - resources)
        assert resources.contains(clone)
