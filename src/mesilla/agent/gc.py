"""Garbage collection of ended executors' directories (Mesos's `src/slave/gc.cpp`).

When an executor run is removed, its sandbox and its meta directory are
scheduled for deletion after ``--gc_delay``; a restarted agent schedules the
completed runs it finds again, counting their age from the last change.
Metrics follow Mesos: ``gc/path_removals_{pending,succeeded,failed}``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.common.tasks import TaskOwner

log = logging.getLogger(__name__)


class GarbageCollector:
    """Deletes only paths inside `work_dir`, each in a worker thread (a sandbox can be a
    big tree), as a job of the agent's `tasks`."""

    def __init__(self, work_dir: str, tasks: TaskOwner) -> None:
        self.work_dir = work_dir
        self._tasks = tasks
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._on_removed: dict[str, Callable[[], None]] = {}
        self.succeeded = 0
        self.failed = 0

    @property
    def pending(self) -> int:
        return len(self._timers)

    def schedule(
        self, delay: float, path: str, on_removed: Callable[[], None] | None = None
    ) -> None:
        """Deletes `path` after `delay` seconds, counted from its last modification."""
        try:
            age = time.time() - os.lstat(path).st_mtime
        except FileNotFoundError:
            return
        self.unschedule(path)
        loop = asyncio.get_running_loop()
        self._timers[path] = loop.call_later(max(0.0, delay - age), self._start_removal, path)
        if on_removed is not None:
            self._on_removed[path] = on_removed

    def unschedule(self, path: str) -> None:
        timer = self._timers.pop(path, None)
        if timer is not None:
            timer.cancel()
        self._on_removed.pop(path, None)

    def _start_removal(self, path: str) -> None:
        self._timers.pop(path, None)
        self._tasks.spawn(self._remove(path), f"garbage collection of {path}")

    async def _remove(self, path: str) -> None:
        try:
            await in_thread(files.remove_tree, self.work_dir, path)
        except FileNotFoundError:
            pass
        except (OSError, files.OutsideRoot) as exc:
            self.failed += 1
            log.warning("Failed to garbage collect '%s': %s", path, exc)
            return
        self.succeeded += 1
        log.info("Garbage collected '%s'", path)
        callback = self._on_removed.pop(path, None)
        if callback is not None:
            callback()

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._on_removed.clear()
