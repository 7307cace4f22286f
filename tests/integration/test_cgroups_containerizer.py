"""The cgroups, disk, volume, rlimits and capabilities isolators end to end: containers
launched by the Containerizer with the linux launcher (real runc, conmon, cgroups).

The `linux_env` fixture gives each test its own runtime directory and cgroups
root and removes every runtime container, monitor, cgroup and mount left
behind, even when the test fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.fixtures.linux_launcher import LinuxEnv
from tests.integration.cgroups_programs import FORK_BOMB

from mesilla.containerizer.cgroups import Hierarchy, own_cgroup_path
from mesilla.containerizer.containerizer import Containerizer
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import (
    CommandInfo,
    ContainerID,
    ContainerInfo,
    ExecutorID,
    ExecutorInfo,
    LinuxInfo,
    Reason,
    Resource,
    RLimit,
    RLimitInfo,
    SandboxPath,
    Scalar,
    ValueType,
    Volume,
    VolumeSource,
)

pytestmark = [pytest.mark.root]

ISOLATION = (
    "filesystem/linux,cgroups/cpu,cgroups/mem,cgroups/pids,disk/du,"
    "volume/sandbox_path,posix/rlimits,linux/capabilities"
)


def scalar(name: str, value: float) -> Resource:
    return Resource(name=name, type=ValueType.SCALAR, scalar=Scalar(value=value))


@pytest.fixture
def env(linux_env: LinuxEnv) -> LinuxEnv:
    return linux_env


@pytest.fixture
async def containerizer(env: LinuxEnv) -> AsyncIterator[Containerizer]:
    flags = env.flags
    flags.set("launcher", "linux")
    flags.set("isolation", ISOLATION)
    flags.set("cgroups_max_pids", 32)
    flags.set("cgroups_enable_cfs", True)  # off by default, as in Mesos; these tests cap CPU
    flags.set("enforce_container_disk_quota", True)
    flags.set("container_disk_watch_interval", 0.05)
    c = await Containerizer.create(flags)
    try:
        yield c
    finally:
        for container_id in c.containers():
            if container_id.parent is None:
                await c.destroy(container_id)
        await c.close()


def shell(env: LinuxEnv, name: str, script: str, **kwargs: Any) -> ContainerConfig:
    kwargs.setdefault(
        "resources", [scalar("cpus", 0.5), scalar("mem", 64), scalar("disk", 64)]
    )
    return ContainerConfig(
        command=CommandInfo(value=script), sandbox=env.sandbox(name), **kwargs
    )


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def output(config: ContainerConfig) -> str:
    return read(os.path.join(config.sandbox, "stdout"))


async def until(predicate: Any, what: str) -> None:
    for _ in range(6000):
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


async def test_memory_hog_ends_with_the_memory_limitation(containerizer, env):
    cid = ContainerID(value=str(uuid.uuid4()))
    hog = "x=a; while :; do x=$x$x; done"  # doubles a shell variable until OOM
    await containerizer.launch(cid, shell(env, "hog", hog))
    termination = await asyncio.wait_for(containerizer.wait(cid), 120)
    assert termination is not None
    assert termination.state == "TASK_FAILED"
    assert termination.reason == Reason.REASON_CONTAINER_LIMITATION_MEMORY
    assert termination.message is not None
    assert termination.message.startswith("Memory limit exceeded: Requested: 64MB")
    assert [(r.name, r.scalar.value) for r in termination.limited_resources] == [
        ("mem", 64.0)
    ]
    assert termination.status is not None and os.WIFSIGNALED(termination.status)
    assert os.WTERMSIG(termination.status) == signal.SIGKILL
    hierarchy = Hierarchy.detect()
    assert not hierarchy.cgroup(own_cgroup_path(env.flags, cid)).exists("memory")


async def test_cpu_hog_is_throttled(containerizer, env):
    cid = ContainerID(value=str(uuid.uuid4()))
    config = shell(
        env,
        "cpu",
        "while :; do :; done",
        resources=[scalar("cpus", 0.1), scalar("mem", 64)],
    )
    await containerizer.launch(cid, config)

    async def throttled() -> bool:
        usage = (await containerizer.usage(cid)).to_json()
        return usage.get("cpus_nr_throttled", 0) > 3

    await until(throttled, "the CPU hog is throttled")
    usage = (await containerizer.usage(cid)).to_json()
    assert usage["cpus_limit"] == 0.1
    # Throttled for most of each period: at 0.1 CPU a hog waits about 90% of the time.
    assert usage["cpus_nr_throttled"] >= usage["cpus_nr_periods"] // 2
    await containerizer.destroy(cid)


async def test_fork_bomb_stops_at_the_pids_limit(containerizer, env):
    cid = ContainerID(value=str(uuid.uuid4()))
    config = shell(env, "bomb", "")
    config.command = CommandInfo(
        shell=False,
        value="/usr/bin/python3",
        arguments=["python3", "-c", FORK_BOMB, "gave_up"],
    )
    await containerizer.launch(cid, config)
    gave_up = os.path.join(config.sandbox, "gave_up")

    async def finished() -> bool:
        return os.path.exists(gave_up) and os.path.getsize(gave_up) > 0

    await until(finished, "the fork bomb gave up")
    forked, error = map(int, read(gave_up).split())
    assert error == 11  # EAGAIN from the pids controller
    usage = (await containerizer.usage(cid)).to_json()
    assert usage["threads"] == 32  # --cgroups_max_pids
    assert forked < 32
    await containerizer.destroy(cid)


async def test_disk_filler_ends_with_the_disk_limitation(containerizer, env):
    cid = ContainerID(value=str(uuid.uuid4()))
    filler = 'i=0; while :; do head -c 1048576 /dev/zero > "f$i"; i=$((i+1)); done'
    config = shell(
        env,
        "filler",
        filler,
        resources=[scalar("cpus", 0.5), scalar("mem", 64), scalar("disk", 4)],
    )
    await containerizer.launch(cid, config)
    termination = await asyncio.wait_for(containerizer.wait(cid), 120)
    assert termination is not None
    assert termination.reason == Reason.REASON_CONTAINER_LIMITATION_DISK
    assert (
        termination.message is not None
        and "exceeds quota (4096KB)" in termination.message
    )
    assert [(r.name, r.scalar.value) for r in termination.limited_resources] == [
        ("disk", 4.0)
    ]


async def test_nested_container_sees_its_parents_sandbox_path(containerizer, env):
    parent = ContainerID(value=str(uuid.uuid4()))
    parent_config = shell(
        env,
        "executor",
        "mkdir -p shared && echo from-parent > shared/hello; sleep 1000",
    )
    await containerizer.launch(parent, parent_config)
    hello = os.path.join(parent_config.sandbox, "shared", "hello")

    async def written() -> bool:
        return os.path.exists(hello)

    await until(written, "the parent wrote its file")
    child = ContainerID(value=str(uuid.uuid4()), parent=parent)
    child_sandbox = os.path.join(parent_config.sandbox, "containers", child.value)
    os.makedirs(child_sandbox)
    volume = Volume(
        container_path="from-parent",
        mode="RW",
        source=VolumeSource(
            type="SANDBOX_PATH", sandbox_path=SandboxPath(type="PARENT", path="shared")
        ),
    )
    child_config = ContainerConfig(
        command=CommandInfo(
            value="cat from-parent/hello && echo reply > from-parent/answer"
        ),
        sandbox=child_sandbox,
        container_info=ContainerInfo(volumes=[volume]),
    )
    await containerizer.launch(child, child_config)
    termination = await asyncio.wait_for(containerizer.wait(child), 60)
    assert termination is not None and termination.status == 0
    assert output(child_config) == "from-parent\n"
    assert read(os.path.join(parent_config.sandbox, "shared", "answer")) == "reply\n"
    await containerizer.destroy(parent)


async def test_nested_container_with_own_cgroups_is_oom_killed_alone(
    containerizer, env
):
    parent = ContainerID(value=str(uuid.uuid4()))
    await containerizer.launch(
        parent,
        shell(
            env,
            "pod",
            "sleep 1000",
            resources=[scalar("cpus", 1), scalar("mem", 256)],
        ),
    )
    child = ContainerID(value=str(uuid.uuid4()), parent=parent)
    sandbox = os.path.join(env.sandbox("pod"), "containers", child.value)
    os.makedirs(sandbox)
    child_config = ContainerConfig(
        command=CommandInfo(value="x=a; while :; do x=$x$x; done"),
        sandbox=sandbox,
        resources=[scalar("cpus", 0.5), scalar("mem", 32)],
        container_info=ContainerInfo(linux_info=LinuxInfo(share_cgroups=False)),
    )
    await containerizer.launch(child, child_config)
    termination = await asyncio.wait_for(containerizer.wait(child), 120)
    assert termination is not None
    assert termination.reason == Reason.REASON_CONTAINER_LIMITATION_MEMORY
    assert parent in containerizer.containers()  # the parent lives on
    usage = (await containerizer.usage(parent)).to_json()
    assert usage["mem_limit_bytes"] == 256 << 20
    await containerizer.destroy(parent)


async def test_rlimits_and_capabilities_apply_inside_the_container(containerizer, env):
    cid = ContainerID(value=str(uuid.uuid4()))
    info = ContainerInfo(
        rlimit_info=RLimitInfo(
            rlimits=[RLimit(type="RLMT_NOFILE", soft=123, hard=456)]
        ),
        linux_info=LinuxInfo(
            effective_capabilities={"capabilities": ["CHOWN", "KILL"]},
            bounding_capabilities={"capabilities": ["CHOWN", "KILL", "NET_RAW"]},
        ),
    )
    config = shell(
        env,
        "limits",
        "ulimit -Sn; ulimit -Hn; grep -E '^Cap(Eff|Bnd)' /proc/self/status",
        container_info=info,
    )
    await containerizer.launch(cid, config)
    termination = await asyncio.wait_for(containerizer.wait(cid), 60)
    assert termination is not None and termination.status == 0
    soft, hard, effective, bounding = output(config).splitlines()
    assert (soft, hard) == ("123", "456")
    # CAP_CHOWN is bit 0, CAP_KILL bit 5, CAP_NET_RAW bit 13. As in Mesos, the
    # bounding set is also the inheritable one, so a root shell that execs holds it.
    assert int(bounding.split()[1], 16) == (1 << 0) | (1 << 5) | (1 << 13)
    assert int(effective.split()[1], 16) == (1 << 0) | (1 << 5) | (1 << 13)


async def test_after_agent_restart_oom_is_still_reported_and_orphans_lose_their_cgroups(
    containerizer, env
):
    hog = ContainerID(value=str(uuid.uuid4()))
    orphan = ContainerID(value=str(uuid.uuid4()))
    gated = "while [ ! -e go ]; do sleep 0.05; done; x=a; while :; do x=$x$x; done"
    hog_config = shell(env, "gated-hog", gated)
    orphan_config = shell(env, "orphan", "sleep 1000")
    # Executors' containers: without an executor they would be standalone
    # containers, which recovery keeps as the containerizer's own.
    for name, config in (("hog", hog_config), ("orphan", orphan_config)):
        config.executor_info = ExecutorInfo(executor_id=ExecutorID(value=name))
    await containerizer.launch(hog, hog_config)
    await containerizer.launch(orphan, orphan_config)
    await containerizer.close()  # the agent goes away; its containers keep running

    restarted = await Containerizer.create(env.flags)
    try:
        await restarted.recover({hog})
        hierarchy = Hierarchy.detect()
        assert not hierarchy.cgroup(own_cgroup_path(env.flags, orphan)).exists("memory")
        assert (await restarted.usage(hog)).to_json()["mem_limit_bytes"] == 64 << 20
        Path(hog_config.sandbox, "go").touch()
        termination = await asyncio.wait_for(restarted.wait(hog), 120)
        assert termination is not None
        assert termination.reason == Reason.REASON_CONTAINER_LIMITATION_MEMORY
    finally:
        for container_id in restarted.containers():
            await restarted.destroy(container_id)
        await restarted.close()


async def test_host_path_volume_is_visible_read_only(containerizer, env):
    host = env.root / "host-data"
    host.mkdir(parents=True)
    (host / "config").write_text("value\n")
    volume = Volume(
        container_path="conf",
        mode="RO",
        source=VolumeSource(type="HOST_PATH", host_path={"path": str(host)}),
    )
    cid = ContainerID(value=str(uuid.uuid4()))
    config = shell(
        env,
        "hostpath",
        "cat conf/config; touch conf/new 2>/dev/null || echo refused",
        container_info=ContainerInfo(volumes=[volume]),
    )
    await containerizer.launch(cid, config)
    termination = await asyncio.wait_for(containerizer.wait(cid), 60)
    assert termination is not None and termination.status == 0
    assert output(config) == "value\nrefused\n"
    assert not (host / "new").exists()
