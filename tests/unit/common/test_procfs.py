"""The one reader of /proc/<pid>/stat: fields counted after the command name's last ')'."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mesilla.common import procfs

# proc(5)'s fields 3 to 52, as Linux 6 writes them; field 2 varies by test.
REST = (
    "S 1 4321 4321 0 -1 4194560 900 0 2 0 17 5 0 0 20 0 1 0 123456 5000000 321 "
    "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0"
)


@pytest.mark.parametrize("comm", ["sleep", "a b", "x) S 9 9 (y", ")", "((", "tmux: server)"])
def test_a_command_name_with_spaces_and_parentheses_is_passed_over(comm: str) -> None:
    stat = procfs.parse_stat(f"4321 ({comm}) {REST}\n")
    assert stat == procfs.Stat(
        pid=4321,
        state="S",
        ppid=1,
        session=4321,
        user_ticks=17,
        system_ticks=5,
        start_ticks=123456,
        rss_pages=321,
    )
    assert stat.alive


@pytest.mark.parametrize("state, alive", [("R", True), ("D", True), ("Z", False), ("X", False)])
def test_a_zombie_or_dead_process_is_not_alive(state: str, alive: bool) -> None:
    assert procfs.parse_stat(f"7 (z) {state}{REST[1:]}").alive is alive


@pytest.mark.parametrize("text", ["", "4321 sleep S 1", f"4321 (sleep {REST}", "4321 (sleep) S 1 2 3"])
def test_what_is_not_a_stat_line_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        procfs.parse_stat(text)


def test_a_live_process_is_read_with_its_start_time_and_a_gone_one_is_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        stat = procfs.stat(child.pid)
        assert stat is not None and stat.pid == child.pid and stat.ppid == os.getpid()
        assert procfs.start_time(child.pid) == stat.start_ticks
        assert child.pid in {process.pid for process in procfs.processes()}
    finally:
        child.communicate(b"")
    assert procfs.stat(child.pid) is None  # reaped: no such process
    assert procfs.start_time(child.pid) is None


def test_a_zombie_has_no_start_time() -> None:
    child = subprocess.Popen([sys.executable, "-c", ""])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped
        stat = procfs.stat(child.pid)
        assert stat is not None and stat.state == "Z"
        assert procfs.start_time(child.pid) is None
    finally:
        child.wait()
