"""The command executor as a real process, against a fake agent's executor API."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.unit.executor.fake_agent import CONTAINER_ID, FakeAgent, kill_event, launch_event

from mesilla.containerizer.isolators.posix.procfs import session_processes


@pytest.fixture
async def agent(unused_port: int) -> AsyncIterator[FakeAgent]:
    fake = FakeAgent(unused_port, capabilities=["TASK_KILLING_STATE"])
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


class ExecutorProcess:
    def __init__(self, process: asyncio.subprocess.Process, sandbox: Any) -> None:
        self.process = process
        self.sandbox = sandbox

    async def exit_code(self) -> int:
        return await asyncio.wait_for(self.process.wait(), 30)


@pytest.fixture
async def start_executor(tmp_path: Any) -> AsyncIterator[Any]:
    started: list[asyncio.subprocess.Process] = []

    async def start(agent: FakeAgent, **env: str) -> ExecutorProcess:
        sandbox = tmp_path / "sandbox"
        sandbox.mkdir(exist_ok=True)
        with open(sandbox / "stdout", "ab") as out, open(sandbox / "stderr", "ab") as err:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mesilla.executor.command",
                env={**os.environ, **agent.environ(MESOS_SANDBOX=str(sandbox), **env)},
                cwd=sandbox, stdout=out, stderr=err, start_new_session=True,
            )  # fmt: skip
        started.append(process)
        await asyncio.wait_for(agent.subscribed.wait(), 30)
        return ExecutorProcess(process, sandbox)

    yield start
    for process in started:
        # The executor leads its session; its task has a process group of its own in it.
        for leftover in session_processes(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(leftover.pid, signal.SIGKILL)
        await process.wait()


async def updates(agent: FakeAgent, count: int) -> list[dict[str, Any]]:
    return [await agent.next_update() for _ in range(count)]


def states(statuses: list[dict[str, Any]]) -> list[str]:
    return [s["state"] for s in statuses]


async def wait_for_file(path: Any) -> str:
    for _ in range(3000):
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


async def test_task_finishes(agent: FakeAgent, start_executor: Any) -> None:
    executor = await start_executor(agent)
    agent.send(launch_event("t1", {"value": "echo hello from $PWD"}))
    got = await updates(agent, 3)
    assert states(got) == ["TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"]
    running = got[1]
    assert running["container_status"]["container_id"] == CONTAINER_ID
    assert running["container_status"]["executor_pid"] == executor.process.pid
    assert got[2]["message"] == "Command exited with status 0"
    assert all(s["source"] == "SOURCE_EXECUTOR" for s in got)
    assert len({s["uuid"] for s in got}) == 3
    assert await executor.exit_code() == 0
    assert (executor.sandbox / "stdout").read_text() == f"hello from {executor.sandbox}\n"


async def test_task_fails_with_status(agent: FakeAgent, start_executor: Any) -> None:
    executor = await start_executor(agent)
    agent.send(launch_event("t1", {"value": "exit 3"}))
    got = await updates(agent, 3)
    assert got[2]["state"] == "TASK_FAILED"
    assert got[2]["message"] == "Command exited with status 3"
    assert await executor.exit_code() == 0


async def test_task_terminated_by_signal(agent: FakeAgent, start_executor: Any) -> None:
    await start_executor(agent)
    agent.send(launch_event("t1", {"value": "kill -USR1 $$"}))
    got = await updates(agent, 3)
    assert got[2]["state"] == "TASK_FAILED"
    assert got[2]["message"] == "Command terminated with signal User defined signal 1"


async def test_non_shell_command_and_task_environment(
    agent: FakeAgent, start_executor: Any
) -> None:
    executor = await start_executor(agent)
    command = {
        "shell": False,
        "value": "/bin/sh",
        "arguments": ["my-name", "-c", 'echo "$0 $GREETING" > out'],
        "environment": {"variables": [{"name": "GREETING", "value": "hi"}]},
    }
    agent.send(launch_event("t1", command))
    got = await updates(agent, 3)
    assert got[2]["state"] == "TASK_FINISHED"
    assert (executor.sandbox / "out").read_text() == "my-name hi\n"


async def test_bad_command_fails_the_task(agent: FakeAgent, start_executor: Any) -> None:
    await start_executor(agent)
    agent.send(launch_event("t1", {"shell": False, "value": "/no/such/program"}))
    got = await updates(agent, 2)
    assert states(got) == ["TASK_STARTING", "TASK_FAILED"]
    assert "/no/such/program" in got[1]["message"]


async def test_kill_escalates_to_sigkill_after_grace(agent: FakeAgent, start_executor: Any) -> None:
    executor = await start_executor(agent)
    script = "trap '' TERM; echo $$ > pid; while :; do sleep 0.05; done"
    agent.send(
        launch_event(
            "t1", {"value": script}, kill_policy={"grace_period": {"nanoseconds": 60 * 10**9}}
        )
    )
    assert states(await updates(agent, 2)) == ["TASK_STARTING", "TASK_RUNNING"]
    await wait_for_file(executor.sandbox / "pid")
    agent.send(kill_event("t1", grace_secs=0.3))  # KILL's policy beats the task's
    agent.send(kill_event("t1", grace_secs=0.3))  # a second KILL changes nothing
    got = await updates(agent, 2)
    assert states(got) == ["TASK_KILLING", "TASK_KILLED"]
    assert got[1]["message"] == "Command terminated with signal Killed"
    assert await executor.exit_code() == 0
    assert agent.updates.empty()


async def test_kill_without_killing_capability(unused_port: int, start_executor: Any) -> None:
    agent = FakeAgent(unused_port)
    await agent.start()
    try:
        executor = await start_executor(agent)
        agent.send(launch_event("t1", {"value": "echo $$ > pid; exec sleep 1000"}))
        await updates(agent, 2)
        await wait_for_file(executor.sandbox / "pid")
        agent.send(kill_event("t1"))
        got = await agent.next_update()
        assert got["state"] == "TASK_KILLED"
        assert got["message"] == "Command terminated with signal Terminated"
        assert await executor.exit_code() == 0
    finally:
        await agent.stop()


async def test_shutdown_kills_the_task(agent: FakeAgent, start_executor: Any) -> None:
    executor = await start_executor(agent)
    agent.send(launch_event("t1", {"value": "exec sleep 1000"}))
    await updates(agent, 2)
    agent.send({"type": "SHUTDOWN"})
    got = await updates(agent, 2)
    assert states(got) == ["TASK_KILLING", "TASK_KILLED"]
    assert await executor.exit_code() == 0


async def test_resubscribe_resends_unacknowledged_updates_and_tasks(
    agent: FakeAgent, start_executor: Any
) -> None:
    agent.auto_ack = False
    executor = await start_executor(agent)
    agent.send(launch_event("t1", {"value": "while [ ! -e go ]; do sleep 0.02; done"}))
    first = await updates(agent, 2)
    agent.disconnect()  # the agent restarts
    await asyncio.wait_for(agent.subscribed.wait(), 30)
    resent = agent.subscribes[-1]
    assert [u["status"]["uuid"] for u in resent["unacknowledged_updates"]] == [
        s["uuid"] for s in first
    ]
    assert [t["task_id"]["value"] for t in resent["unacknowledged_tasks"]] == ["t1"]
    for status in first:
        agent.acknowledge(status)
    (executor.sandbox / "go").touch()
    final = await agent.next_update()
    assert final["state"] == "TASK_FINISHED"
    agent.disconnect()
    await asyncio.wait_for(agent.subscribed.wait(), 30)
    # Acknowledged updates and tasks are not sent again; the final one is.
    again = agent.subscribes[-1]
    assert [u["status"]["uuid"] for u in again["unacknowledged_updates"]] == [final["uuid"]]
    assert again["unacknowledged_tasks"] == []
    agent.acknowledge(final)
    assert await executor.exit_code() == 0


async def test_gives_up_after_recovery_timeout_and_kills_task(
    agent: FakeAgent, start_executor: Any
) -> None:
    executor = await start_executor(agent, MESOS_RECOVERY_TIMEOUT="500ms")
    agent.send(launch_event("t1", {"value": "echo $$ > pid; exec sleep 1000"}))
    await updates(agent, 2)
    task_pid = int(await wait_for_file(executor.sandbox / "pid"))
    await agent.stop()
    assert await executor.exit_code() == 0
    with pytest.raises(ProcessLookupError):
        os.killpg(task_pid, 0)


async def test_exits_on_disconnection_without_checkpointing(
    agent: FakeAgent, start_executor: Any
) -> None:
    executor = await start_executor(agent, MESOS_CHECKPOINT="0")
    agent.send(launch_event("t1", {"value": "echo $$ > pid; exec sleep 1000"}))
    await updates(agent, 2)
    task_pid = int(await wait_for_file(executor.sandbox / "pid"))
    agent.disconnect()
    assert await executor.exit_code() == 0
    with pytest.raises(ProcessLookupError):
        os.killpg(task_pid, 0)


async def test_acknowledgement_before_the_call_returns(
    agent: FakeAgent, start_executor: Any
) -> None:
    agent.delay_update_response = 0.5
    executor = await start_executor(agent)
    agent.send(launch_event("t1", {"value": "true"}))
    assert states(await updates(agent, 3))[-1] == "TASK_FINISHED"
    # The terminal update's acknowledgement came before its 202: the executor
    # still exits on it, not after its bounded wait (longer than exit_code's).
    assert await executor.exit_code() == 0


async def test_failing_health_check_kills_the_task(agent: FakeAgent, start_executor: Any) -> None:
    executor = await start_executor(agent)
    health_check = {
        "type": "COMMAND",
        "command": {"value": "test -e healthy"},
        "delay_seconds": 0,
        "interval_seconds": 0.1,
        "grace_period_seconds": 0,
        "consecutive_failures": 2,
    }
    agent.send(launch_event("t1", {"value": "exec sleep 1000"}, health_check=health_check))
    got = await updates(agent, 6)
    assert states(got) == ["TASK_STARTING", "TASK_RUNNING", "TASK_RUNNING", "TASK_RUNNING",
                           "TASK_KILLING", "TASK_KILLED"]  # fmt: skip
    for status in got[2:4]:
        assert status["healthy"] is False
        assert status["reason"] == "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
    assert got[5]["healthy"] is False
    assert await executor.exit_code() == 0


async def test_passing_tcp_health_check(agent: FakeAgent, start_executor: Any) -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await start_executor(agent)
        health_check = {"type": "TCP", "tcp": {"port": port}, "delay_seconds": 0,
                        "interval_seconds": 0.1}  # fmt: skip
        agent.send(launch_event("t1", {"value": "exec sleep 1000"}, health_check=health_check))
        got = await updates(agent, 3)
        assert got[2]["state"] == "TASK_RUNNING"
        assert got[2]["healthy"] is True
        agent.send(kill_event("t1"))
        assert states(await updates(agent, 2)) == ["TASK_KILLING", "TASK_KILLED"]
    finally:
        server.close()
        await server.wait_closed()


async def test_command_check_reports_its_exit_code_on_change(
    agent: FakeAgent, start_executor: Any
) -> None:
    await start_executor(agent)
    check = {
        "type": "COMMAND",
        "command": {"command": {"value": "if [ -e two ]; then exit 2; fi; touch two; exit 1"}},
        "delay_seconds": 0,
        "interval_seconds": 0.1,
    }
    agent.send(launch_event("t1", {"value": "exec sleep 1000"}, check=check))
    got = await updates(agent, 4)
    assert [s.get("check_status") for s in got[2:]] == [
        {"type": "COMMAND", "command": {"exit_code": 1}},
        {"type": "COMMAND", "command": {"exit_code": 2}},
    ]
    assert {s["reason"] for s in got[2:]} == {"REASON_TASK_CHECK_STATUS_UPDATED"}
    agent.send(kill_event("t1"))
    assert states(await updates(agent, 2)) == ["TASK_KILLING", "TASK_KILLED"]
