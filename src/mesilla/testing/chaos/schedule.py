"""A seeded random fault schedule, and shrinking a failing one.

The schedule is made entirely from the seed before the run starts, so the
same seed gives the same faults in the same order at the same offsets; what
a fault hits among the containers of the moment (`pick`) is a number drawn
with it, applied to the containers sorted by name.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

# kind -> weight in a schedule
KINDS: dict[str, int] = {
    "agent_kill": 3,  # kill -9 of an agent, restarted after `duration`
    "master_kill": 2,  # kill -9 of the master, restarted after `duration`
    "agent_stop": 2,  # SIGSTOP of an agent, SIGCONT after `duration`
    "executor_kill": 3,  # kill -9 of an executor (a top-level container's pid)
    "task_kill": 3,  # kill -9 of a task's process (a nested container's pid, or a command's)
    "disk_full": 1,  # the agent's sandbox file system filled, freed after `duration`
    "net_partition": 2,  # the agent cut off from the master (all packets dropped), healed after `duration`
    "net_loss": 1,  # a share of its packets dropped (10-50%, from `pick`) for `duration`
    "net_slow": 1,  # its traffic held 0.05-0.8 s (from `pick`) each way for `duration`
    "registry_down": 1,  # the image registry killed (mid-pull, if one is going), restarted after `duration`
    "conmon_kill": 2,  # kill -9 of a container's conmon monitor
    "conmon_stop": 1,  # SIGSTOP of a conmon monitor, SIGCONT after `duration`
    "executor_stop": 1,  # SIGSTOP of an executor past the agent's timeouts, SIGCONT after `duration`
    # An executor hung (SIGSTOP) across an agent's kill -9 and restart: it cannot re-subscribe,
    # the agent must destroy it after --executor_reregistration_timeout (`duration` more is
    # given) and end its tasks with REASON_EXECUTOR_REREGISTRATION_TIMEOUT, as Mesos.
    "executor_hang": 1,
}
PICKED = ("executor_kill", "task_kill", "conmon_kill", "conmon_stop", "executor_stop", "executor_hang")


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the load started
    kind: str
    target: int  # agent index (ignored by master_kill and registry_down)
    duration: float = 0.0  # down, stopped or full for that long
    pick: float = 0.0  # which container, in [0, 1), of those sorted by name

    def line(self) -> str:
        what = {"master_kill": "master", "registry_down": "registry"}.get(self.kind, f"agent {self.target}")
        extra = f" for {self.duration:.1f}s" if self.duration else ""
        extra += f" pick {self.pick:.3f}" if self.kind in PICKED else ""
        extra += f" loss {loss(self):.0%}" if self.kind == "net_loss" else ""
        extra += f" delay {delay(self):.2f}s" if self.kind == "net_slow" else ""
        return f"+{self.at:6.1f}s {self.kind:<13} {what}{extra}"


def loss(fault: Fault) -> float:
    """A net_loss fault's drop probability."""
    return 0.1 + 0.4 * fault.pick


def delay(fault: Fault) -> float:
    """A net_slow fault's delay, each way."""
    return 0.05 + 0.75 * fault.pick


def make_schedule(
    seed: int, seconds: float, agents: int, *, kinds: Sequence[str] = tuple(KINDS),
    gap: tuple[float, float] = (5.0, 15.0),
) -> list[Fault]:  # fmt: skip
    """Faults every `gap` seconds (uniform) for `seconds`, kinds drawn by weight."""
    rng = random.Random(seed)
    names = list(kinds)
    weights = [KINDS[k] for k in names]
    faults = []
    at = rng.uniform(*gap) / 2
    while at < seconds:
        kind = rng.choices(names, weights)[0]
        duration = {
            "agent_kill": rng.uniform(0, 3),
            "master_kill": rng.uniform(0, 3),
            "agent_stop": rng.uniform(1, 10),
            "disk_full": rng.uniform(3, 10),
            "net_partition": rng.uniform(2, 15),
            "net_loss": rng.uniform(5, 20),
            "net_slow": rng.uniform(5, 20),
            "registry_down": rng.uniform(3, 15),
            "conmon_stop": rng.uniform(1, 10),
            "executor_stop": rng.uniform(5, 30),
            "executor_hang": rng.uniform(2, 10),
        }.get(kind, 0.0)
        faults.append(
            Fault(round(at, 2), kind, rng.randrange(agents), round(duration, 2), round(rng.random(), 4))
        )
        at += rng.uniform(*gap)
    return faults


def describe(seed: int | None, faults: Sequence[Fault]) -> str:
    head = f"seed {seed}" if seed is not None else "explicit schedule"
    return "\n".join([f"{head}, {len(faults)} faults:", *(f"  {f.line()}" for f in faults)])


def dumps(faults: Sequence[Fault]) -> str:
    return json.dumps([asdict(f) for f in faults])


def loads(text: str) -> list[Fault]:
    return [Fault(**f) for f in json.loads(text)]


def shrink(faults: Sequence[Fault], fails: Callable[[list[Fault]], bool]) -> list[Fault]:
    """A smaller schedule that still `fails` (a rerun of the chaos run with it): drop
    halves while one still fails, then single faults (delta debugging, coarse to fine).
    Each try is a whole run; chaos is not deterministic in timing, so a result is a
    candidate to rerun, not a proof."""
    current = list(faults)
    chunk = max(1, len(current) // 2)
    while current:
        removed = False
        for start in range(0, len(current), chunk):
            candidate = current[:start] + current[start + chunk:]
            if candidate != current and fails(candidate):
                current, removed = candidate, True
                break
        if removed:
            chunk = max(1, min(chunk, len(current) // 2))
        elif chunk > 1:
            chunk //= 2
        else:
            break
    return current
