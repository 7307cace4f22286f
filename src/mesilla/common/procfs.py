"""`/proc/<pid>/stat` (proc(5)), read here for every part that asks about a process.

The command name (field 2) stands in parentheses and may itself hold spaces and
parentheses, so the fields are counted from after its last ')'. A pid alone
names no process for long (pids get reused): with its start time it does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple


class Stat(NamedTuple):
    """What callers use of a process's stat line; proc(5)'s field numbers in comments."""

    pid: int  # (1)
    state: str  # (3) R, S, D, ...; Z a zombie, X dead
    ppid: int  # (4)
    session: int  # (6)
    user_ticks: int  # (14) utime
    system_ticks: int  # (15) stime
    start_ticks: int  # (22) starttime: clock ticks after boot
    rss_pages: int  # (24) rss

    @property
    def alive(self) -> bool:
        """Not a zombie nor dead: it still runs, or can."""
        return self.state not in ("Z", "X")


def parse_stat(text: str) -> Stat:
    """The fields of one stat line; ValueError for what is not one."""
    pid_and_comm, paren, rest = text.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 22:
        raise ValueError(f"Not a /proc/<pid>/stat line: {text[:80]!r}")
    # fields[0] is field 3: field N is fields[N - 3].
    return Stat(
        pid=int(pid_and_comm.partition(" ")[0]),
        state=fields[0],
        ppid=int(fields[1]),
        session=int(fields[3]),
        user_ticks=int(fields[11]),
        system_ticks=int(fields[12]),
        start_ticks=int(fields[19]),
        rss_pages=int(fields[21]),
    )


def stat(pid: int | str) -> Stat | None:
    """The process's stat, or None when there is no such process (gone meanwhile)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return parse_stat(data.decode(errors="replace"))


def processes() -> Iterator[Stat]:
    """Every process now (one gone meanwhile is left out)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = stat(entry)
            if found is not None:
                yield found


def start_time(pid: int | str) -> int | None:
    """The start time of the live process `pid`: with the pid, one process. None when it
    is gone or a zombie."""
    found = stat(pid)
    return found.start_ticks if found is not None and found.alive else None
