"""A command task with an image rootfs: the executor stays on the host, the task
runs chrooted in the rootfs with its sandbox at --sandbox_directory (as Mesos)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mesilla.common.flags import parse
from mesilla.containerizer.containerizer import Containerizer
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.launcher import load_launcher
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import AgentID, CommandInfo, ContainerID, TaskID, TaskInfo
from tests.unit.executor.fake_agent import FakeAgent, launch_event

pytestmark = [pytest.mark.integration, pytest.mark.root]

BUSYBOX = "/bin/busybox"


@pytest.fixture
def rootfs(tmp_path: Any) -> str:
    if not os.path.exists(BUSYBOX):
        pytest.skip("needs busybox-static")
    root = tmp_path / "rootfs"
    (root / "bin").mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    applets = subprocess.run([BUSYBOX, "--list"], check=True, capture_output=True, text=True)
    for applet in applets.stdout.split():
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")  # relative: valid inside the chroot
    (root / "image-marker").write_text("from the image\n")
    return str(root)


@pytest.fixture
async def agent(unused_port: int) -> AsyncIterator[FakeAgent]:
    fake = FakeAgent(unused_port)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.mark.parametrize("launcher", ["posix", "linux"])
async def test_task_runs_in_the_rootfs_and_executor_on_the_host(
    agent: FakeAgent, rootfs: str, tmp_path: Any, launcher: str
) -> None:
    flags = parse(
        CONTAINERIZER_FLAGS,
        [f"--runtime_dir={tmp_path}/runtime", f"--launcher={launcher}"],
        environ={},
    )
    if launcher == "linux":
        try:
            available = load_launcher("linux").available(flags)  # type: ignore[attr-defined]
        except ImportError:
            available = False
        if not available:
            pytest.skip("the linux launcher is not available here (needs conmon, runc)")
    containerizer = await Containerizer.create(flags)
    sandbox = str(tmp_path / "sandbox")
    task = TaskInfo(name="t", task_id=TaskID(value="t1"), agent_id=AgentID(value="a"))
    config = ContainerConfig(
        command=CommandInfo(
            shell=False,
            value=sys.executable,
            arguments=[sys.executable, "-m", "mesilla.executor.command"],
        ),
        sandbox=sandbox,
        environment={**os.environ, **agent.environ(MESOS_DIRECTORY=sandbox)},
        task_info=task,
        rootfs=rootfs,  # what the provisioner sets for an image
    )
    cid = ContainerID(value="executor")
    try:
        await containerizer.launch(cid, config)
        await asyncio.wait_for(agent.subscribed.wait(), 30)
        script = (
            'cat /image-marker; echo "$PWD $MESOS_SANDBOX"; ls /proc/self/ >/dev/null && echo proc'
        )
        agent.send(launch_event("t1", {"value": script}))
        statuses = [await agent.next_update()]
        while statuses[-1]["state"] in ("TASK_STARTING", "TASK_RUNNING"):
            statuses.append(await agent.next_update())
        assert statuses[-1]["state"] == "TASK_FINISHED", statuses[-1].get("message")
        output = open(os.path.join(sandbox, "stdout")).read()
        assert "from the image\n/mnt/mesos/sandbox /mnt/mesos/sandbox\nproc\n" in output
        termination = await containerizer.wait(cid)
        assert termination is not None and termination.status == 0
    finally:
        for container_id in containerizer.containers():
            await containerizer.destroy(container_id)
        await containerizer.close()
    with open("/proc/self/mountinfo") as mounts:
        assert rootfs not in mounts.read()  # the task's mounts died with it
