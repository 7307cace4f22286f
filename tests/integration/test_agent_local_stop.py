"""`mesilla local` stops everything on Ctrl-C: agents shut their executors down."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from mesilla.testing.cluster import LocalCluster
from mesilla.testing.scheduler import Framework, scalar

pytestmark = [pytest.mark.integration]


def _processes_running(needle: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle.encode() in f.read().replace(b"\0", b" "):
                    found.append(int(entry))
        except OSError:
            continue
    return found


async def test_ctrl_c_stops_the_cluster_and_its_executors(tmp_path: Path) -> None:
    # An unusual duration names the task's process among everything on the host.
    command = f"sleep {random.randint(100000, 999999)}"
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.start()
    local = cluster._process
    assert local is not None
    try:
        # A framework that may fail over keeps its executors when it goes away.
        framework = Framework(cluster.master, failover_timeout=3600)
        await framework.subscribe()
        try:
            offer = await framework.offer()
            task = {
                "name": "sleeper",
                "task_id": {"value": "sleeper"},
                "agent_id": offer["agent_id"],
                "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
                "command": {"value": command},
            }
            await framework.launch(offer, [task])
            await framework.until_state(["sleeper"], "TASK_RUNNING")
            assert _processes_running(command)
        finally:
            # Gone without TEARDOWN: the framework's executor is still running.
            await framework.disconnect()
            await framework.close()
    finally:
        cluster.stop()  # SIGINT, as a terminal's Ctrl-C
    # `mesilla local` ended by itself (not by the fallback SIGKILL) ...
    assert local.returncode == 0, cluster.log_tail()
    # ... after its agent shut the executor and its task down.
    assert not _processes_running(command)
    assert "Received SIGUSR1" in cluster.log_path.read_text()
