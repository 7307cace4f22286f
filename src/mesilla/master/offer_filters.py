"""Refuse filters: a framework that declined an agent's resources is not offered them again
for ``refuse_seconds`` (Mesos's `OfferFilter`), unless it revives.

Filters are per agent and framework, not per role, as in Mesos; a heap of
expiries lets each allocation cycle drop the expired ones without a scan.
Pure bookkeeping, on the allocator's clock.
"""

from __future__ import annotations

import heapq
import math

# Mesos caps refuse filters at a year so that a huge `refuse_seconds` still expires.
MAX_REFUSE_SECONDS = 365 * 24 * 3600.0


class RefuseFilters:
    def __init__(self) -> None:
        #: agent_id -> framework_id -> expiry.
        self.by_agent: dict[str, dict[str, float]] = {}
        self._heap: list[tuple[float, str, str]] = []

    def add(self, agent_id: str, framework_id: str, now: float, refuse_seconds: float) -> None:
        finite = math.isfinite(refuse_seconds)
        expiry = now + (min(refuse_seconds, MAX_REFUSE_SECONDS) if finite else MAX_REFUSE_SECONDS)
        self.by_agent.setdefault(agent_id, {})[framework_id] = expiry
        heapq.heappush(self._heap, (expiry, agent_id, framework_id))

    def clear_framework(self, framework_id: str) -> None:
        for agent_id in [a for a, by_fw in self.by_agent.items() if framework_id in by_fw]:
            del self.by_agent[agent_id][framework_id]
            if not self.by_agent[agent_id]:
                del self.by_agent[agent_id]

    def clear_agent(self, agent_id: str) -> None:
        self.by_agent.pop(agent_id, None)

    def expire(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            expiry, agent_id, framework_id = heapq.heappop(heap)
            by_fw = self.by_agent.get(agent_id)
            # The heap may hold stale entries for filters replaced or cleared since.
            if by_fw is not None and by_fw.get(framework_id) == expiry:
                del by_fw[framework_id]
                if not by_fw:
                    del self.by_agent[agent_id]
