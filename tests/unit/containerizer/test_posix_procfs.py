"""posix/cpu and posix/mem read one walk of /proc for every container of a listing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from mesilla.common.procfs import Stat
from mesilla.containerizer.isolators.posix import procfs


@pytest.fixture
def session() -> Iterator[int]:
    """A sleeping process leading a session of its own (ended afterwards)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        # Popen returns once forked; the child calls setsid() on its own time after.
        while os.getsid(process.pid) != process.pid:
            time.sleep(0.001)
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_a_session_started_after_the_last_walk_is_seen(session: int) -> None:
    procfs.rss_bytes(os.getpid())  # a walk that may predate `session`
    assert procfs.rss_bytes(session) > 0
    assert [p.pid for p in procfs.session_processes(session)] == [session]


def test_containers_of_one_listing_share_one_walk(session: int, monkeypatch: pytest.MonkeyPatch) -> None:
    walks = 0
    walk = procfs._live_processes

    def counted() -> Iterator[Stat]:
        nonlocal walks
        walks += 1
        return walk()

    monkeypatch.setattr(procfs._Sessions, "MAX_AGE", 3600.0)  # no walk grows stale during the test
    procfs.rss_bytes(session)
    monkeypatch.setattr(procfs, "_live_processes", counted)
    for _ in range(50):
        procfs.rss_bytes(session)
        procfs.cpu_times(session)
    assert walks == 0
    # A kill's listing is always read now.
    procfs.session_processes(session)
    assert walks == 1
