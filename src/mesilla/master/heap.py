"""Keeping the cyclic garbage collector's full passes short on a master with a large heap.

At 10,000 agents the master holds over a million objects the collector
tracks (each agent's stream, connection, request and records; every task).
CPython 3.11's full collection walks all of them with the event loop stopped,
0.5 to 3 s at that size, and runs again each time the survivors grew by a
quarter: several times a minute while agents register or tasks launch
(measured with `benchmarks/master_scale.py`).

`HeapKeeper` freezes (`gc.freeze()`) what survives each full collection:
those objects move to the permanent generation, which collections skip, so
the next full pass walks only what survived since. Frozen objects that later
become unreachable within reference cycles are not reclaimed by those passes;
every `thaw_interval` the keeper unfreezes everything and collects once, which
reclaims them: one long pass every few minutes instead of many. Objects freed
by reference counting, most of them, are freed at once as always.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from typing import Any

from mesilla.common.tasks import Loop, TaskOwner

log = logging.getLogger(__name__)

THAW_INTERVAL = 600.0
_OLDEST = 2


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    # At "stop" the collection is over and the generations are consistent.
    if phase == "stop" and info["generation"] == _OLDEST:
        gc.freeze()


class HeapKeeper:
    def __init__(self, thaw_interval: float = THAW_INTERVAL) -> None:
        self.thaw_interval = thaw_interval
        self._loop = Loop("heap keeper", self._thaw)

    def start(self, owner: TaskOwner) -> None:
        """Called once the registry is recovered: what exists then is long-lived. The
        periodic thaw runs as a task of `owner`, until `stop`."""
        if self._loop.start(owner):
            gc.freeze()
            gc.callbacks.append(_freeze_survivors)

    async def stop(self) -> None:
        if await self._loop.stop():
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(_freeze_survivors)
            gc.unfreeze()

    async def _thaw(self) -> None:
        while True:
            await asyncio.sleep(self.thaw_interval)
            frozen = gc.get_freeze_count()
            started = time.perf_counter()
            gc.unfreeze()
            gc.collect()  # freezes its survivors again (`_freeze_survivors`)
            log.info(
                "full garbage collection over %d objects took %.0f ms",
                frozen,
                (time.perf_counter() - started) * 1000,
            )
