"""What posix/rlimits, linux/capabilities and the volume isolators put in the launch info,
and the invalid input they refuse with a message that says how to fix it."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from mesilla.common.flags import parse
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.isolators import resolve_isolation
from mesilla.containerizer.isolators.disk.du import disk_quota
from mesilla.containerizer.isolators.linux.capabilities import (
    CapabilitiesError,
    LinuxCapabilitiesIsolator,
)
from mesilla.containerizer.isolators.posix.rlimits import (
    PosixRLimitsIsolator,
    RLimitError,
)
from mesilla.containerizer.isolators.volume.host_path import VolumeHostPathIsolator
from mesilla.containerizer.isolators.volume.mount_point import VolumeError
from mesilla.containerizer.isolators.volume.sandbox_path import (
    VolumeSandboxPathIsolator,
)
from mesilla.containerizer.types import ContainerConfig, Mount
from mesilla.v1.mesos import (
    CommandInfo,
    ContainerID,
    ContainerInfo,
    LinuxInfo,
    Resource,
    RLimit,
    RLimitInfo,
    SandboxPath,
    Scalar,
    ValueType,
    Volume,
    VolumeSource,
)

FLAGS = parse(CONTAINERIZER_FLAGS, [], environ={})
TOP = ContainerID(value="top")


def config(
    info: ContainerInfo, sandbox: str = "/tmp", **kwargs: Any
) -> ContainerConfig:
    return ContainerConfig(
        command=CommandInfo(value="x"), sandbox=sandbox, container_info=info, **kwargs
    )


def test_my_isolators_are_registered_by_their_mesos_names():
    names = resolve_isolation(
        "cgroups/cpu,cgroups/mem,cgroups/pids,disk/du,posix/rlimits,linux/capabilities,"
        "volume/host_path,volume/sandbox_path"
    )
    assert (
        names.index("disk/du")
        < names.index("volume/sandbox_path")
        < names.index("cgroups/cpu")
    )
    assert names[-2:] == ["posix/rlimits", "environment_secret"]


async def test_rlimits_use_posix_names_and_none_for_unlimited():
    info = ContainerInfo(
        rlimit_info=RLimitInfo(
            rlimits=[
                RLimit(type="RLMT_NOFILE", soft=1024, hard=4096),
                RLimit(type="RLMT_CORE"),
            ]
        )
    )
    launch = await PosixRLimitsIsolator().prepare(TOP, config(info))
    assert launch is not None
    assert launch.rlimits == [
        ("RLIMIT_NOFILE", 1024, 4096),
        ("RLIMIT_CORE", None, None),
    ]
    assert await PosixRLimitsIsolator().prepare(TOP, config(ContainerInfo())) is None


@pytest.mark.parametrize(
    ("rlimits", "message"),
    [
        ([RLimit(type="RLMT_BOGUS")], "Unknown rlimit type 'RLMT_BOGUS'"),
        ([RLimit(type="RLMT_NOFILE", soft=1)], "set both, or neither"),
        (
            [RLimit(type="RLMT_NOFILE", soft=10, hard=5)],
            "soft limit 10 exceeds its hard limit 5",
        ),
        (
            [RLimit(type="RLMT_CPU"), RLimit(type="RLMT_CPU")],
            "RLIMIT_CPU given more than once",
        ),
    ],
)
async def test_invalid_rlimits_are_refused(rlimits, message):
    info = ContainerInfo(rlimit_info=RLimitInfo(rlimits=rlimits))
    with pytest.raises(RLimitError, match=message):
        await PosixRLimitsIsolator().prepare(TOP, config(info))


def linux(**kwargs: Any) -> ContainerInfo:
    return ContainerInfo(linux_info=LinuxInfo(**kwargs))


async def test_effective_capabilities_in_kernel_names_and_order():
    isolator = LinuxCapabilitiesIsolator()
    info = linux(
        effective_capabilities={"capabilities": ["NET_ADMIN", "CHOWN"]},
        bounding_capabilities={"capabilities": ["CHOWN", "NET_ADMIN", "SYS_ADMIN"]},
    )
    launch = await isolator.prepare(TOP, config(info))
    assert launch is not None and launch.capabilities == ["CAP_CHOWN", "CAP_NET_ADMIN"]
    assert launch.bounding_capabilities == ["CAP_CHOWN", "CAP_NET_ADMIN", "CAP_SYS_ADMIN"]
    # The deprecated capability_info stands for the effective set; numbers are Mesos's enum.
    launch = await isolator.prepare(
        TOP, config(linux(capability_info={"capabilities": [1000, "KILL"]}))
    )
    assert launch is not None and launch.capabilities == ["CAP_CHOWN", "CAP_KILL"]
    assert launch.bounding_capabilities is None
    launch = await isolator.prepare(
        TOP, config(linux(bounding_capabilities={"capabilities": ["KILL"]}))
    )
    assert launch is not None and launch.capabilities == ["CAP_KILL"]
    assert await isolator.prepare(TOP, config(linux(share_cgroups=False))) is None


@pytest.mark.parametrize(
    ("info", "message"),
    [
        (
            linux(effective_capabilities={"capabilities": ["CAP_CHOWN"]}),
            "no CAP_ prefix",
        ),
        (linux(effective_capabilities=["CHOWN"]), "must look like"),
        (
            linux(
                effective_capabilities={"capabilities": ["SYS_ADMIN", "CHOWN"]},
                bounding_capabilities={"capabilities": ["CHOWN"]},
            ),
            "SYS_ADMIN are not in the bounding set",
        ),
    ],
)
async def test_invalid_capabilities_are_refused(info, message):
    with pytest.raises(CapabilitiesError, match=message):
        await LinuxCapabilitiesIsolator().prepare(TOP, config(info))


def sandbox_volume(kind: str, path: str, container_path: str = "data") -> Volume:
    return Volume(
        container_path=container_path,
        source=VolumeSource(
            type="SANDBOX_PATH", sandbox_path=SandboxPath(type=kind, path=path)
        ),
    )


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        (sandbox_volume("SELF", "../escape"), "must not leave its directory"),
        (sandbox_volume("SELF", "/abs"), "must be a non-empty relative path"),
        (
            sandbox_volume("SELF", "ok", "a/../../escape"),
            "must not leave its directory",
        ),
        (
            sandbox_volume("PARENT", "shared"),
            "needs a nested container: top has no parent",
        ),
        (sandbox_volume("OTHER", "x"), "unknown type 'OTHER'"),
        (
            sandbox_volume("SELF", "x", "/no/such/dir/on/host"),
            "does not exist on the host",
        ),
    ],
)
async def test_invalid_sandbox_path_volumes_are_refused(tmp_path, volume, message):
    isolator = VolumeSandboxPathIsolator(FLAGS)
    with pytest.raises(VolumeError, match=message):
        await isolator.prepare(
            TOP, config(ContainerInfo(volumes=[volume]), str(tmp_path))
        )


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        (sandbox_volume("SELF", "out"), "leads outside its sandbox"),
        (sandbox_volume("SELF", "out/sub"), "leads outside its sandbox"),
        (sandbox_volume("SELF", "ok", "out"), "leads outside the sandbox"),
        (sandbox_volume("SELF", "ok", "out/x"), "leads outside the sandbox"),
        (sandbox_volume("SELF", "ok", "a\0b"), "invalid characters"),
        (sandbox_volume("SELF", "a\nb"), "invalid characters"),
    ],
)
async def test_sandbox_path_volumes_that_follow_a_link_out_are_refused(tmp_path, volume, message):
    """A task can make links in its sandbox: neither source nor mount point may follow one out."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (tmp_path / "victim").mkdir()
    os.symlink(tmp_path / "victim", sandbox / "out")
    isolator = VolumeSandboxPathIsolator(FLAGS)
    with pytest.raises(VolumeError, match=message):
        await isolator.prepare(TOP, config(ContainerInfo(volumes=[volume]), str(sandbox)))
    assert os.listdir(tmp_path / "victim") == []


async def test_sandbox_path_targets_the_sandbox_as_the_container_sees_it(tmp_path):
    isolator = VolumeSandboxPathIsolator(FLAGS)
    info = ContainerInfo(volumes=[sandbox_volume("SELF", "cache", "view")])
    launch = await isolator.prepare(
        TOP, config(info, str(tmp_path), rootfs="/some/rootfs")
    )
    assert launch is not None
    assert launch.mounts == [
        Mount(
            str(tmp_path / "cache"),
            "/mnt/mesos/sandbox/view",
            "bind",
            ["rbind", "rw", "rslave"],
        )
    ]
    assert (tmp_path / "view").is_dir()  # the mount point, inside the sandbox


async def test_parent_sandbox_path_falls_back_to_the_agents_layout(tmp_path):
    child = ContainerID(value=str(uuid.uuid4()), parent=TOP)
    sandbox = tmp_path / "containers" / child.value
    sandbox.mkdir(parents=True)
    launch = await VolumeSandboxPathIsolator(FLAGS).prepare(
        child,
        config(
            ContainerInfo(volumes=[sandbox_volume("PARENT", "shared")]), str(sandbox)
        ),
    )
    assert launch is not None and launch.mounts[0].source == str(tmp_path / "shared")


async def test_host_path_volumes_new_and_legacy_forms(tmp_path):
    host = tmp_path / "host-data"
    volumes = [
        Volume(
            container_path="/tmp",
            mode="RO",
            source=VolumeSource(
                type="HOST_PATH",
                host_path={
                    "path": str(host),
                    "mount_propagation": {"mode": "BIDIRECTIONAL"},
                },
            ),
        ),
        Volume(container_path="legacy", host_path="relative/dir"),
        Volume(container_path="ignored", source=VolumeSource(type="SANDBOX_PATH")),
    ]
    launch = await VolumeHostPathIsolator(FLAGS).prepare(
        TOP, config(ContainerInfo(volumes=volumes), str(tmp_path))
    )
    assert launch is not None
    assert launch.mounts == [
        Mount(str(host), "/tmp", "bind", ["rbind", "ro", "rshared"]),
        Mount(
            str(tmp_path / "relative/dir"),
            str(tmp_path / "legacy"),
            "bind",
            ["rbind", "rw", "rslave"],
        ),
    ]
    assert host.is_dir()  # created, as Mesos does


async def test_host_path_must_be_absolute(tmp_path):
    volume = Volume(
        container_path="x",
        source=VolumeSource(type="HOST_PATH", host_path={"path": "rel"}),
    )
    with pytest.raises(VolumeError, match="must be absolute"):
        await VolumeHostPathIsolator(FLAGS).prepare(
            TOP, config(ContainerInfo(volumes=[volume]), str(tmp_path))
        )


def test_disk_quota_counts_sandbox_disk_only():
    def disk(mb: float, **kwargs: Any) -> Resource:
        return Resource(
            name="disk", type=ValueType.SCALAR, scalar=Scalar(value=mb), **kwargs
        )

    assert disk_quota([]) is None
    assert disk_quota([disk(10), disk(5)]) == 15 << 20
    assert (
        disk_quota([disk(10), disk(100, disk={"persistence": {"id": "v"}})]) == 10 << 20
    )
