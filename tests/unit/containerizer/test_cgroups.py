"""cgroup paths, hierarchy detection and the cgroups isolators on a v2-shaped file tree.

The v2 tests run the real code against a directory laid out like a cgroup2
mount (control files are plain files there): the fake is below the interface
under test, and it lets a v1 host check the v2 code paths.
"""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any

import pytest

from mesilla.common.flags import parse
from mesilla.containerizer.cgroups import (
    CgroupsError,
    Hierarchy,
    OomListener,
    cgroup_path,
    own_cgroup_path,
    shares_cgroups,
)
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.isolators.cgroups.cpu import (
    CgroupsCpuIsolator,
    shares_to_weight,
)
from mesilla.containerizer.isolators.cgroups.mem import CgroupsMemIsolator
from mesilla.containerizer.isolators.cgroups.pids import CgroupsPidsIsolator
from mesilla.containerizer.isolators.cgroups.subsystem import IsolatorConfigError
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import (
    CommandInfo,
    ContainerID,
    ContainerInfo,
    LinuxInfo,
    Resource,
    Scalar,
    ValueType,
)

MB = 1 << 20


def flags(*argv: str) -> Any:
    return parse(CONTAINERIZER_FLAGS, list(argv), environ={})


def scalar(name: str, value: float) -> Resource:
    return Resource(name=name, type=ValueType.SCALAR, scalar=Scalar(value=value))


ROOT = ContainerID(value="exec")
CHILD = ContainerID(value="task", parent=ROOT)
GRANDCHILD = ContainerID(value="sub", parent=CHILD)


def test_every_container_has_its_own_directory_under_its_parents():
    f = flags()
    assert own_cgroup_path(f, ROOT) == "mesilla/exec"
    assert own_cgroup_path(f, GRANDCHILD) == "mesilla/exec/task/sub"
    assert own_cgroup_path(flags("--cgroups_root=/a/b/"), ROOT) == "a/b/exec"


def test_nested_containers_are_accounted_to_the_nearest_ancestor_with_own_cgroups():
    f = flags()
    assert cgroup_path(f, ROOT) == "mesilla/exec"
    assert cgroup_path(f, GRANDCHILD) == "mesilla/exec"  # default: share
    assert (
        cgroup_path(f, GRANDCHILD, lambda cid: cid.value != "task")
        == "mesilla/exec/task"
    )
    assert cgroup_path(f, GRANDCHILD, lambda cid: False) == "mesilla/exec/task/sub"


def test_share_cgroups_defaults_to_true():
    assert shares_cgroups(None)
    assert shares_cgroups(ContainerInfo())
    assert shares_cgroups(ContainerInfo(linux_info=LinuxInfo()))
    assert not shares_cgroups(ContainerInfo(linux_info=LinuxInfo(share_cgroups=False)))


def write_mountinfo(path: Path, lines: list[str]) -> str:
    path.write_text(
        "".join(f"{n} 1 0:{n} / {line}\n" for n, line in enumerate(lines, 30))
    )
    return str(path)


def test_detects_a_v1_hybrid_host_and_ignores_its_empty_unified_mount(tmp_path):
    root = str(tmp_path)
    mountinfo = write_mountinfo(
        tmp_path / "mountinfo",
        [
            f"{root} rw - tmpfs tmpfs rw",
            f"{root}/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
            f"{root}/memory rw - cgroup cgroup rw,memory",
            f"{root}/systemd rw - cgroup cgroup rw,name=systemd",
            f"{root}/unified rw - cgroup2 cgroup2 rw",
        ],
    )
    hierarchy = Hierarchy.detect(root, mountinfo)
    assert hierarchy.version == 1
    assert hierarchy.mounts == {
        "cpu": f"{root}/cpu,cpuacct",
        "cpuacct": f"{root}/cpu,cpuacct",
        "memory": f"{root}/memory",
    }
    assert (
        hierarchy.cgroup("mesilla/x").directory("memory") == f"{root}/memory/mesilla/x"
    )
    with pytest.raises(CgroupsError, match="'pids' cgroup controller is not available"):
        hierarchy.cgroup("mesilla/x").directory("pids")


def test_detects_a_unified_v2_host(tmp_path):
    root = str(tmp_path)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    mountinfo = write_mountinfo(
        tmp_path / "mountinfo", [f"{root} rw - cgroup2 cgroup2 rw"]
    )
    hierarchy = Hierarchy.detect(root, mountinfo)
    assert hierarchy.version == 2
    assert set(hierarchy.mounts) == {"cpuset", "cpu", "io", "memory", "pids"}


def test_no_cgroups_mounted_is_a_clear_error(tmp_path):
    mountinfo = write_mountinfo(
        tmp_path / "mountinfo", [f"{tmp_path} rw - tmpfs tmpfs rw"]
    )
    with pytest.raises(CgroupsError, match="No cgroup hierarchy is mounted"):
        Hierarchy.detect(str(tmp_path), mountinfo)


@pytest.fixture
def v2(tmp_path) -> Hierarchy:
    """A directory shaped like a cgroup2 mount with cpu, memory and pids."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    return Hierarchy(
        str(tmp_path), 2, {c: str(tmp_path) for c in ("cpu", "memory", "pids")}
    )


class FakeV2Cgroups:
    """Lets plain files stand for the files the kernel creates in each new cgroup."""

    @staticmethod
    def populate(directory: Path, files: dict[str, str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cgroup.subtree_control").write_text("")
        for name, text in files.items():
            (directory / name).write_text(text)


def config(
    resources: list[Resource], limits: dict[str, float] | None = None, **kwargs: Any
) -> ContainerConfig:
    return ContainerConfig(
        command=CommandInfo(value="x"),
        sandbox="/tmp",
        resources=resources,
        limits=limits or {},
        **kwargs,
    )


@pytest.mark.parametrize(
    ("cpus", "limits", "argv", "expected"),
    [
        (0.5, {}, ["--cgroups_enable_cfs"], {"shares": 512, "quota": 50_000, "period": 100_000}),
        (0.001, {}, ["--cgroups_enable_cfs"], {"shares": 2, "quota": 1_000, "period": 100_000}),
        (2, {}, [], {"shares": 2048}),
        (2, {}, ["--no-cgroups_enable_cfs"], {"shares": 2048}),
        (
            1,
            {"cpus": 3},
            ["--no-cgroups_enable_cfs"],
            {"shares": 1024, "quota": 300_000, "period": 100_000},
        ),
        (1, {"cpus": math.inf}, [], {"shares": 1024}),
    ],
)
def test_cpu_shares_and_cfs_quota(v2, cpus, limits, argv, expected):
    isolator = CgroupsCpuIsolator(flags(*argv), v2)
    assert isolator.launch_resources([scalar("cpus", cpus)], limits) == {
        "cpu": expected
    }


def test_cpu_limit_below_request_is_refused(v2):
    with pytest.raises(IsolatorConfigError, match="not below the request"):
        CgroupsCpuIsolator(flags(), v2).launch_resources(
            [scalar("cpus", 2)], {"cpus": 1}
        )


def test_shares_map_to_v2_weights_as_oci_runtimes_do():
    assert shares_to_weight(2) == 1
    assert shares_to_weight(1024) == 39
    assert shares_to_weight(262144) == 10000


@pytest.mark.parametrize(
    ("mem", "limits", "expected"),
    [
        (64, {}, {"limit": 64 * MB, "reservation": 64 * MB}),
        (8, {}, {"limit": 32 * MB, "reservation": 32 * MB}),  # Mesos's 32 MB floor
        (64, {"mem": 128}, {"limit": 128 * MB, "reservation": 64 * MB}),
        (64, {"mem": math.inf}, {"limit": -1, "reservation": 64 * MB}),
    ],
)
def test_memory_limits(v2, mem, limits, expected):
    isolator = CgroupsMemIsolator(flags(), v2)
    assert isolator.launch_resources([scalar("mem", mem)], limits) == {
        "memory": expected
    }


async def test_v2_isolate_writes_limits_on_the_container_and_moves_the_process_to_its_leaf(
    v2, tmp_path
):
    cid = ContainerID(value="c1")
    base = tmp_path / "mesilla" / "c1"
    cpu = CgroupsCpuIsolator(flags("--cgroups_enable_cfs"), v2)
    mem = CgroupsMemIsolator(flags(), v2)
    cfg = config([scalar("cpus", 0.5), scalar("mem", 64)], {"mem": 96})
    await cpu.prepare(cid, cfg)
    await mem.prepare(cid, cfg)
    (tmp_path / "mesilla").mkdir()
    FakeV2Cgroups.populate(tmp_path / "mesilla", {})
    FakeV2Cgroups.populate(
        base, {"memory.max": "max\n", "memory.events": "oom 0\noom_kill 0\n"}
    )

    await cpu.isolate(cid, os.getpid())
    await mem.isolate(cid, os.getpid())
    assert (base / "cpu.weight").read_text() == str(shares_to_weight(512))
    assert (base / "cpu.max").read_text() == "50000 100000"
    assert (base / "memory.max").read_text() == str(96 * MB)
    assert (base / "memory.low").read_text() == str(64 * MB)
    assert (base / "leaf" / "cgroup.procs").read_text() == str(os.getpid())
    # Every ancestor delegates the controller to its children (plain files keep the last write).
    for directory in (tmp_path, tmp_path / "mesilla"):
        assert (directory / "cgroup.subtree_control").read_text() == "+memory"
    assert (base / "cgroup.subtree_control").read_text() == ""  # it may hold processes

    (base / "cpu.stat").write_text(
        "usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\n"
        "nr_periods 10\nnr_throttled 4\nthrottled_usec 500000\n"
    )
    (base / "memory.current").write_text(f"{50 * MB}\n")
    (base / "memory.stat").write_text(
        f"anon {40 * MB}\nfile {10 * MB}\nfile_mapped 4096\n"
    )
    assert await cpu.usage(cid) == {
        "cpus_user_time_secs": 2.0,
        "cpus_system_time_secs": 1.0,
        "cpus_throttled_time_secs": 0.5,
        "cpus_nr_periods": 10,
        "cpus_nr_throttled": 4,
        "cpus_limit": 0.5,
    }
    usage = await mem.usage(cid)
    assert usage["mem_total_bytes"] == 50 * MB
    assert usage["mem_rss_bytes"] == usage["mem_anon_bytes"] == 40 * MB
    assert usage["mem_file_bytes"] == 10 * MB
    assert usage["mem_limit_bytes"] == 96 * MB
    assert usage["mem_soft_limit_bytes"] == 64 * MB
    mem.forget(cid)


async def test_v2_oom_is_seen_through_inotify_on_memory_events(v2, tmp_path):
    directory = tmp_path / "c"
    FakeV2Cgroups.populate(directory, {"memory.events": "oom 0\noom_kill 2\n"})
    listener = OomListener(v2.cgroup("c"))
    listener.POLL_INTERVAL = 3600  # only inotify can wake it within the test's wait
    waiting = asyncio.create_task(listener.wait())
    (directory / "memory.events").write_text("oom 0\noom_kill 2\nmax 5\n")
    await asyncio.sleep(0.05)
    assert not waiting.done()  # a change, but no kill since the listener started
    (directory / "memory.events").write_text("oom 1\noom_kill 3\n")
    assert await asyncio.wait_for(waiting, 10) == 1
    listener.close()


async def test_shared_nested_container_gets_nothing_and_own_one_its_own_limits(v2):
    mem = CgroupsMemIsolator(flags(), v2)
    assert await mem.prepare(CHILD, config([scalar("mem", 64)])) is None
    assert await mem.usage(CHILD) == {}
    own = ContainerInfo(linux_info=LinuxInfo(share_cgroups=False))
    info = await mem.prepare(CHILD, config([scalar("mem", 64)], container_info=own))
    assert info is not None and info.cgroup_resources["memory"]["limit"] == 64 * MB
    assert mem.containers[CHILD].cgroup.path == "mesilla/exec/task"


async def test_pids_limit_comes_from_the_flag(v2):
    assert CgroupsPidsIsolator(flags(), v2).launch_resources([], {}) == {}
    isolator = CgroupsPidsIsolator(flags("--cgroups_max_pids=100"), v2)
    assert isolator.launch_resources([], {}) == {"pids": {"limit": 100}}
    with pytest.raises(IsolatorConfigError, match="at least 1"):
        CgroupsPidsIsolator(flags("--cgroups_max_pids=0"), v2)


def test_an_isolator_whose_controller_is_missing_says_how_to_fix_it(tmp_path):
    hierarchy = Hierarchy(str(tmp_path), 1, {"memory": str(tmp_path)})
    with pytest.raises(
        IsolatorConfigError, match="remove cgroups/pids from --isolation"
    ):
        CgroupsPidsIsolator(flags(), hierarchy)


async def test_cleanup_of_a_container_never_seen_is_harmless(v2, tmp_path):
    for isolator in (
        CgroupsCpuIsolator(flags(), v2),
        CgroupsMemIsolator(flags(), v2),
        CgroupsPidsIsolator(flags(), v2),
    ):
        await isolator.cleanup(ContainerID(value="never-seen"))
        await isolator.cleanup(CHILD)
    assert sorted(os.listdir(tmp_path)) == [
        "cgroup.controllers",
        "cgroup.subtree_control",
    ]


async def test_an_invalid_update_changes_nothing(v2, tmp_path):
    cid = ContainerID(value="c2")
    cpu = CgroupsCpuIsolator(flags("--cgroups_enable_cfs"), v2)
    await cpu.prepare(cid, config([scalar("cpus", 1)]))
    FakeV2Cgroups.populate(tmp_path / "mesilla", {})
    FakeV2Cgroups.populate(tmp_path / "mesilla" / "c2", {})
    await cpu.isolate(cid, os.getpid())
    with pytest.raises(IsolatorConfigError):
        await cpu.update(cid, [scalar("cpus", 2)], {"cpus": 1})
    assert (tmp_path / "mesilla" / "c2" / "cpu.max").read_text() == "100000 100000"
    assert cpu.containers[cid].scalar("cpus") == 1
