"""filesystem/linux through the linux launcher, with a busybox rootfs (root, real runc)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from tests.fixtures.linux_launcher import LinuxEnv

from mesilla.containerizer.isolators.filesystem.linux import (
    LinuxFilesystemError,
    LinuxFilesystemIsolator,
)
from mesilla.containerizer.launcher.linux import LinuxLauncher
from mesilla.containerizer.launcher.oci import (
    DEFAULT_CAPABILITIES,
    capability_mask,
    capability_names,
)
from mesilla.containerizer.types import ContainerConfig, Mount
from mesilla.testing.images import base_layer
from mesilla.v1.mesos import AgentID, ContainerID, TaskID, TaskInfo

pytestmark = pytest.mark.root


@pytest.fixture
def rootfs(linux_env: LinuxEnv) -> str:
    """A busybox rootfs directory (the test image's base layer, unpacked)."""
    path = linux_env.root / "rootfs"
    path.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(base_layer().tar)) as tar:
        tar.extractall(path)
    return str(path)


async def _run(
    env: LinuxEnv, launcher: LinuxLauncher, name: str, script: str, **config_fields: object
) -> tuple[int | None, ContainerConfig]:
    cid = ContainerID(value=name)
    config = env.config(name, **config_fields)
    launch_info = await LinuxFilesystemIsolator(env.flags).prepare(cid, config)
    assert launch_info is not None
    launch_info.environment.setdefault("PATH", "/bin:/usr/bin")
    await env.run(launcher, cid, script, config, launch_info)
    status = await launcher.wait(cid)
    await launcher.destroy(cid)
    return status, config


def _read(config: ContainerConfig, name: str) -> str:
    return Path(config.sandbox, name).read_text().strip()


async def test_container_with_an_image_runs_in_its_rootfs(
    linux_env: LinuxEnv, rootfs: str
) -> None:
    launcher = linux_env.launcher()
    script = (
        'pwd > "$MESOS_SANDBOX/pwd"; echo "$MESOS_SANDBOX" > "$MESOS_SANDBOX/env"; '
        'cat /etc/base-marker > "$MESOS_SANDBOX/marker"; '
        '([ -e /usr/bin/env ] && echo host || echo image) > "$MESOS_SANDBOX/which"'
    )
    status, config = await _run(linux_env, launcher, "image", script, rootfs=rootfs)
    assert status == 0, Path(config.sandbox, "stderr").read_text()
    assert _read(config, "pwd") == linux_env.flags.sandbox_directory
    assert _read(config, "env") == linux_env.flags.sandbox_directory
    assert _read(config, "marker") == "base"
    assert _read(config, "which") == "image"
    assert linux_env.mounts_under_root() == []


async def test_root_in_an_image_holds_the_oci_default_capabilities(
    linux_env: LinuxEnv, rootfs: str
) -> None:
    """Issue #9: without capability information, root in a container with an image
    keeps only the OCI runtimes' default set, none that reaches past its rootfs."""
    script = 'grep -E "^Cap(Eff|Bnd)" /proc/self/status > "$MESOS_SANDBOX/caps"'
    status, config = await _run(linux_env, linux_env.launcher(), "caps", script, rootfs=rootfs)
    assert status == 0, Path(config.sandbox, "stderr").read_text()
    held = {line.split()[0]: int(line.split()[1], 16) for line in _read(config, "caps").splitlines()}
    default = capability_mask([c for c in DEFAULT_CAPABILITIES if c in capability_names(None)])
    assert held == {"CapEff:": default, "CapBnd:": default}


async def test_user_is_resolved_in_the_image(linux_env: LinuxEnv, rootfs: str) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="nobody")
    config = linux_env.config("nobody", rootfs=rootfs)
    launch_info = await LinuxFilesystemIsolator(linux_env.flags).prepare(cid, config)
    assert launch_info is not None
    with open(os.path.join(rootfs, "etc/passwd"), "a") as f:
        f.write("imageonly:x:4242:4243::/:/bin/sh\n")  # a user the host does not have
    launch_info.user = "imageonly"
    # The user cannot write the root-owned sandbox: the ids go to stdout.
    await linux_env.run(launcher, cid, "id -u; id -g", config, launch_info)
    assert await launcher.wait(cid) == 0
    await launcher.destroy(cid)
    assert Path(config.sandbox, "stdout").read_text() == "4242\n4243\n"


async def test_container_without_image_has_its_sandbox_as_mesos_sandbox(
    linux_env: LinuxEnv,
) -> None:
    launcher = linux_env.launcher()
    status, config = await _run(
        linux_env, launcher, "noimage", 'pwd > "$MESOS_SANDBOX/pwd"; [ -x /usr/bin/env ]'
    )
    assert status == 0
    assert _read(config, "pwd") == config.sandbox


async def test_command_task_with_image_sees_rootfs_and_sandbox_inside_it(
    linux_env: LinuxEnv, rootfs: str
) -> None:
    """The command executor stays on the host and chroots its task into the rootfs."""
    launcher = linux_env.launcher()
    inside = os.path.join(rootfs, linux_env.flags.sandbox_directory.lstrip("/"))
    task = TaskInfo(name="t", task_id=TaskID(value="t"), agent_id=AgentID(value="a"))
    script = f"echo via-rootfs > {inside}/file && touch {rootfs}/etc/written && [ -x /usr/bin/env ]"
    cid = ContainerID(value="cmdtask")
    config = linux_env.config("cmdtask", rootfs=rootfs, task_info=task)
    launch_info = await LinuxFilesystemIsolator(linux_env.flags).prepare(cid, config)
    assert launch_info is not None
    # The containerizer asks for the rootfs at its host path too: the same mount twice.
    launch_info.mounts.append(Mount(rootfs, rootfs))
    await linux_env.run(launcher, cid, script, config, launch_info)
    status = await launcher.wait(cid)
    await launcher.destroy(cid)
    assert status == 0, Path(config.sandbox, "stderr").read_text()
    assert _read(config, "file") == "via-rootfs"
    assert os.path.exists(os.path.join(rootfs, "etc/written"))


async def test_missing_rootfs_is_a_clear_error(linux_env: LinuxEnv) -> None:
    config = linux_env.config("missing", rootfs=str(linux_env.root / "no-such-rootfs"))
    with pytest.raises(LinuxFilesystemError, match="does not exist"):
        await LinuxFilesystemIsolator(linux_env.flags).prepare(ContainerID(value="m"), config)


async def test_nested_container_with_an_image_gets_its_own_rootfs(
    linux_env: LinuxEnv, rootfs: str
) -> None:
    launcher = linux_env.launcher()
    parent = ContainerID(value="host-parent")
    parent_config = linux_env.config("host-parent")
    parent_pid = await linux_env.run(
        launcher, parent, "sleep 1000", parent_config,
        linux_env.launch_info(parent_config, clone_namespaces={"network"}),
    )  # fmt: skip
    assert os.readlink(f"/proc/{parent_pid}/ns/net") != os.readlink("/proc/self/ns/net")
    child = ContainerID(value="image-child", parent=parent)
    config = linux_env.config("image-child", rootfs=rootfs)
    launch_info = await LinuxFilesystemIsolator(linux_env.flags).prepare(child, config)
    assert launch_info is not None
    script = (
        'cat /etc/base-marker > "$MESOS_SANDBOX/marker"; '
        'readlink /proc/1/ns/net > "$MESOS_SANDBOX/net"'
    )
    await linux_env.run(launcher, child, script, config, launch_info)
    assert await launcher.wait(child) == 0, Path(config.sandbox, "stderr").read_text()
    assert _read(config, "marker") == "base"
    # Its pid 1 is its own first process, in the parent's network namespace.
    assert _read(config, "net") == os.readlink(f"/proc/{parent_pid}/ns/net")
    await launcher.destroy(child)
    await launcher.destroy(parent)
    assert linux_env.mounts_under_root() == []
