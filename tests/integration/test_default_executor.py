"""The default executor as a real process (`python -m mesilla.executor.default`) against a fake agent.

The fake agent (tests/integration/fake_agent.py) runs every nested container as
a real local process; the executor under test is the unmodified entry point.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tests.integration.fake_agent import FakeAgent, output_files

pytestmark = pytest.mark.integration

Json = dict[str, Any]


def task(name: str, command: str, **extra: Any) -> Json:
    return {
        "name": name,
        "task_id": {"value": name},
        "agent_id": {"value": "agent"},
        "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}}],
        "command": {"value": command, "shell": True},
        **extra,
    }


def seconds(value: float) -> Json:
    return {"nanoseconds": int(value * 1e9)}


class Pod:
    def __init__(self, agent: FakeAgent, process: asyncio.subprocess.Process, sandbox: Path) -> None:
        self.agent = agent
        self.process = process
        self.sandbox = sandbox

    async def exited(self, timeout: float = 30.0) -> int:
        return await asyncio.wait_for(self.process.wait(), timeout)

    def task_sandbox(self, task_id: str) -> Path:
        return self.sandbox / "tasks" / task_id


StartPod = Callable[..., Awaitable[Pod]]


@pytest.fixture
async def start_pod(tmp_path: Path) -> AsyncIterator[StartPod]:
    started: list[tuple[FakeAgent, asyncio.subprocess.Process]] = []

    async def start(*capabilities: str, token: str | None = None, checkpoint: bool = False) -> Pod:
        sandbox = tmp_path / f"executor{len(started)}"
        sandbox.mkdir()
        agent = FakeAgent(sandbox, capabilities=capabilities, token=token)
        await agent.start()
        _, err = output_files(sandbox)
        with err:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mesilla.executor.default",
                env=agent.environment(checkpoint=checkpoint), cwd=sandbox, stderr=err, start_new_session=True,
            )
        started.append((agent, process))
        return Pod(agent, process, sandbox)

    try:
        yield start
    finally:
        for agent, process in started:
            if process.returncode is None:
                process.kill()
            await process.wait()
            await agent.close()


async def test_group_runs_each_task_in_a_nested_container(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    await agent.launch_group(task("a", "echo hello-a; sleep 0.2"), task("b", "echo hello-b"))
    await agent.wait_for(agent.terminal("a", "b"))
    for name in ("a", "b"):
        assert agent.states(name) == ["TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"]
        for update in agent.updates:
            if update["task_id"]["value"] == name:
                assert update["container_status"]["container_id"]["parent"] == agent.container_id
                assert update["executor_id"] == {"value": agent.executor_id}
        # tasks/<id> points at the task's nested sandbox.
        assert (pod.task_sandbox(name) / "stdout").read_text() == f"hello-{name}\n"
    env_names = set()
    for container in agent.containers.values():
        env_names |= {v["name"] for v in container.command["environment"]["variables"]}
    assert "MESOS_CONTAINER_IP" in env_names
    assert await pod.exited() == 0


async def test_failing_task_kills_the_rest_of_its_group(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    await agent.launch_group(task("main", "sleep 600"), task("bad", "sleep 0.2; exit 3"))
    await agent.wait_for(agent.terminal("main", "bad"))
    assert agent.last("bad")["state"] == "TASK_FAILED"
    assert agent.last("bad")["message"] == "Command exited with status 3"
    assert agent.last("main")["state"] == "TASK_KILLED"
    assert await pod.exited() == 0


async def test_kill_of_one_task_kills_the_group_with_task_killing(start_pod: StartPod) -> None:
    pod = await start_pod("TASK_KILLING_STATE")
    agent = pod.agent
    await agent.launch_group(task("a", "sleep 600"), task("b", "sleep 600"))
    await agent.wait_for(agent.running("a", "b"))
    await agent.kill("a")
    await agent.wait_for(agent.terminal("a", "b"))
    for name in ("a", "b"):
        assert agent.states(name)[-2:] == ["TASK_KILLING", "TASK_KILLED"]
    # A second KILL after the end is harmless.
    await agent.kill("a")
    assert await pod.exited() == 0


async def test_kill_escalates_to_sigkill_after_the_grace_period(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    # The shell and its sleep ignore SIGTERM: only SIGKILL ends them.
    await agent.launch_group(
        task("stubborn", "trap '' TERM; echo trapped; sleep 600", kill_policy={"grace_period": seconds(30)})
    )
    await agent.wait_for(agent.reached("stubborn", "TASK_RUNNING"))
    # TASK_RUNNING can come before the shell has set its trap: kill only once it has.
    stdout = pod.task_sandbox("stubborn") / "stdout"
    async with asyncio.timeout(30):
        while not (stdout.exists() and b"trapped" in stdout.read_bytes()):
            await asyncio.sleep(0.05)
    await agent.kill("stubborn", grace_seconds=0.3)
    await agent.kill("stubborn", grace_seconds=0.3)  # while killing: ignored
    await agent.wait_for(agent.terminal("stubborn"))
    last = agent.last("stubborn")
    assert last["state"] == "TASK_KILLED"
    assert last["message"] == "Command terminated with signal SIGKILL"
    assert await pod.exited() == 0


async def test_agent_limitation_is_reported_and_applies_the_group_policy(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    await agent.launch_group(task("hog", "sleep 600"), task("peer", "sleep 600"))
    await agent.wait_for(agent.running("hog", "peer"))
    cid = agent.last("hog")["container_status"]["container_id"]["value"]
    container = agent.containers[cid]
    container.limitation = {
        "state": "TASK_FAILED",
        "reason": "REASON_CONTAINER_LIMITATION_MEMORY",
        "message": "Memory limit exceeded: Requested: 32MB Maximum Used: 33MB",
    }
    os.killpg(container.process.pid, signal.SIGKILL)  # what the OOM killer would do
    await agent.wait_for(agent.terminal("hog", "peer"))
    hog = agent.last("hog")
    assert (hog["state"], hog["reason"]) == ("TASK_FAILED", "REASON_CONTAINER_LIMITATION_MEMORY")
    assert "Memory limit exceeded" in hog["message"]
    assert agent.last("peer")["state"] == "TASK_KILLED"
    assert await pod.exited() == 0


async def test_launch_failure_fails_the_task_and_its_group(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    broken = task("broken", "unused")
    broken["command"] = {"value": "/nonexistent/binary", "shell": False, "arguments": ["binary"]}
    await agent.launch_group(task("ok", "sleep 600"), broken)
    await agent.wait_for(agent.terminal("ok", "broken"))
    assert agent.last("broken")["state"] == "TASK_FAILED"
    assert agent.last("broken")["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
    assert agent.last("ok")["state"] == "TASK_KILLED"
    assert await pod.exited() == 0


async def test_group_launch_cut_by_the_agent_exits_without_updates(start_pod: StartPod) -> None:
    # As Mesos's executor: a launch answer that never came leaves the whole group to the agent.
    pod = await start_pod()
    agent = pod.agent
    agent.cut_launches.add("sleep 601")
    await agent.launch_group(task("a", "sleep 600"), task("b", "sleep 601"), task("c", "sleep 602"))
    assert await pod.exited() == 0
    assert {t: agent.states(t) for t in "abc"} == {t: ["TASK_STARTING"] for t in "abc"}
    assert agent.calls.count("LAUNCH_CONTAINER") == 3


async def test_shutdown_kills_every_task_and_exits(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    await agent.launch_group(task("a", "sleep 600"), task("b", "sleep 600"))
    await agent.launch_group(task("c", "sleep 600"))
    await agent.wait_for(agent.running("a", "b", "c"))
    await agent.shutdown()
    await agent.wait_for(agent.terminal("a", "b", "c"))
    assert {agent.last(t)["state"] for t in "abc"} == {"TASK_KILLED"}
    assert await pod.exited() == 0
    assert all(c.process.returncode is not None for c in agent.containers.values())


async def test_shutdown_without_tasks_exits(start_pod: StartPod) -> None:
    pod = await start_pod()
    await pod.agent.wait_for(lambda: pod.agent.subscriptions == 1)
    await pod.agent.shutdown()
    assert await pod.exited() == 0


async def test_authentication_token_is_sent_on_every_call(start_pod: StartPod) -> None:
    pod = await start_pod(token="secret-token")
    agent = pod.agent
    await agent.launch_group(task("a", "true"))
    await agent.wait_for(agent.terminal("a"))
    assert agent.last("a")["state"] == "TASK_FINISHED"
    assert agent.unauthorized == 0
    assert {"LAUNCH_CONTAINER", "WAIT_CONTAINER"} <= set(agent.calls)
    assert await pod.exited() == 0


async def test_resubscribes_after_losing_the_agent_and_keeps_its_tasks(
    start_pod: StartPod, unused_port: int
) -> None:
    pod = await start_pod(checkpoint=True)
    agent = pod.agent
    health = {"type": "TCP", "tcp": {"port": unused_port}, "grace_period_seconds": 30, **FAST}
    await agent.launch_group(task("a", web_server(unused_port), health_check=health))

    def healthy_reports() -> int:  # a resent update (same uuid) is one report
        return len({
            u.get("uuid") for u in agent.updates
            if u.get("healthy") is True and u.get("reason") == "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
        })  # fmt: skip

    await agent.wait_for(lambda: healthy_reports() == 1)
    agent.drop_subscription()
    await agent.wait_for(lambda: agent.subscriptions == 2)
    # Still managed after the new subscription: a KILL goes through.
    await agent.kill("a")
    await agent.wait_for(agent.terminal("a"))
    assert agent.last("a")["state"] == "TASK_KILLED"
    # As Mesos, checks paused while disconnected resume with what they had reported:
    # the unchanged health is not announced again.
    assert healthy_reports() == 1
    assert await pod.exited() == 0


async def test_max_completion_time_fails_the_task(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    await agent.launch_group(task("slow", "sleep 600", max_completion_time=seconds(0.3)))
    await agent.wait_for(agent.terminal("slow"))
    last = agent.last("slow")
    assert (last["state"], last["reason"]) == ("TASK_FAILED", "REASON_MAX_COMPLETION_TIME_REACHED")
    assert await pod.exited() == 0


# --- restart policy ------------------------------------------------------------------------

# Appends a line to `runs` in the sandbox and exits with the given status once
# the sandbox holds N lines (else status 1); the sandbox must survive restarts
# for the count to grow.
def counting(until: int, then: str) -> str:
    return f"echo run >> runs; [ $(wc -l < runs) -ge {until} ] && {then}; exit 1"


async def test_always_restarts_keeping_the_sandbox(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    policy = {"type": "ALWAYS", "min_restart_delay": seconds(0.05)}
    await agent.launch_group(
        task("loop", "echo run >> runs; exit 0", restart_policy=policy), task("peer", "sleep 600")
    )
    await agent.wait_for(agent.reached("loop", "TASK_RUNNING", 4))
    running = [u for u in agent.updates if u["task_id"]["value"] == "loop" and u["state"] == "TASK_RUNNING"]
    assert "restarted (restart 1)" in running[1]["message"]
    containers = {u["container_status"]["container_id"]["value"] for u in running}
    assert len(containers) == 4  # a new nested container per attempt
    assert agent.removed  # earlier attempts are removed from the agent
    assert len((pod.task_sandbox("loop") / "runs").read_text().splitlines()) >= 3
    # Successful runs never trigger the group policy.
    assert "TASK_KILLED" not in agent.states("peer")
    await agent.kill("loop")
    await agent.wait_for(agent.terminal("loop"))
    assert agent.last("loop")["state"] == "TASK_KILLED"
    # Killing a task with a restart policy leaves its group alone.
    assert agent.states("peer")[-1] == "TASK_RUNNING"
    await agent.kill("peer")
    assert await pod.exited() == 0


async def test_on_failure_restarts_until_success_with_task_restarting(start_pod: StartPod) -> None:
    pod = await start_pod("TASK_RESTARTING_STATE")
    agent = pod.agent
    policy = {"type": "ON_FAILURE", "min_restart_delay": seconds(0.05)}
    await agent.launch_group(task("flaky", counting(3, "exit 0"), restart_policy=policy))
    await agent.wait_for(agent.terminal("flaky"))
    assert agent.states("flaky") == [
        "TASK_STARTING", "TASK_RUNNING",
        "TASK_RESTARTING", "TASK_RUNNING",
        "TASK_RESTARTING", "TASK_RUNNING",
        "TASK_FINISHED",
    ]
    restarting = [u for u in agent.updates if u["state"] == "TASK_RESTARTING"]
    # The backoff doubles from min_restart_delay.
    assert "in 0.05s" in restarting[0]["message"] and "in 0.1s" in restarting[1]["message"]
    assert "restart 1" in restarting[0]["message"]
    assert await pod.exited() == 0


async def test_on_failure_exhausted_fails_and_applies_the_group_policy(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    policy = {"type": "ON_FAILURE", "max_restarts": 2, "min_restart_delay": seconds(0.05)}
    await agent.launch_group(task("doomed", "exit 7", restart_policy=policy), task("peer", "sleep 600"))
    await agent.wait_for(agent.terminal("doomed", "peer"))
    assert agent.states("doomed").count("TASK_RUNNING") == 3
    assert "TASK_RESTARTING" not in agent.states("doomed")  # no capability: RUNNING with a message
    last = agent.last("doomed")
    assert last["state"] == "TASK_FAILED"
    assert "Command exited with status 7" in last["message"] and "after 2 restarts" in last["message"]
    assert agent.last("peer")["state"] == "TASK_KILLED"
    assert await pod.exited() == 0


# --- checks ------------------------------------------------------------------------------------

FAST = {"delay_seconds": 0, "interval_seconds": 0.1, "timeout_seconds": 5}


def web_server(port: int) -> str:
    return f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1"


async def test_http_health_check_passing_and_http_check_status(start_pod: StartPod, unused_port: int) -> None:
    pod = await start_pod()
    agent = pod.agent
    health = {"type": "HTTP", "http": {"port": unused_port, "path": "/"}, "grace_period_seconds": 30, **FAST}
    check = {"type": "HTTP", "http": {"port": unused_port, "path": "/"}, **FAST}
    await agent.launch_group(task("web", web_server(unused_port), health_check=health, check=check))
    await agent.wait_for(lambda: any(u.get("healthy") is True for u in agent.updates))
    await agent.wait_for(
        lambda: any(
            u.get("check_status", {}).get("http", {}).get("status_code") == 200 for u in agent.updates
        )
    )
    healthy = next(u for u in agent.updates if u.get("healthy") is True)
    assert healthy["reason"] == "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
    assert healthy["state"] == "TASK_RUNNING"
    checked = next(u for u in agent.updates if u.get("reason") == "REASON_TASK_CHECK_STATUS_UPDATED")
    assert checked["check_status"]["type"] == "HTTP"
    await agent.kill("web")
    await agent.wait_for(agent.terminal("web"))
    assert await pod.exited() == 0


async def test_tcp_server_reachable_from_a_sibling_and_tcp_health_check(
    start_pod: StartPod, unused_port: int
) -> None:
    pod = await start_pod()
    agent = pod.agent
    health = {"type": "TCP", "tcp": {"port": unused_port}, "grace_period_seconds": 30, **FAST}
    check = {"type": "TCP", "tcp": {"port": unused_port}, **FAST}
    client = (
        f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {unused_port}), 5)\""
    )
    reach = {"type": "ON_FAILURE", "min_restart_delay": seconds(0.1)}
    await agent.launch_group(
        task("server", web_server(unused_port), health_check=health, check=check),
        task("client", client, restart_policy=reach),
    )
    await agent.wait_for(agent.terminal("client"))
    assert agent.last("client")["state"] == "TASK_FINISHED"
    await agent.wait_for(lambda: any(u.get("healthy") is True for u in agent.updates))
    await agent.wait_for(
        lambda: any(u.get("check_status", {}).get("tcp", {}).get("succeeded") is True for u in agent.updates)
    )
    await agent.kill("server")
    assert await pod.exited() == 0


async def test_failing_http_health_check_kills_the_task(start_pod: StartPod, unused_port: int) -> None:
    pod = await start_pod()
    agent = pod.agent
    # http.server answers 404 for a missing file: reachable, but not healthy.
    health = {"type": "HTTP", "http": {"port": unused_port, "path": "/missing"}, "grace_period_seconds": 2,
              "consecutive_failures": 2, **FAST}
    check = {"type": "HTTP", "http": {"port": unused_port, "path": "/missing"}, **FAST}
    await agent.launch_group(task("web", web_server(unused_port), health_check=health, check=check))
    await agent.wait_for(agent.terminal("web"))
    last = agent.last("web")
    assert (last["state"], last["healthy"]) == ("TASK_KILLED", False)
    # The check saw the server answer (404) while the health check counted failures.
    assert any(u.get("check_status", {}).get("http", {}).get("status_code") == 404 for u in agent.updates)
    assert await pod.exited() == 0


async def test_failing_tcp_health_check_kills_the_task_and_its_group(
    start_pod: StartPod, unused_port: int
) -> None:
    pod = await start_pod()
    agent = pod.agent
    health = {
        "type": "TCP",
        "tcp": {"port": unused_port},
        "grace_period_seconds": 0,
        "consecutive_failures": 2,
        **FAST,
    }
    await agent.launch_group(task("sick", "sleep 600", health_check=health), task("peer", "sleep 600"))
    await agent.wait_for(agent.terminal("sick", "peer"))
    sick = agent.last("sick")
    assert (sick["state"], sick["healthy"]) == ("TASK_KILLED", False)
    assert any(u.get("healthy") is False and u["state"] == "TASK_RUNNING" for u in agent.updates)
    assert agent.last("peer")["state"] == "TASK_KILLED"
    assert await pod.exited() == 0


async def test_command_check_and_health_check_run_as_nested_check_containers(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    check = {"type": "COMMAND", "command": {"command": {"value": "exit 3"}}, **FAST}
    health = {"type": "COMMAND", "command": {"value": "true"}, "grace_period_seconds": 30, **FAST}
    await agent.launch_group(task("checked", "sleep 600", check=check, health_check=health))
    await agent.wait_for(
        lambda: any(u.get("check_status", {}).get("command", {}).get("exit_code") == 3 for u in agent.updates)
    )
    await agent.wait_for(lambda: any(u.get("healthy") is True for u in agent.updates))
    assert "LAUNCH_NESTED_CONTAINER_SESSION" in agent.calls
    # Check containers are nested in the task's container and removed after each run.
    assert any(value.startswith("check-") for value in agent.removed)
    await agent.kill("checked")
    await agent.wait_for(agent.terminal("checked"))
    assert await pod.exited() == 0


async def test_command_check_timing_out_is_killed_and_removed(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    check = {"type": "COMMAND", "command": {"command": {"value": "sleep 600"}},
             "delay_seconds": 0, "interval_seconds": 0.1, "timeout_seconds": 0.2}
    await agent.launch_group(task("checked", "sleep 600", check=check))
    # The fake agent refuses to REMOVE a running container: a removed check
    # container was killed and had ended first.
    await agent.wait_for(lambda: any(v.startswith("check-") for v in agent.removed))
    assert all("exit_code" not in u.get("check_status", {}).get("command", {}) for u in agent.updates)
    await agent.kill("checked")
    await agent.wait_for(agent.terminal("checked"))
    assert await pod.exited() == 0


async def test_failing_command_health_check_kills_the_task(start_pod: StartPod) -> None:
    pod = await start_pod()
    agent = pod.agent
    health = {"type": "COMMAND", "command": {"value": "exit 1"}, "grace_period_seconds": 0,
              "consecutive_failures": 1, **FAST}
    await agent.launch_group(task("sick", "sleep 600", health_check=health))
    await agent.wait_for(agent.terminal("sick"))
    assert (agent.last("sick")["state"], agent.last("sick")["healthy"]) == ("TASK_KILLED", False)
    assert await pod.exited() == 0


# --- footprint -------------------------------------------------------------------------------

RSS_BUDGET_KB = 32 * 1024  # what Mesos frameworks reserve for the executor


def peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


async def test_pod_of_ten_checked_tasks_stays_within_the_executor_memory_budget(
    start_pod: StartPod, unused_port: int
) -> None:
    pod = await start_pod()
    agent = pod.agent
    health = {"type": "TCP", "tcp": {"port": unused_port}, "grace_period_seconds": 30, **FAST}
    names = [f"t{i}" for i in range(10)]
    await agent.launch_group(
        task("server", web_server(unused_port), health_check=health),
        *(task(name, "sleep 600", health_check=health) for name in names),
    )
    await agent.wait_for(lambda: sum(1 for u in agent.updates if u.get("healthy") is True) == 11)
    peak = peak_rss_kb(pod.process.pid)
    assert peak < RSS_BUDGET_KB, f"default executor peaked at {peak} kB"
    await agent.shutdown()
    assert await pod.exited() == 0
