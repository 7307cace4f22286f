"""Agent restart: the same agent id, re-attached executors, no status update lost."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.conftest import free_port
from tests.integration.agent_fake_master import AgentProcess, FakeMaster

from mesilla.agent import main as agent_main
from mesilla.agent import paths
from mesilla.common.flags import parse
from mesilla.common.resources import Resources
from mesilla.v1.internal import AgentEvent, AgentEventType, KillTask, RunTask, RunTaskGroup
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FRAMEWORK = FrameworkInfo(user="root", name="rec", id=FrameworkID(value="fw-rec"), checkpoint=True)


@pytest.fixture
async def master() -> AsyncIterator[FakeMaster]:
    m = FakeMaster()
    await m.start()
    yield m
    await m.stop()


def _agents(master: FakeMaster, tmp_path: Any) -> tuple[AgentProcess, AgentProcess]:
    """Two runs of one agent: same work_dir, runtime_dir and port (executors know the port)."""
    port = free_port()
    return tuple(  # type: ignore[return-value]
        AgentProcess(
            master,
            str(tmp_path / "work"),
            str(tmp_path / "run"),
            "--executor_reregistration_timeout=10secs",
            f"--port={port}",
        )
        for _ in range(2)
    )


async def _run(master: FakeMaster, task_id: str, command: str) -> None:
    task = TaskInfo(
        name=task_id,
        task_id=TaskID(value=task_id),
        agent_id=AgentID(value=master.agent_id or ""),
        command=CommandInfo(value=command),
    )
    await master.send(
        AgentEvent(
            type=AgentEventType.RUN_TASK, run_task=RunTask(framework_info=FRAMEWORK, task=task)
        )
    )


async def test_restarted_agent_reattaches_and_keeps_its_tasks(
    master: FakeMaster, tmp_path: Any
) -> None:
    first, second = _agents(master, tmp_path)
    try:
        await first.start()
        await master.wait_for(lambda: master.registers)
        agent_id = master.agent_id
        await _run(master, "t-rec", "sleep 1000")
        await master.wait_update("t-rec", "TASK_RUNNING")
        await first.stop(destroy=False)  # the executor keeps running without its agent
        master.drop_stream()

        agent = await second.start()
        registers = await master.wait_for(lambda: master.registers[1:])
        register = registers[0].register  # type: ignore[index]
        assert register.agent_info.id == AgentID(value=agent_id)
        assert [(t.task_id.value, t.state.value) for t in register.tasks] == [
            ("t-rec", "TASK_RUNNING")
        ]
        # The command executor re-subscribed, so the task can still be killed through it.
        executor = agent.frameworks["fw-rec"].executors["t-rec"]
        assert executor.stream is not None
        await master.send(
            AgentEvent(
                type=AgentEventType.KILL_TASK,
                kill_task=KillTask(
                    framework_id=FrameworkID(value="fw-rec"), task_id=TaskID(value="t-rec")
                ),
            )
        )
        await master.wait_update("t-rec", "TASK_KILLED")
    finally:
        await second.stop()
        await first.stop()


async def test_unacknowledged_updates_are_resent_after_a_restart(
    master: FakeMaster, tmp_path: Any
) -> None:
    master.auto_ack = False
    first, second = _agents(master, tmp_path)
    try:
        await first.start()
        await master.wait_for(lambda: master.registers)
        await _run(master, "t-unacked", "sleep 1000")
        head = await master.wait_for(lambda: master.updates("t-unacked"))
        uuid = head[0].status.uuid  # type: ignore[index]
        await first.stop(destroy=False)
        master.drop_stream()
        seen = len(master.updates("t-unacked"))

        await second.start()
        resent = await master.wait_for(lambda: master.updates("t-unacked")[seen:])
        assert resent[0].status.uuid == uuid  # type: ignore[index]
    finally:
        await second.stop()
        await first.stop()


async def test_executor_that_died_while_the_agent_was_down(
    master: FakeMaster, tmp_path: Any
) -> None:
    first, second = _agents(master, tmp_path)
    try:
        agent = await first.start()
        await master.wait_for(lambda: master.registers)
        await _run(master, "t-dies", "sleep 1000")
        await master.wait_update("t-dies", "TASK_RUNNING")
        executor = agent.frameworks["fw-rec"].executors["t-dies"]
        pid_path = paths.forked_pid_path(
            agent.flags.work_dir,
            master.agent_id or "",
            "fw-rec",
            "t-dies",
            executor.container_id.value,
        )
        with open(pid_path) as f:
            pid = int(f.read())
        await first.stop(destroy=False)
        master.drop_stream()
        os.kill(pid, signal.SIGKILL)

        await second.start()
        failed = await master.wait_update("t-dies", "TASK_FAILED")
        assert failed.status.reason.value == "REASON_EXECUTOR_TERMINATED"
        assert failed.status.source.value == "SOURCE_AGENT"
    finally:
        await second.stop()
        await first.stop()


async def test_pod_task_that_ended_while_the_agent_was_down_is_reported(
    master: FakeMaster, tmp_path: Any
) -> None:
    """The default executor's WAIT, cut by the agent's stop, goes again once the executor
    has re-subscribed to the restarted agent, which answers with the task's end."""
    first, second = _agents(master, tmp_path)
    go = tmp_path / "go"
    try:
        await first.start()
        await master.wait_for(lambda: master.registers)
        executor = ExecutorInfo(
            executor_id=ExecutorID(value="pod"),
            type="DEFAULT",
            resources=Resources.parse("cpus:0.1;mem:32").to_list(),
        )
        task = TaskInfo(
            name="t-pod",
            task_id=TaskID(value="t-pod"),
            agent_id=AgentID(value=master.agent_id or ""),
            executor=executor,
            command=CommandInfo(value=f"while [ ! -e {go} ]; do sleep 0.05; done"),
            resources=Resources.parse("cpus:0.1;mem:16").to_list(),
        )
        group = RunTaskGroup(
            framework_info=FRAMEWORK, executor_info=executor, task_group=TaskGroupInfo(tasks=[task])
        )
        await master.send(AgentEvent(type=AgentEventType.RUN_TASK_GROUP, run_task_group=group))
        await master.wait_update("t-pod", "TASK_RUNNING")
        await first.stop(destroy=False)
        master.drop_stream()
        go.touch()  # the task ends while no agent runs

        await second.start()
        await master.wait_update("t-pod", "TASK_FINISHED")
    finally:
        await second.stop()
        await first.stop()


# A custom executor that runs its task, then, once the agent goes away, stays
# alive without ever subscribing again: a hung executor, for the agent to destroy.
HUNG_EXECUTOR = r"""
import base64, http.client, json, os, time, uuid
host, port = os.environ["MESOS_AGENT_ENDPOINT"].split(":")
ids = {"framework_id": {"value": os.environ["MESOS_FRAMEWORK_ID"]},
       "executor_id": {"value": os.environ["MESOS_EXECUTOR_ID"]}}
def post(call):
    conn = http.client.HTTPConnection(host, int(port))
    conn.request("POST", "/api/v1/executor", json.dumps({**ids, **call}),
                 {"Content-Type": "application/json"})
    return conn.getresponse()
stream = post({"type": "SUBSCRIBE", "subscribe": {}})
buf = b""
while True:
    chunk = stream.read1(65536)
    if not chunk:
        break
    buf += chunk
    while b"\n" in buf:
        size, _, rest = buf.partition(b"\n")
        if len(rest) < int(size):
            break
        event, buf = json.loads(rest[: int(size)]), rest[int(size):]
        if event["type"] == "LAUNCH":
            task_id = event["launch"]["task"]["task_id"]
            post({"type": "UPDATE", "update": {"status": {"task_id": task_id, "state": "TASK_RUNNING",
                  "uuid": base64.b64encode(uuid.uuid4().bytes).decode()}}}).read()
time.sleep(1000)
"""


async def test_executor_that_does_not_resubscribe_is_destroyed(
    master: FakeMaster, tmp_path: Any
) -> None:
    port = free_port()
    first, second = (
        AgentProcess(
            master,
            str(tmp_path / "work"),
            str(tmp_path / "run"),
            "--executor_reregistration_timeout=1secs",
            f"--port={port}",
        )
        for _ in range(2)
    )
    script = tmp_path / "hung.py"
    script.write_text(HUNG_EXECUTOR)
    try:
        await first.start()
        await master.wait_for(lambda: master.registers)
        task = TaskInfo(
            name="h",
            task_id=TaskID(value="t-hung"),
            agent_id=AgentID(value=master.agent_id or ""),
            executor=ExecutorInfo(
                executor_id=ExecutorID(value="hung"),
                type="CUSTOM",
                command=CommandInfo(value=f"{sys.executable} {script}"),
            ),
        )
        await master.send(
            AgentEvent(
                type=AgentEventType.RUN_TASK, run_task=RunTask(framework_info=FRAMEWORK, task=task)
            )
        )
        await master.wait_update("t-hung", "TASK_RUNNING")
        await first.stop(destroy=False)
        master.drop_stream()

        agent = await second.start()
        lost = await master.wait_update("t-hung", "TASK_LOST")
        assert lost.status.reason.value == "REASON_EXECUTOR_REREGISTRATION_TIMEOUT"
        assert "did not reregister within 1secs" in lost.status.message
        # Destroyed. (Its EXITED_EXECUTOR may go out before the agent is registered
        # again, and is then dropped, as in Mesos: the re-registration tells the master.)
        await master.wait_for(lambda: not agent.containerizer.containers())
    finally:
        await second.stop()
        await first.stop()


async def test_recover_cleanup_kills_old_executors_and_exits(
    master: FakeMaster, tmp_path: Any
) -> None:
    first, _ = _agents(master, tmp_path)
    try:
        agent = await first.start()
        await master.wait_for(lambda: master.registers)
        await _run(master, "t-clean", "sleep 1000")
        await master.wait_update("t-clean", "TASK_RUNNING")
        executor = agent.frameworks["fw-rec"].executors["t-clean"]
        with open(
            paths.forked_pid_path(
                agent.flags.work_dir,
                master.agent_id or "",
                "fw-rec",
                "t-clean",
                executor.container_id.value,
            )
        ) as f:
            pid = int(f.read())
        await first.stop(destroy=False)
    finally:
        await first.stop()
    cleanup = parse(agent_main.AGENT_FLAGS, [*first.argv, "--recover=cleanup"], environ={})
    cleaned = await asyncio.wait_for(agent_main.run(cleanup), 60)
    assert cleaned.containerizer.containers() == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
