"""Every checkpoint the running agent writes fsyncs in a worker thread, never on the loop:
registering, a launch, a framework update, an executor's end."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mesilla.agent import launches, paths, terminations
from mesilla.agent.agent import Agent
from mesilla.agent.flags import AgentFlags
from mesilla.agent.main import AGENT_FLAGS
from mesilla.agent.master_events import MasterEvents
from mesilla.agent.state import ExecutorState
from mesilla.common.flags import parse
from mesilla.containerizer.types import ContainerConfig, ContainerTermination
from mesilla.v1 import internal
from mesilla.v1.mesos import (
    AgentID,
    AgentInfo,
    ContainerID,
    ContainerStatus,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    MasterInfo,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
)


class EndedContainers:
    """Containers that launch and end at once (below the agent, the part under test)."""

    async def launch(self, container_id: ContainerID, config: ContainerConfig) -> None:
        return None

    async def status(self, container_id: ContainerID) -> ContainerStatus:
        return ContainerStatus(executor_pid=os.getpid())

    async def wait(self, container_id: ContainerID) -> ContainerTermination | None:
        return ContainerTermination(status=0)

    async def update(self, container_id: ContainerID, resources: Any, limits: Any) -> None:
        return None

    def containers(self) -> list[ContainerID]:
        return []


async def _settle(done: Callable[[], bool]) -> None:
    """Lets the agent's jobs run until `done` (each step is the agent's own work, no timing)."""
    for _ in range(1000):
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the agent never got there")


async def test_no_checkpoint_fsyncs_on_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_loop: list[int] = []
    off_loop: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        (on_loop if threading.current_thread() is threading.main_thread() else off_loop).append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    flags = parse(AGENT_FLAGS, ["--master=127.0.0.1:1", f"--work_dir={tmp_path}"], environ={})
    containers = EndedContainers()
    agent = Agent(AgentFlags.from_flags(flags), containers, AgentInfo(hostname="h"))  # type: ignore[arg-type]
    try:
        events = MasterEvents(agent)
        events.registered(
            internal.Registered(
                agent_id=AgentID(value="A"),
                master_info=MasterInfo(id="m", ip=0),
                connection=internal.MasterAgentConnection(total_ping_timeout_seconds=75.0),
            )
        )
        framework = FrameworkInfo(user="u", name="n", id=FrameworkID(value="F"), checkpoint=True)
        executor = ExecutorInfo(executor_id=ExecutorID(value="E"), type="DEFAULT")
        task = TaskInfo(name="t", task_id=TaskID(value="t"), agent_id=AgentID(value="A"))
        launches.run_task_group(agent, framework, executor, TaskGroupInfo(tasks=[task]))
        container_id = agent.frameworks["F"].executors["E"].container_id.value
        update = internal.UpdateFramework(framework_info=framework)
        events.handle_event(
            internal.AgentEvent(type=internal.AgentEventType.UPDATE_FRAMEWORK, update_framework=update)
        )
        # The container ends at once; the framework's shutdown then removes the executor,
        # and its run gets its sentinel.
        ended = agent.frameworks["F"].executors["E"]
        await _settle(lambda: ended.state is ExecutorState.TERMINATED)
        terminations.shutdown_framework(agent, "F")
        sentinel = paths.executor_sentinel_path(str(tmp_path), "A", "F", "E", container_id)
        await _settle(lambda: os.path.exists(sentinel))
        await _settle(lambda: os.path.exists(paths.agent_info_path(str(tmp_path), "A")))
    finally:
        await agent.close()
    assert off_loop and not on_loop
