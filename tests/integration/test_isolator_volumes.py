"""volume/sandbox_path and volume/host_path: the mounts they describe, applied for real.

Until a launcher applies them, each test applies the isolator's `Mount`s itself
with `mount(8)` inside a private mount namespace (`unshare -m`), so nothing
leaks to the host's mount table even if the test fails.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from mesilla.common.flags import parse
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.isolators.volume.host_path import VolumeHostPathIsolator
from mesilla.containerizer.isolators.volume.sandbox_path import (
    VolumeSandboxPathIsolator,
)
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import (
    CommandInfo,
    ContainerID,
    ContainerInfo,
    SandboxPath,
    Volume,
    VolumeSource,
)

pytestmark = [pytest.mark.root]
FLAGS = parse(CONTAINERIZER_FLAGS, [], environ={})


def run_with_mounts(
    info: ContainerLaunchInfo, script: str
) -> subprocess.CompletedProcess[str]:
    """Runs `script` in a new mount namespace where `info.mounts` are applied."""
    steps = []
    for mount in info.mounts:
        options = [o for o in mount.options if o not in ("rw", "ro", "rbind")]
        steps.append(
            f"mount --rbind {shlex.quote(mount.source)} {shlex.quote(mount.target)}"
        )
        for option in options:
            steps.append(f"mount --make-{option} {shlex.quote(mount.target)}")
        if "ro" in mount.options:
            steps.append(f"mount -o remount,bind,ro {shlex.quote(mount.target)}")
    command = " && ".join([*steps, script])
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", command],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )


def sandbox_volume(
    kind: str, path: str, container_path: str, mode: str = "RW"
) -> Volume:
    return Volume(
        container_path=container_path,
        mode=mode,
        source=VolumeSource(
            type="SANDBOX_PATH", sandbox_path=SandboxPath(type=kind, path=path)
        ),
    )


def nested_sandbox(parent: Path, child: ContainerID) -> Path:
    sandbox = parent / "containers" / child.value
    sandbox.mkdir(parents=True)
    return sandbox


async def test_parent_sandbox_path_shows_the_parents_files(tmp_path):
    isolator = VolumeSandboxPathIsolator(FLAGS)
    parent = ContainerID(value=str(uuid.uuid4()))
    child = ContainerID(value=str(uuid.uuid4()), parent=parent)
    parent_sandbox = tmp_path / "executor"
    parent_sandbox.mkdir()
    await isolator.prepare(
        parent,
        ContainerConfig(command=CommandInfo(value="x"), sandbox=str(parent_sandbox)),
    )
    (parent_sandbox / "shared").mkdir()
    (parent_sandbox / "shared" / "greeting").write_text("from the executor\n")

    child_sandbox = nested_sandbox(parent_sandbox, child)
    config = ContainerConfig(
        command=CommandInfo(value="x"),
        sandbox=str(child_sandbox),
        container_info=ContainerInfo(
            volumes=[sandbox_volume("PARENT", "shared", "data")]
        ),
    )
    info = await isolator.prepare(child, config)
    assert info is not None
    [mount] = info.mounts
    assert mount.source == str(parent_sandbox / "shared")
    assert mount.target == str(child_sandbox / "data")

    result = run_with_mounts(
        info,
        f"cat {child_sandbox}/data/greeting && echo back > {child_sandbox}/data/reply",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "from the executor\n"
    assert (parent_sandbox / "shared" / "reply").read_text() == "back\n"
    assert not (
        child_sandbox / "data" / "greeting"
    ).exists()  # nothing leaked to the host
    await isolator.cleanup(child)
    await isolator.cleanup(parent)


async def test_self_sandbox_path_read_only_refuses_writes(tmp_path):
    isolator = VolumeSandboxPathIsolator(FLAGS)
    cid = ContainerID(value=str(uuid.uuid4()))
    config = ContainerConfig(
        command=CommandInfo(value="x"),
        sandbox=str(tmp_path),
        container_info=ContainerInfo(
            volumes=[sandbox_volume("SELF", "cache/a", "view", mode="RO")]
        ),
    )
    info = await isolator.prepare(cid, config)
    assert info is not None and (tmp_path / "cache" / "a").is_dir()
    result = run_with_mounts(info, f"touch {tmp_path}/view/file")
    assert result.returncode != 0
    assert "Read-only file system" in result.stderr
    assert not (tmp_path / "cache" / "a" / "file").exists()


async def test_host_path_volume_is_mounted_read_only(tmp_path):
    isolator = VolumeHostPathIsolator(FLAGS)
    host = tmp_path / "host"
    host.mkdir()
    (host / "config").write_text("value\n")
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    volume = Volume(
        container_path="etc-view",
        mode="RO",
        source=VolumeSource(type="HOST_PATH", host_path={"path": str(host)}),
    )
    config = ContainerConfig(
        command=CommandInfo(value="x"),
        sandbox=str(sandbox),
        container_info=ContainerInfo(volumes=[volume]),
    )
    info = await isolator.prepare(ContainerID(value="c"), config)
    assert info is not None
    target = sandbox / "etc-view"
    result = run_with_mounts(info, f"cat {target}/config; touch {target}/new")
    assert result.stdout == "value\n"
    assert "Read-only file system" in result.stderr
    assert not (host / "new").exists()
