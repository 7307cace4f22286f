"""Reading a container's processes from /proc, for the usage-only posix isolators.

A posix container's processes are its first process and everything in that
process's session (the launcher makes the first process a session leader), so
the session id is the container's identity here, as the process group is for
signals.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator

from mesilla.common import procfs
from mesilla.common.procfs import Stat

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _live_processes() -> Iterator[Stat]:
    """Every live process (zombies have nothing left to measure or kill)."""
    return (process for process in procfs.processes() if process.state != "Z")


def session_processes(session: int) -> list[Stat]:
    """The session's live processes, read now (what a kill must see)."""
    return [sample for sample in _live_processes() if sample.session == session]


class _Sessions:
    """Every session's processes from one walk of /proc, reused for `MAX_AGE` seconds.

    A GET_CONTAINERS asks posix/cpu and posix/mem for every container; a walk
    of /proc per container and isolator took seconds at 100 pods. Usage is a
    sample anyway, so the containers of one listing share one walk. A session
    the last walk did not see (a container started since) gets a fresh one.
    """

    MAX_AGE = 0.25

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken = -math.inf
        self._by_session: dict[int, list[Stat]] = {}

    def of(self, session: int) -> list[Stat]:
        with self._lock:
            stale = time.monotonic() - self._taken > self.MAX_AGE
            if stale or session not in self._by_session:
                by_session: dict[int, list[Stat]] = {}
                for sample in _live_processes():
                    by_session.setdefault(sample.session, []).append(sample)
                self._by_session, self._taken = by_session, time.monotonic()
            return self._by_session.get(session, [])


_SESSIONS = _Sessions()


def cpu_times(session: int) -> tuple[float, float]:
    """User and system CPU seconds of the session's live processes (a sample at most MAX_AGE old)."""
    samples = _SESSIONS.of(session)
    user = sum(s.user_ticks for s in samples) / _CLOCK_TICKS
    system = sum(s.system_ticks for s in samples) / _CLOCK_TICKS
    return user, system


def rss_bytes(session: int) -> int:
    return sum(s.rss_pages for s in _SESSIONS.of(session)) * _PAGE_SIZE
