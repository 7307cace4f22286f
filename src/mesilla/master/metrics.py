"""Metrics with Mesos's names, as ``/metrics/snapshot`` and GET_METRICS report them.

`Timer` is libprocess's timer metric: the last value under its name plus
statistics over a window of recent samples (``name/count``, ``/min``, ``/max``,
``/p50`` ... ``/p9999``). `snapshot` flattens the master's state, its counters
and the allocator's metrics into the ``{"name": number}`` object Mesos serves.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from typing import TYPE_CHECKING

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


# Counters Mesos always reports, even before the first increment.
_COUNTERS = [
    f"master/{name}"
    for name in (
        "dropped_messages", "invalid_executor_to_framework_messages",
        "invalid_framework_to_executor_messages", "invalid_status_update_acknowledgements",
        "invalid_status_updates", "messages_authenticate", "messages_deactivate_framework",
        "messages_decline_offers", "messages_executor_to_framework", "messages_exited_executor",
        "messages_framework_to_executor", "messages_kill_task", "messages_launch_tasks",
        "messages_reconcile_tasks", "messages_register_framework", "messages_register_slave",
        "messages_reregister_framework", "messages_reregister_slave", "messages_resource_request",
        "messages_revive_offers", "messages_status_update", "messages_status_update_acknowledgement",
        "messages_suppress_offers", "messages_unregister_framework", "messages_unregister_slave",
        "messages_update_slave", "recovery_slave_removals", "slave_registrations",
        "slave_removals", "slave_removals/reason_registered", "slave_removals/reason_unhealthy",
        "slave_removals/reason_unregistered", "slave_reregistrations", "slave_shutdowns_canceled",
        "slave_shutdowns_completed", "slave_shutdowns_scheduled", "slave_unreachable_canceled",
        "slave_unreachable_completed", "slave_unreachable_scheduled",
        "tasks_dropped", "tasks_error", "tasks_failed", "tasks_finished", "tasks_gone",
        "tasks_gone_by_operator", "tasks_killed", "tasks_lost",
        "valid_executor_to_framework_messages", "valid_framework_to_executor_messages",
        "valid_status_update_acknowledgements", "valid_status_updates",
        "operator_event_stream_subscribers",
    )
]
# Task states whose counts are gauges of live tasks (the terminal ones are counters).
_LIVE_STATES = ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING", "TASK_UNREACHABLE")
_SCALARS = ("cpus", "mem", "disk", "gpus")


def snapshot(master: Master) -> dict[str, float]:
    """The master's ``/metrics/snapshot``: master gauges and counters, allocator and system metrics."""
    out: dict[str, float] = {name: 0.0 for name in _COUNTERS}
    out.update({name: float(value) for name, value in master.counters.items()})
    allocator = master.allocator.metrics
    out.update(_master_gauges(master, allocator))
    out.update(allocator)
    out.update(_system())
    return out


def _master_gauges(master: Master, allocator: dict[str, float]) -> dict[str, float]:
    agents = list(master.agents.values())
    frameworks = list(master.frameworks.values())
    out = {
        "master/elected": 1.0 if master.elected_time is not None else 0.0,
        "master/uptime_secs": time.time() - master.start_time,
        "master/slaves_active": float(sum(a.active for a in agents)),
        "master/slaves_inactive": float(sum(not a.active for a in agents)),
        "master/slaves_connected": float(sum(a.connected for a in agents)),
        "master/slaves_disconnected": float(sum(not a.connected for a in agents)),
        "master/slaves_unreachable": float(len(master.unreachable_agents)),
        "master/frameworks_active": float(sum(f.active for f in frameworks)),
        "master/frameworks_inactive": float(sum(not f.active for f in frameworks)),
        "master/frameworks_connected": float(sum(f.connected for f in frameworks)),
        "master/frameworks_disconnected": float(sum(not f.connected for f in frameworks)),
        "master/outstanding_offers": float(len(master.offers)),
        "master/event_queue_messages": 0.0,
        "master/event_queue_dispatches": 0.0,
        "master/event_queue_http_requests": 0.0,
        "registrar/log/recovered": 1.0 if master.elected_time is not None else 0.0,
    }
    states = Counter(task.state.value for task in master.book.tasks())
    for state in _LIVE_STATES:
        out[f"master/tasks_{state.removeprefix('TASK_').lower()}"] = float(states.get(state, 0))
    # The allocator keeps the cluster's totals; summing agents' resources here
    # would cost a snapshot tens of milliseconds at 10,000 agents.
    used = _used_scalars(master)
    for name in _SCALARS:
        all_ = allocator.get(f"allocator/mesos/resources/{name}/total", 0.0)
        in_use = round(used.get(name, 0), 3)
        out[f"master/{name}_total"] = all_
        out[f"master/{name}_used"] = in_use
        out[f"master/{name}_percent"] = in_use / all_ if all_ else 0.0
    return out


def _used_scalars(master: Master) -> dict[str, float]:
    """Scalars held by live tasks and executors on registered agents, as Mesos counts `_used`."""
    used: dict[str, float] = {}
    for framework in master.frameworks.values():
        held = [t.resources for t in framework.tasks.values() if not t.state.terminal]
        held += [e.resources for executors in framework.executors.values() for e in executors.values()]
        for resources in held:
            for r in resources:
                if r.scalar is not None:
                    used[r.name] = used.get(r.name, 0.0) + r.scalar.value
    return used


def _system() -> dict[str, float]:
    """Mesos's ``system/*`` gauges, from the host."""
    out = {"system/cpus_total": float(os.cpu_count() or 0)}
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    if load is not None:
        out.update({"system/load_1min": load[0], "system/load_5min": load[1], "system/load_15min": load[2]})
    meminfo = _meminfo()
    if "MemTotal" in meminfo:
        out["system/mem_total_bytes"] = float(meminfo["MemTotal"])
        out["system/mem_free_bytes"] = float(meminfo.get("MemAvailable", meminfo.get("MemFree", 0)))
    return out


def _meminfo() -> dict[str, int]:
    try:
        with open("/proc/meminfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name] = int(parts[0]) * 1024
    return out
