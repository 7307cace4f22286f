"""A v0 custom executor (libprocess, `tests/integration/v0_executor_program.py`) on the
agent's `slave(1)` endpoint: registered, given its task, its updates acknowledged and
forwarded, its framework message forwarded, shut down with the framework; after an
agent restart, asked to reconnect and re-registered with its running task."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import aiohttp
from tests.conftest import free_port
from tests.integration.agent_fake_master import AgentProcess, FakeMaster
from tests.integration.test_agent_tasks import agent_proc, master, run_task

from mesilla.v1.internal import AgentCallType, AgentEvent, AgentEventType, KillTask, ShutdownFramework
from mesilla.v1.mesos import AgentID, CommandInfo, ExecutorID, ExecutorInfo, FrameworkID, TaskID, TaskInfo

__all__ = ["agent_proc", "master"]

PROGRAM = Path(__file__).with_name("v0_executor_program.py")


async def test_a_v0_executor_runs_its_task(master: FakeMaster, agent_proc: AgentProcess) -> None:
    await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    executor = ExecutorInfo(
        executor_id=ExecutorID(value="v0-exec"),
        type="CUSTOM",
        command=CommandInfo(value=f"{sys.executable} {PROGRAM}"),
    )
    task = TaskInfo(
        name="t",
        task_id=TaskID(value="t-v0"),
        agent_id=AgentID(value=master.agent_id or ""),
        executor=executor,
    )
    await run_task(master, task)
    running = await master.wait_update("t-v0", "TASK_RUNNING")
    assert running.status.executor_id.value == "v0-exec"
    await master.wait_update("t-v0", "TASK_FINISHED")
    message = await master.wait_for(
        lambda: [c for c in master.calls if c.type is AgentCallType.EXECUTOR_MESSAGE]
    )
    assert message[0].executor_message.data == b"hello from v0"  # type: ignore[index]

    # Stray and malformed messages are dropped; the agent stays healthy.
    async with aiohttp.ClientSession() as s:
        for body, sender in [(b"\x0a\x03", "executor(1)@127.0.0.1:1"), (b"", "executor(9)@127.0.0.1:2")]:
            async with s.post(
                agent_proc.url + "/slave(1)/mesos.internal.StatusUpdateMessage",
                data=body,
                headers={"Libprocess-From": sender},
            ) as r:
                assert r.status == 202
        async with s.get(agent_proc.url + "/health") as r:
            assert r.status == 200

    await master.send(
        AgentEvent(
            type=AgentEventType.SHUTDOWN_FRAMEWORK,
            shutdown_framework=ShutdownFramework(framework_id=FrameworkID(value="fw-1")),
        )
    )
    exited = await master.wait_for(
        lambda: [c for c in master.calls if c.type is AgentCallType.EXITED_EXECUTOR]
    )
    assert exited[0].exited_executor.status == 0  # type: ignore[index]


async def test_a_v0_executor_survives_an_agent_restart(master: FakeMaster, tmp_path: Any) -> None:
    port = free_port()
    first, second = (
        AgentProcess(master, str(tmp_path / "work"), str(tmp_path / "run"), f"--port={port}",
                     "--executor_reregistration_timeout=20secs")
        for _ in range(2)
    )  # fmt: skip
    try:
        await first.start()
        await master.wait_for(lambda: master.registers)
        executor = ExecutorInfo(
            executor_id=ExecutorID(value="v0-exec"),
            type="CUSTOM",
            command=CommandInfo(value=f"{sys.executable} {PROGRAM}"),
        )
        task = TaskInfo(
            name="hold", task_id=TaskID(value="t-hold"), agent_id=AgentID(value=master.agent_id or ""),
            executor=executor,
        )  # fmt: skip
        await run_task(master, task)
        await master.wait_update("t-hold", "TASK_RUNNING")
        await first.stop(destroy=False)  # the executor keeps running without its agent
        master.drop_stream()

        agent = await second.start()
        await master.wait_for(lambda: master.registers[1:])
        recovered = agent.frameworks["fw-1"].executors["v0-exec"]
        await master.wait_for(lambda: recovered.stream is not None)  # it re-registered
        await master.send(
            AgentEvent(
                type=AgentEventType.KILL_TASK,
                kill_task=KillTask(framework_id=FrameworkID(value="fw-1"), task_id=TaskID(value="t-hold")),
            )
        )
        await master.wait_update("t-hold", "TASK_KILLED")
    finally:
        await second.stop()
        await first.stop()
