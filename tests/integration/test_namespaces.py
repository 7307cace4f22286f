"""namespaces/pid and namespaces/ipc through the linux launcher (root, real runc)."""

from __future__ import annotations

import os

import pytest
from tests.fixtures.linux_launcher import LinuxEnv

from mesilla.containerizer.isolators.namespaces.ipc import (
    IpcNamespaceError,
    IpcNamespaceIsolator,
)
from mesilla.containerizer.isolators.namespaces.pid import PidNamespaceIsolator
from mesilla.containerizer.launch_info import merge_launch_infos
from mesilla.containerizer.launcher.linux import LinuxLauncher
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import ContainerID, ContainerInfo, LinuxInfo

pytestmark = pytest.mark.root


def _ns(pid: int, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


async def _launch(
    env: LinuxEnv,
    launcher: LinuxLauncher,
    container_id: ContainerID,
    script: str,
    linux_info: LinuxInfo | None = None,
) -> tuple[int, ContainerConfig]:
    """Runs `script` with what the namespace isolators prepare for it."""
    config = env.config(
        "-".join(container_id.path()), container_info=ContainerInfo(linux_info=linux_info)
    )
    infos = []
    for isolator in (IpcNamespaceIsolator(env.flags), PidNamespaceIsolator(env.flags)):
        info = await isolator.prepare(container_id, config)
        if info is not None:
            infos.append(info)
    launch_info = merge_launch_infos(infos)
    launch_info.environment["MESOS_SANDBOX"] = config.sandbox
    return await env.run(launcher, container_id, script, config, launch_info), config


async def test_top_level_gets_private_ipc_and_pid_namespaces(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="private")
    pid, _ = await _launch(linux_env, launcher, cid, "sleep 1000")
    for kind in ("ipc", "pid", "mnt"):
        assert _ns(pid, kind) != _ns(os.getpid(), kind)
    await launcher.destroy(cid)


async def test_private_dev_shm_has_its_size_and_is_unmounted_on_destroy(
    linux_env: LinuxEnv,
) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="shm")
    _, config = await _launch(
        linux_env, launcher, cid, 'df -k /dev/shm | tail -1 > "$MESOS_SANDBOX/df"',
        LinuxInfo(ipc_mode="PRIVATE", shm_size=16),
    )  # fmt: skip
    assert await launcher.wait(cid) == 0
    with open(os.path.join(config.sandbox, "df")) as f:
        size_kb = int(f.read().split()[1])
    assert size_kb == 16 * 1024
    shm = os.path.join(launcher.directory(cid), "shm")
    assert os.path.ismount(shm)
    await launcher.destroy(cid)
    assert not os.path.exists(shm)
    assert linux_env.mounts_under_root() == []


async def test_share_parent_at_top_level_shares_the_agents_ipc(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="agentipc")
    pid, _ = await _launch(
        linux_env, launcher, cid, "sleep 1000", LinuxInfo(ipc_mode="SHARE_PARENT")
    )
    assert _ns(pid, "ipc") == _ns(os.getpid(), "ipc")
    await launcher.destroy(cid)


async def test_nested_shares_parent_ipc_and_dev_shm_and_pid_when_asked(
    linux_env: LinuxEnv,
) -> None:
    launcher = linux_env.launcher()
    parent = ContainerID(value="p")
    parent_pid, _ = await _launch(
        linux_env, launcher, parent, 'echo from-parent > /dev/shm/token; exec sleep 1000'
    )
    shared = ContainerID(value="shared", parent=parent)
    shared_pid, shared_config = await _launch(
        linux_env, launcher, shared, 'cat /dev/shm/token > "$MESOS_SANDBOX/token"; sleep 1000',
        LinuxInfo(share_pid_namespace=True),
    )  # fmt: skip
    own = ContainerID(value="own", parent=parent)
    own_pid, _ = await _launch(linux_env, launcher, own, "sleep 1000")

    assert _ns(shared_pid, "ipc") == _ns(parent_pid, "ipc") != _ns(os.getpid(), "ipc")
    assert _ns(shared_pid, "pid") == _ns(parent_pid, "pid")
    assert _ns(own_pid, "pid") != _ns(parent_pid, "pid")
    assert _ns(own_pid, "ipc") == _ns(parent_pid, "ipc")
    await launcher.kill(shared, 9)
    await launcher.wait(shared)
    token = os.path.join(shared_config.sandbox, "token")
    with open(token) as f:
        assert f.read() == "from-parent\n"
    for cid in (shared, own, parent):
        await launcher.destroy(cid)
    assert linux_env.runtime_ids() == []


async def test_ipc_mode_validation() -> None:
    isolator = IpcNamespaceIsolator()
    config = ContainerConfig(
        command=None,  # type: ignore[arg-type]
        sandbox="/nonexistent",
        container_info=ContainerInfo(linux_info=LinuxInfo(ipc_mode="SHARE_PARENT", shm_size=8)),
    )
    with pytest.raises(IpcNamespaceError, match="shm_size"):
        await isolator.prepare(ContainerID(value="c"), config)
    assert config.container_info is not None and config.container_info.linux_info is not None
    config.container_info.linux_info.ipc_mode = "BOGUS"
    config.container_info.linux_info.shm_size = None
    with pytest.raises(IpcNamespaceError, match="BOGUS"):
        await isolator.prepare(ContainerID(value="c"), config)
    nested = ContainerID(value="n", parent=ContainerID(value="c"))
    config.container_info.linux_info.ipc_mode = None
    assert await isolator.prepare(nested, config) is None
    assert await isolator.prepare(ContainerID(value="c"), config) == ContainerLaunchInfo(
        clone_namespaces={"ipc"}
    )
