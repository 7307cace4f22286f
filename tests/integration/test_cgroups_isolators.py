"""cgroups/cpu, cgroups/mem and cgroups/pids enforcing limits on real processes.

Each test plays the launcher's part: it starts a child held before exec (it
blocks reading stdin), hands its pid to `isolate`, then releases it. The
processes started and the cgroups created are removed by the fixtures even
when a test fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from tests.integration.cgroups_programs import FORK_BOMB

from mesilla.common.flags import parse
from mesilla.containerizer.cgroups import Hierarchy, own_cgroup_path
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.isolators.cgroups.cpu import CgroupsCpuIsolator
from mesilla.containerizer.isolators.cgroups.mem import CgroupsMemIsolator
from mesilla.containerizer.isolators.cgroups.pids import CgroupsPidsIsolator
from mesilla.containerizer.types import ContainerConfig, ContainerRuntimeState
from mesilla.v1.mesos import (
    CommandInfo,
    ContainerID,
    ContainerInfo,
    LinuxInfo,
    Reason,
    Resource,
    Scalar,
    ValueType,
)

pytestmark = [pytest.mark.root]

CONTROLLERS = ("cpu", "cpuacct", "memory", "pids")


def scalar(name: str, value: float) -> Resource:
    return Resource(name=name, type=ValueType.SCALAR, scalar=Scalar(value=value))


def config(
    sandbox: str, cpus: float = 0.5, mem: float = 64, **kwargs: Any
) -> ContainerConfig:
    return ContainerConfig(
        command=CommandInfo(value="true"),
        sandbox=sandbox,
        resources=[scalar("cpus", cpus), scalar("mem", mem)],
        **kwargs,
    )


class Held:
    """A child process that waits on stdin before exec'ing `argv`, like a launcher's fork."""

    def __init__(self, argv: list[str]) -> None:
        script = 'read _ && exec "$@"'
        self.process = subprocess.Popen(
            ["sh", "-c", script, "sh", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.pid = self.process.pid

    def start(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        self.process.stdin.close()

    async def wait(self) -> int:
        return await asyncio.to_thread(self.process.wait)


@pytest.fixture
def flags() -> Any:
    if not os.path.isdir("/sys/fs/cgroup"):
        pytest.skip("needs cgroups mounted at /sys/fs/cgroup")
    root = f"mesilla-test-{uuid.uuid4().hex[:8]}"
    flags = parse(CONTAINERIZER_FLAGS, [f"--cgroups_root={root}"], environ={})
    yield flags
    # Whatever a test left: kill its processes (by cgroup membership) and remove it.
    hierarchy = Hierarchy.detect(flags.cgroups_hierarchy)
    asyncio.run(
        hierarchy.cgroup(root).remove([c for c in CONTROLLERS if hierarchy.has(c)])
    )


@pytest.fixture
def held() -> Iterator[Any]:
    started: list[Held] = []

    def make(argv: list[str]) -> Held:
        child = Held(argv)
        started.append(child)
        return child

    yield make
    for child in started:
        if child.process.poll() is None:
            child.process.kill()
        child.process.wait()
        for stream in (child.process.stdin, child.process.stdout, child.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
async def watching() -> AsyncIterator[list[asyncio.Task[Any]]]:
    tasks: list[asyncio.Task[Any]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def skip_without(flags: Any, controller: str) -> Hierarchy:
    hierarchy = Hierarchy.detect(flags.cgroups_hierarchy)
    if not hierarchy.has(controller):
        pytest.skip(f"the {controller} cgroup controller is not available here")
    return hierarchy


async def isolated_sleeper(
    isolator: Any, held: Any, container_config: ContainerConfig
) -> tuple[ContainerID, Held]:
    """A container prepared from `container_config` with a held `sleep` in its cgroups."""
    cid = ContainerID(value=str(uuid.uuid4()))
    await isolator.prepare(cid, container_config)
    sleeper = held(["sleep", "60"])
    await isolator.isolate(cid, sleeper.pid)
    return cid, sleeper


MEMORY_HOG = "a = []\nwhile True: a.append(bytearray(1 << 20))"


async def test_memory_hog_is_oom_killed_and_reported(flags, held, watching, tmp_path):
    skip_without(flags, "memory")
    isolator = CgroupsMemIsolator(flags)
    cid = ContainerID(value=str(uuid.uuid4()))
    info = await isolator.prepare(cid, config(str(tmp_path), mem=48))
    assert info is not None
    assert info.cgroup_resources == {
        "memory": {"limit": 48 << 20, "reservation": 48 << 20}
    }

    hog = held([sys.executable, "-c", MEMORY_HOG])
    await isolator.isolate(cid, hog.pid)
    watch = asyncio.create_task(isolator.watch(cid))
    watching.append(watch)
    usage = await isolator.usage(cid)
    assert usage["mem_limit_bytes"] == 48 << 20
    hog.start()

    limitation = await asyncio.wait_for(watch, 60)
    assert limitation.reason == Reason.REASON_CONTAINER_LIMITATION_MEMORY
    assert limitation.message.startswith("Memory limit exceeded: Requested: 48MB")
    assert [(r.name, r.scalar.value) for r in limitation.resources] == [("mem", 48.0)]
    assert await hog.wait() == -signal.SIGKILL

    await isolator.cleanup(cid)
    assert not isolator.hierarchy.cgroup(own_cgroup_path(flags, cid)).exists("memory")


async def test_process_within_its_limit_is_not_reported(
    flags, held, watching, tmp_path
):
    skip_without(flags, "memory")
    isolator = CgroupsMemIsolator(flags)
    cid = ContainerID(value=str(uuid.uuid4()))
    await isolator.prepare(cid, config(str(tmp_path), mem=64))
    small = held([sys.executable, "-c", "bytearray(8 << 20)"])
    await isolator.isolate(cid, small.pid)
    watch = asyncio.create_task(isolator.watch(cid))
    watching.append(watch)
    small.start()
    assert await small.wait() == 0
    await isolator.cleanup(cid)
    await asyncio.sleep(0)  # let the watcher see the cgroup go
    assert not watch.done()


async def test_cpu_hog_is_throttled_to_its_quota(flags, held, tmp_path):
    skip_without(flags, "cpu")
    flags.set("cgroups_enable_cfs", True)
    isolator = CgroupsCpuIsolator(flags)
    cid = ContainerID(value=str(uuid.uuid4()))
    info = await isolator.prepare(cid, config(str(tmp_path), cpus=0.2))
    assert info is not None
    assert info.cgroup_resources == {
        "cpu": {"shares": 204, "quota": 20_000, "period": 100_000}
    }

    hog = held(["sh", "-c", "while :; do :; done"])
    await isolator.isolate(cid, hog.pid)
    begin = time.monotonic()
    hog.start()

    async def consumed(seconds: float) -> dict[str, Any]:
        while True:
            await asyncio.sleep(0.1)
            usage = await isolator.usage(cid)
            if usage["cpus_user_time_secs"] + usage["cpus_system_time_secs"] >= seconds:
                return usage

    usage = await asyncio.wait_for(consumed(0.5), 120)
    elapsed = time.monotonic() - begin
    cpu_time = usage["cpus_user_time_secs"] + usage["cpus_system_time_secs"]
    assert usage["cpus_nr_throttled"] > 0
    assert usage["cpus_throttled_time_secs"] > 0
    assert usage["cpus_limit"] == 0.2
    # Quota 0.2 CPU: a free hog would use ~1 CPU; allow generous slack.
    assert cpu_time / elapsed < 0.5
    await isolator.cleanup(cid)


async def test_update_changes_quota_and_infinite_limit_removes_it(
    flags, held, tmp_path
):
    hierarchy = skip_without(flags, "cpu")
    flags.set("cgroups_enable_cfs", True)
    isolator = CgroupsCpuIsolator(flags)
    cid, sleeper = await isolated_sleeper(isolator, held, config(str(tmp_path), cpus=1))
    cgroup = hierarchy.cgroup(own_cgroup_path(flags, cid))
    assert cgroup.read("cpu", "cpu.cfs_quota_us").strip() == "100000"

    await isolator.update(cid, [scalar("cpus", 2)], {})
    assert cgroup.read("cpu", "cpu.shares").strip() == "2048"
    assert cgroup.read("cpu", "cpu.cfs_quota_us").strip() == "200000"
    await isolator.update(cid, [scalar("cpus", 2)], {"cpus": float("inf")})
    assert cgroup.read("cpu", "cpu.cfs_quota_us").strip() == "-1"
    assert "cpus_limit" not in await isolator.usage(cid)
    await isolator.cleanup(cid)
    assert sleeper.process.poll() is not None  # cleanup killed what was left


async def test_memory_update_raises_but_never_lowers_the_hard_limit(
    flags, held, tmp_path
):
    hierarchy = skip_without(flags, "memory")
    isolator = CgroupsMemIsolator(flags)
    cid, _ = await isolated_sleeper(isolator, held, config(str(tmp_path), mem=64))
    cgroup = hierarchy.cgroup(own_cgroup_path(flags, cid))
    limit_file = "memory.limit_in_bytes" if cgroup.version == 1 else "memory.max"

    await isolator.update(cid, [scalar("mem", 128)], {})
    assert int(cgroup.read("memory", limit_file)) == 128 << 20
    await isolator.update(cid, [scalar("mem", 40)], {})
    assert int(cgroup.read("memory", limit_file)) == 128 << 20
    assert (await isolator.usage(cid))["mem_soft_limit_bytes"] == 40 << 20
    await isolator.cleanup(cid)


async def test_fork_bomb_stops_at_pids_max(held, tmp_path):
    root = f"mesilla-test-{uuid.uuid4().hex[:8]}"
    flags = parse(
        CONTAINERIZER_FLAGS,
        [f"--cgroups_root={root}", "--cgroups_max_pids=16"],
        environ={},
    )
    hierarchy = skip_without(flags, "pids")
    isolator = CgroupsPidsIsolator(flags)
    cid = ContainerID(value=str(uuid.uuid4()))
    try:
        info = await isolator.prepare(cid, config(str(tmp_path)))
        assert info is not None and info.cgroup_resources == {"pids": {"limit": 16}}
        bomb = held([sys.executable, "-c", FORK_BOMB, "/dev/stdout"])
        await isolator.isolate(cid, bomb.pid)
        bomb.start()
        assert bomb.process.stdout is not None
        line = await asyncio.to_thread(bomb.process.stdout.readline)
        forked, error = map(int, line.split())
        assert error == 11  # EAGAIN: the pids controller refused the fork
        assert forked == 15  # 16 tasks in all, the bomb itself included
        usage = await isolator.usage(cid)
        assert usage == {"processes": 16, "threads": 16}
        await isolator.cleanup(cid)
        assert bomb.process.poll() is not None or await bomb.wait() == -signal.SIGKILL
        assert not hierarchy.cgroup(own_cgroup_path(flags, cid)).exists("pids")
    finally:
        await hierarchy.cgroup(root).remove(["pids"])


async def test_nested_containers_share_or_get_their_own_cgroup(flags, held, tmp_path):
    hierarchy = skip_without(flags, "memory")
    isolator = CgroupsMemIsolator(flags)
    parent = ContainerID(value=str(uuid.uuid4()))
    shared = ContainerID(value=str(uuid.uuid4()), parent=parent)
    own = ContainerID(value=str(uuid.uuid4()), parent=parent)
    await isolator.prepare(parent, config(str(tmp_path), mem=256))
    parent_process = held(["sleep", "60"])
    await isolator.isolate(parent, parent_process.pid)

    assert (
        await isolator.prepare(shared, config(str(tmp_path / "shared"), mem=32)) is None
    )
    assert await isolator.usage(shared) == {}

    separate = ContainerInfo(linux_info=LinuxInfo(share_cgroups=False))
    info = await isolator.prepare(
        own,
        config(
            str(tmp_path / "own"), mem=32, container_info=separate, limits={"mem": 100}
        ),
    )
    assert info is not None
    assert info.cgroup_resources["memory"]["limit"] == 100 << 20
    child = held(["sleep", "60"])
    await isolator.isolate(own, child.pid)
    cgroup = hierarchy.cgroup(own_cgroup_path(flags, own))
    assert cgroup.path == f"{flags.cgroups_root}/{parent.value}/{own.value}"
    assert cgroup.contains("memory", child.pid)
    assert (await isolator.usage(own))["mem_limit_bytes"] == 100 << 20
    # The parent's accounting includes its nested container's.
    assert hierarchy.cgroup(own_cgroup_path(flags, parent)).contains(
        "memory", child.pid
    )

    await isolator.cleanup(own)
    assert not cgroup.exists("memory")
    assert parent_process.process.poll() is None  # the parent is untouched
    await isolator.cleanup(parent)


async def test_recovered_isolator_reports_usage_and_oom(
    flags, held, watching, tmp_path
):
    skip_without(flags, "memory")
    cid = ContainerID(value=str(uuid.uuid4()))
    cfg = config(str(tmp_path), mem=48)
    first = CgroupsMemIsolator(flags)
    await first.prepare(cid, cfg)
    hog = held([sys.executable, "-c", MEMORY_HOG])
    await first.isolate(cid, hog.pid)

    # The agent restarts: a new isolator learns the container from the checkpoints.
    second = CgroupsMemIsolator(flags)
    await second.recover(
        [ContainerRuntimeState(cid, hog.pid, str(tmp_path), cfg)], set()
    )
    assert (await second.usage(cid))["mem_limit_bytes"] == 48 << 20
    watch = asyncio.create_task(second.watch(cid))
    watching.append(watch)
    hog.start()
    limitation = await asyncio.wait_for(watch, 60)
    assert limitation.reason == Reason.REASON_CONTAINER_LIMITATION_MEMORY
    first.forget(cid)
    await second.cleanup(cid)
