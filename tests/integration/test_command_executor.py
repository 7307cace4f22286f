"""The command executor inside a container of the Containerizer (posix and linux
launchers), talking to a fake agent's executor API: launch, kill and destroy."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.unit.executor.fake_agent import FakeAgent, kill_event, launch_event

from mesilla.common.flags import parse
from mesilla.containerizer.containerizer import Containerizer
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.isolators.posix.procfs import session_processes
from mesilla.containerizer.launcher import load_launcher
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import CommandInfo, ContainerID

pytestmark = pytest.mark.integration


@pytest.fixture
async def agent(unused_port: int) -> AsyncIterator[FakeAgent]:
    fake = FakeAgent(unused_port, capabilities=["TASK_KILLING_STATE"])
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture(params=["posix", pytest.param("linux", marks=pytest.mark.root)])
async def containerizer(request: Any, tmp_path: Any) -> AsyncIterator[Containerizer]:
    flags = parse(
        CONTAINERIZER_FLAGS,
        [f"--runtime_dir={tmp_path}/runtime", f"--launcher={request.param}"],
        environ={},
    )
    if request.param == "linux":
        try:
            available = load_launcher("linux").available(flags)  # type: ignore[attr-defined]
        except ImportError:
            available = False
        if not available:
            pytest.skip("the linux launcher is not available here (needs root, conmon, runc)")
    c = await Containerizer.create(flags)
    yield c
    for container_id in c.containers():
        await c.destroy(container_id)
    await c.close()


def executor_config(agent: FakeAgent, sandbox: str) -> ContainerConfig:
    return ContainerConfig(
        command=CommandInfo(
            shell=False,
            value=sys.executable,
            arguments=[sys.executable, "-m", "mesilla.executor.command"],
        ),
        sandbox=sandbox,
        environment={**os.environ, **agent.environ(MESOS_SANDBOX=sandbox)},
    )


async def test_command_task_runs_in_the_executor_container(
    agent: FakeAgent, containerizer: Containerizer, tmp_path: Any
) -> None:
    cid = ContainerID(value="executor")
    sandbox = str(tmp_path / "sandbox")
    await containerizer.launch(cid, executor_config(agent, sandbox))
    await asyncio.wait_for(agent.subscribed.wait(), 30)
    agent.send(launch_event("t1", {"value": "echo task output; exit 2"}))
    statuses = [await agent.next_update() for _ in range(3)]
    assert [s["state"] for s in statuses] == ["TASK_STARTING", "TASK_RUNNING", "TASK_FAILED"]
    termination = await containerizer.wait(cid)
    assert termination is not None and termination.status == 0  # the executor exits cleanly
    assert "task output\n" in open(os.path.join(sandbox, "stdout")).read()


async def test_kill_then_destroy_leaves_no_process(
    agent: FakeAgent, containerizer: Containerizer, tmp_path: Any
) -> None:
    cid = ContainerID(value="executor")
    await containerizer.launch(cid, executor_config(agent, str(tmp_path / "sandbox")))
    await asyncio.wait_for(agent.subscribed.wait(), 30)
    agent.send(launch_event("t1", {"value": "sleep 1000 & exec sleep 1001"}))
    assert [(await agent.next_update())["state"] for _ in range(2)] == [
        "TASK_STARTING", "TASK_RUNNING",
    ]  # fmt: skip
    leader = (await containerizer.status(cid)).executor_pid
    agent.send(kill_event("t1", grace_secs=1))
    assert [(await agent.next_update())["state"] for _ in range(2)] == [
        "TASK_KILLING", "TASK_KILLED",
    ]  # fmt: skip
    await containerizer.wait(cid)
    # Both sleeps are in the task's process group: the kill reached them, and the
    # executor left once its terminal update was acknowledged.
    assert session_processes(leader) == []
    assert not os.path.exists(f"/proc/{leader}")


async def test_destroying_the_container_takes_the_task_down(
    agent: FakeAgent, containerizer: Containerizer, tmp_path: Any
) -> None:
    cid = ContainerID(value="executor")
    await containerizer.launch(cid, executor_config(agent, str(tmp_path / "sandbox")))
    await asyncio.wait_for(agent.subscribed.wait(), 30)
    agent.send(launch_event("t1", {"value": "exec sleep 1000"}))
    await agent.next_update()
    await agent.next_update()
    leader = (await containerizer.status(cid)).executor_pid
    # The executor and its task, under the linux launcher also the pid namespace's init.
    assert len(session_processes(leader)) >= 2
    await containerizer.destroy(cid)
    assert session_processes(leader) == []
    assert not os.path.exists(f"/proc/{leader}")
