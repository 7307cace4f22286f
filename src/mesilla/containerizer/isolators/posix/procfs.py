"""Reading a container's processes from /proc, for the usage-only posix isolators.

A posix container's processes are its first process and everything in that
process's session (the launcher makes the first process a session leader), so
the session id is the container's identity here, as the process group is for
signals.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class ProcessSample:
    pid: int
    state: str
    session: int
    user_ticks: int
    system_ticks: int
    rss_pages: int


def _read_stat(pid: int) -> ProcessSample | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:  # gone meanwhile
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = data[data.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state) of proc(5).
    return ProcessSample(
        pid=pid,
        state=fields[0],
        session=int(fields[3]),
        user_ticks=int(fields[11]),
        system_ticks=int(fields[12]),
        rss_pages=int(fields[21]),
    )


def session_processes(session: int) -> list[ProcessSample]:
    """The session's live processes (zombies have nothing left to measure or kill)."""
    samples = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            sample = _read_stat(int(entry))
            if sample is not None and sample.session == session and sample.state != "Z":
                samples.append(sample)
    return samples


def cpu_times(session: int) -> tuple[float, float]:
    """User and system CPU seconds of the session's live processes."""
    samples = session_processes(session)
    user = sum(s.user_ticks for s in samples) / _CLOCK_TICKS
    system = sum(s.system_ticks for s in samples) / _CLOCK_TICKS
    return user, system


def rss_bytes(session: int) -> int:
    return sum(s.rss_pages for s in session_processes(session)) * _PAGE_SIZE
