"""Closing the agent ends every job it started (cancelled and awaited), and nothing new
starts; its executors' containers are not the agent's to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mesilla.agent import launches
from mesilla.agent.agent import Agent
from mesilla.agent.flags import AgentFlags
from mesilla.agent.main import AGENT_FLAGS
from mesilla.common.errors import Closed
from mesilla.common.flags import parse
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import (
    AgentID,
    AgentInfo,
    ContainerID,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
)


class HungLaunches:
    """A containerizer whose launches never return (below the agent, the part under test)."""

    def __init__(self) -> None:
        self.launching = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.destroyed: list[ContainerID] = []

    async def launch(self, container_id: ContainerID, config: ContainerConfig) -> None:
        self.launching.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.cancelled.set()

    async def destroy(self, container_id: ContainerID) -> None:
        self.destroyed.append(container_id)


async def test_close_cancels_and_awaits_the_agents_jobs(tmp_path: Path) -> None:
    flags = parse(AGENT_FLAGS, ["--master=127.0.0.1:1", f"--work_dir={tmp_path}"], environ={})
    containerizer = HungLaunches()
    info = AgentInfo(hostname="h", id=AgentID(value="A"))
    agent = Agent(AgentFlags.from_flags(flags), containerizer, info)  # type: ignore[arg-type]
    framework = FrameworkInfo(user="u", name="n", id=FrameworkID(value="F"))
    executor = ExecutorInfo(executor_id=ExecutorID(value="E"), type="DEFAULT")
    task = TaskInfo(name="t", task_id=TaskID(value="t"), agent_id=AgentID(value="A"))
    launches.run_task_group(agent, framework, executor, TaskGroupInfo(tasks=[task]))
    await asyncio.wait_for(containerizer.launching.wait(), 10)

    await agent.close()
    assert containerizer.cancelled.is_set() and len(agent.tasks) == 0
    assert containerizer.destroyed == []  # the container is left for a restarted agent
    with pytest.raises(Closed):
        agent.spawn(asyncio.sleep(0), "after close")
