"""Metrics with Mesos's names, as ``/metrics/snapshot`` and GET_METRICS report them.

`Timer` is libprocess's timer metric: the last value under its name plus
statistics over a window of recent samples (``name/count``, ``/min``, ``/max``,
``/p50`` ... ``/p9999``). `snapshot` flattens the master's state, its counters
and the allocator's metrics into the ``{"name": number}`` object Mesos serves.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mesilla.master.master import Master

_PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999), ("p9999", 0.9999))


class Timer:
    """A windowed timer metric in milliseconds, named like ``allocator/mesos/allocation_run_ms``."""

    def __init__(self, name: str, window: int = 1000) -> None:
        self.name = name
        self._samples: deque[float] = deque(maxlen=window)

    def record(self, milliseconds: float) -> None:
        self._samples.append(milliseconds)

    def samples(self) -> list[float]:
        return list(self._samples)

    def snapshot(self) -> dict[str, float]:
        if not self._samples:
            return {}
        ordered = sorted(self._samples)
        out = {
            self.name: self._samples[-1],
            f"{self.name}/count": float(len(ordered)),
            f"{self.name}/min": ordered[0],
            f"{self.name}/max": ordered[-1],
        }
        for suffix, fraction in _PERCENTILES:
            out[f"{self.name}/{suffix}"] = percentile(ordered, fraction)
        return out


def percentile(ordered: list[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks of an ascending list."""
    if not ordered:
        raise ValueError("percentile of no samples")
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def snapshot(master: Master) -> dict[str, Any]:
    """The master's ``/metrics/snapshot``; filled in once the master state lands."""
    return dict(master.allocator.metrics)
