"""The agent end to end against a fake master: command tasks, kills, custom executors.

Real processes throughout: the agent runs in-process, executors run through
the real containerizer (posix launcher) and Mesilla's command executor.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from tests.integration.agent_fake_master import AgentProcess, FakeMaster

from mesilla.common.resources import Resources
from mesilla.v1.internal import (
    Acknowledge,
    AgentCallType,
    AgentEvent,
    AgentEventType,
    FrameworkToExecutor,
    KillTask,
    ReconcileTasks,
    RunTask,
    RunTaskGroup,
    Shutdown,
    ShutdownFramework,
    UpdateFramework,
)
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    DurationInfo,
    ExecutorID,
    ExecutorInfo,
    FrameworkCapability,
    FrameworkID,
    FrameworkInfo,
    KillPolicy,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
)

pytestmark = [pytest.mark.integration]


@pytest.fixture
async def master() -> AsyncIterator[FakeMaster]:
    m = FakeMaster()
    await m.start()
    yield m
    await m.stop()


@pytest.fixture
async def agent_proc(master: FakeMaster, tmp_path: Any) -> AsyncIterator[AgentProcess]:
    proc = AgentProcess(master, str(tmp_path / "work"), str(tmp_path / "run"))
    yield proc
    await proc.stop()


FRAMEWORK = FrameworkInfo(
    user="root",
    name="test",
    id=FrameworkID(value="fw-1"),
    checkpoint=True,
    capabilities=[],
)


def command_task(task_id: str, command: str, agent_id: str, **kw: Any) -> TaskInfo:
    return TaskInfo(
        name=task_id,
        task_id=TaskID(value=task_id),
        agent_id=AgentID(value=agent_id),
        command=CommandInfo(value=command),
        **kw,
    )


async def run_task(
    master: FakeMaster, task: TaskInfo, framework: FrameworkInfo = FRAMEWORK
) -> None:
    await master.send(
        AgentEvent(
            type=AgentEventType.RUN_TASK, run_task=RunTask(framework_info=framework, task=task)
        )
    )


async def test_registers_with_its_resources_and_attributes(
    master: FakeMaster, tmp_path: Any
) -> None:
    proc = AgentProcess(
        master, str(tmp_path / "w"), str(tmp_path / "r"), "--attributes=rack:a;level:3"
    )
    try:
        await proc.start()
        await master.wait_for(lambda: master.registers)
        info = master.registers[0].register.agent_info  # type: ignore[union-attr]
        names = {r.name for r in info.resources}
        assert {"cpus", "mem", "disk", "ports"} <= names
        assert {a.name: (a.text.value if a.text else a.scalar.value) for a in info.attributes} == {  # type: ignore[union-attr]
            "rack": "a",
            "level": 3.0,
        }
        assert info.id is None  # a first registration
    finally:
        await proc.stop()


async def test_command_task_runs_to_finished(master: FakeMaster, agent_proc: AgentProcess) -> None:
    agent = await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    await run_task(master, command_task("t1", "echo hello-from-task", master.agent_id or ""))
    running = await master.wait_update("t1", "TASK_RUNNING")
    finished = await master.wait_update("t1", "TASK_FINISHED")
    assert running.status.agent_id.value == master.agent_id
    assert finished.status.executor_id.value == "t1"
    assert finished.status.source.value == "SOURCE_EXECUTOR"
    assert finished.status.container_status.container_id is not None
    executor_dir = os.path.join(
        agent.flags.work_dir,
        "slaves",
        master.agent_id,
        "frameworks",
        "fw-1",
        "executors",
        "t1",
        "runs",
    )
    latest = os.path.join(executor_dir, "latest")
    assert os.path.islink(latest)
    with open(os.path.join(latest, "stdout")) as f:
        assert "hello-from-task" in f.read()
    # The command executor's exit is not reported as an executor of the framework's.
    await asyncio.sleep(0)
    assert not [c for c in master.calls if c.type is AgentCallType.EXITED_EXECUTOR]


async def test_failing_command_task(master: FakeMaster, agent_proc: AgentProcess) -> None:
    await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    await run_task(master, command_task("t-fail", "exit 3", master.agent_id or ""))
    failed = await master.wait_update("t-fail", "TASK_FAILED")
    assert "3" in (failed.status.message or "")


async def test_kill_running_task(master: FakeMaster, agent_proc: AgentProcess) -> None:
    await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    task = command_task(
        "t-kill",
        "sleep 1000",
        master.agent_id or "",
        kill_policy=KillPolicy(grace_period=DurationInfo(nanoseconds=500_000_000)),
    )
    await run_task(master, task)
    await master.wait_update("t-kill", "TASK_RUNNING")
    await master.send(
        AgentEvent(
            type=AgentEventType.KILL_TASK,
            kill_task=KillTask(framework_id=FRAMEWORK.id, task_id=TaskID(value="t-kill")),  # type: ignore[arg-type]
        )
    )
    killed = await master.wait_update("t-kill", "TASK_KILLED")
    assert killed.status.task_id.value == "t-kill"


async def test_kill_unknown_task_is_lost(master: FakeMaster, agent_proc: AgentProcess) -> None:
    await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    await run_task(master, command_task("t-live", "sleep 1000", master.agent_id or ""))
    await master.wait_update("t-live", "TASK_RUNNING")
    await master.send(
        AgentEvent(
            type=AgentEventType.KILL_TASK,
            kill_task=KillTask(framework_id=FRAMEWORK.id, task_id=TaskID(value="nope")),  # type: ignore[arg-type]
        )
    )
    lost = await master.wait_update("nope", "TASK_LOST")
    assert lost.status.reason.value == "REASON_EXECUTOR_TERMINATED"
    assert lost.status.source.value == "SOURCE_AGENT"


async def test_registration_timeout_fails_the_task(master: FakeMaster, tmp_path: Any) -> None:
    proc = AgentProcess(
        master, str(tmp_path / "w"), str(tmp_path / "r"), "--executor_registration_timeout=1secs"
    )
    try:
        await proc.start()
        await master.wait_for(lambda: master.registers)
        executor = ExecutorInfo(
            executor_id=ExecutorID(value="silent"),
            type="CUSTOM",
            command=CommandInfo(value="sleep 1000"),
        )
        task = TaskInfo(
            name="t",
            task_id=TaskID(value="t-silent"),
            agent_id=AgentID(value=master.agent_id or ""),
            executor=executor,
        )
        await run_task(master, task)
        failed = await master.wait_update("t-silent", "TASK_FAILED")
        assert failed.status.reason.value == "REASON_EXECUTOR_REGISTRATION_TIMEOUT"
        exited = await master.wait_for(
            lambda: [c for c in master.calls if c.type is AgentCallType.EXITED_EXECUTOR]
        )
        assert exited[0].exited_executor.executor_id.value == "silent"  # type: ignore[index]
    finally:
        await proc.stop()


CUSTOM_EXECUTOR = textwrap.dedent(
    r"""
    import base64, http.client, json, os, sys, uuid

    env = {k: v for k, v in os.environ.items() if k.startswith("MESOS_")}
    host, port = env["MESOS_AGENT_ENDPOINT"].split(":")
    fid = {"value": env["MESOS_FRAMEWORK_ID"]}
    eid = {"value": env["MESOS_EXECUTOR_ID"]}

    def post(conn, call):
        conn.request("POST", "/api/v1/executor", json.dumps(call),
                     {"Content-Type": "application/json", "Accept": "application/json"})
        return conn.getresponse()

    calls = http.client.HTTPConnection(host, int(port))
    def send(call):
        resp = post(calls, call)
        resp.read()
        assert resp.status == 202, resp.status

    sub = http.client.HTTPConnection(host, int(port))
    stream = post(sub, {"type": "SUBSCRIBE", "framework_id": fid, "executor_id": eid,
                        "subscribe": {}})
    assert stream.status == 200

    def events():
        buf = b""
        while True:
            while b"\n" not in buf:
                chunk = stream.read1(65536)
                if not chunk:
                    return
                buf += chunk
            size, _, buf = buf.partition(b"\n")
            while len(buf) < int(size):
                buf += stream.read1(65536)
            record, buf = buf[: int(size)], buf[int(size):]
            yield json.loads(record)

    def update(task_id, state, data=None):
        status = {"task_id": task_id, "state": state,
                  "uuid": base64.b64encode(uuid.uuid4().bytes).decode()}
        if data is not None:
            status["data"] = base64.b64encode(data).decode()
        send({"type": "UPDATE", "framework_id": fid, "executor_id": eid,
              "update": {"status": status}})

    task = None
    for event in events():
        if event["type"] == "LAUNCH":
            task = event["launch"]["task"]
            report = {"env": env, "cwd": os.getcwd(),
                      "data": task.get("data")}
            update(task["task_id"], "TASK_RUNNING", json.dumps(report).encode())
        elif event["type"] == "MESSAGE":
            send({"type": "MESSAGE", "framework_id": fid, "executor_id": eid,
                  "message": {"data": base64.b64encode(b"pong").decode()}})
            update(task["task_id"], "TASK_FINISHED")
        elif event["type"] == "SHUTDOWN":
            sys.exit(0)
    """
)


async def test_custom_executor_environment_and_messages(
    master: FakeMaster, agent_proc: AgentProcess, tmp_path: Any
) -> None:
    agent = await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    script = tmp_path / "executor.py"
    script.write_text(CUSTOM_EXECUTOR)
    executor = ExecutorInfo(
        executor_id=ExecutorID(value="custom"),
        type="CUSTOM",
        command=CommandInfo(value=f"{sys.executable} {script}"),
    )
    task = TaskInfo(
        name="t",
        task_id=TaskID(value="t-custom"),
        agent_id=AgentID(value=master.agent_id or ""),
        executor=executor,
        data=b"task-data",
    )
    await run_task(master, task)
    running = await master.wait_update("t-custom", "TASK_RUNNING")
    report = json.loads(running.status.data)
    env = report["env"]
    assert env["MESOS_FRAMEWORK_ID"] == "fw-1"
    assert env["MESOS_EXECUTOR_ID"] == "custom"
    assert env["MESOS_AGENT_ENDPOINT"] == agent.endpoint
    assert env["MESOS_SLAVE_PID"] == f"slave(1)@{agent.endpoint}"
    assert env["MESOS_CHECKPOINT"] == "1"
    assert env["MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD"] == "2secs"
    assert os.path.realpath(report["cwd"]) == os.path.realpath(env["MESOS_DIRECTORY"])
    assert base64.b64decode(report["data"]) == b"task-data"
    # The agent fills in what the executor left out.
    assert running.status.agent_id.value == master.agent_id
    assert running.status.container_status.container_id is not None

    await master.send(
        AgentEvent(
            type=AgentEventType.FRAMEWORK_MESSAGE,
            framework_message=FrameworkToExecutor(
                framework_id=FrameworkID(value="fw-1"),
                executor_id=ExecutorID(value="custom"),
                data=b"ping",
            ),
        )
    )
    await master.wait_update("t-custom", "TASK_FINISHED")
    message = await master.wait_for(
        lambda: [c for c in master.calls if c.type is AgentCallType.EXECUTOR_MESSAGE]
    )
    assert message[0].executor_message.data == b"pong"  # type: ignore[index]

    # SHUTDOWN_FRAMEWORK ends the executor; its exit reaches the master.
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


async def test_executor_api_rejects_bad_calls(master: FakeMaster, agent_proc: AgentProcess) -> None:
    await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    url = agent_proc.url + "/api/v1/executor"
    base = {"framework_id": {"value": "fw-x"}, "executor_id": {"value": "e"}}
    async with aiohttp.ClientSession() as session:
        cases = [
            (b"not json", 400, "JSON"),
            (json.dumps({**base, "type": "NOPE"}).encode(), 400, "type"),
            (
                json.dumps({**base, "type": "SUBSCRIBE", "subscribe": {}}).encode(),
                400,
                "Framework cannot be found",
            ),
            (
                json.dumps(
                    {
                        **base,
                        "type": "UPDATE",
                        "update": {"status": {"task_id": {"value": "t"}, "state": "TASK_RUNNING"}},
                    }
                ).encode(),
                400,
                "uuid",
            ),
            (
                json.dumps(
                    {
                        **base,
                        "type": "UPDATE",
                        "update": {
                            "status": {
                                "task_id": {"value": "t"},
                                "state": "TASK_STAGING",
                                "uuid": base64.b64encode(uuid.uuid4().bytes).decode(),
                            }
                        },
                    }
                ).encode(),
                400,
                "TASK_STAGING",
            ),
            (json.dumps({**base, "type": "HEARTBEAT"}).encode(), 202, ""),
        ]
        for body, status, text in cases:
            async with session.post(
                url, data=body, headers={"Content-Type": "application/json"}
            ) as r:
                assert r.status == status, (body, await r.text())
                assert text in await r.text()


async def test_status_updates_are_retried_until_acknowledged(
    master: FakeMaster, agent_proc: AgentProcess
) -> None:
    master.auto_ack = False
    agent = await agent_proc.start(status_update_interval=0.2)
    await master.wait_for(lambda: master.registers)
    await run_task(master, command_task("t-retry", "true", master.agent_id or ""))
    first = await master.wait_update("t-retry", "TASK_STARTING", timeout=30) or None
    head = master.updates("t-retry")[0]
    # The head is resent (same uuid) and nothing behind it goes out before its ack.
    await master.wait_for(
        lambda: (
            len([u for u in master.updates("t-retry") if u.status.uuid == head.status.uuid]) >= 3
        )
    )
    assert {u.status.uuid for u in master.updates("t-retry")} == {head.status.uuid}
    assert first is not None
    # Acknowledge each head in turn until the terminal update is acknowledged.
    acked: list[str] = []
    while True:
        current = master.updates("t-retry")[-1]
        if current.status.state.value in acked:
            await asyncio.sleep(0.05)
            continue
        acked.append(current.status.state.value)
        await master.send(
            AgentEvent(
                type=AgentEventType.ACKNOWLEDGE,
                acknowledge=Acknowledge(
                    framework_id=current.framework_id,
                    task_id=current.status.task_id,
                    uuid=current.status.uuid,
                ),
            )
        )
        if current.status.state.terminal:
            break
        await master.wait_for(
            lambda sent=current: master.updates("t-retry")[-1].status.uuid != sent.status.uuid
        )
    assert acked[-1] == "TASK_FINISHED"
    assert acked[:2] == ["TASK_STARTING", "TASK_RUNNING"]
    # Once acknowledged, the task is completed and its executor and framework are cleaned up.
    await master.wait_for(lambda: not agent.frameworks)
    assert agent.completed_frameworks[-1].completed_executors[-1].completed_tasks[
        -1
    ].state.value == ("TASK_FINISHED")


async def test_reconciling_tasks_unknown_to_the_agent(
    master: FakeMaster, agent_proc: AgentProcess
) -> None:
    await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    await run_task(master, command_task("t-known", "sleep 1000", master.agent_id or ""))
    await master.wait_update("t-known", "TASK_RUNNING")
    await master.send(
        AgentEvent(
            type=AgentEventType.RECONCILE_TASKS,
            reconcile_tasks=ReconcileTasks(
                framework_id=FrameworkID(value="fw-1"),
                task_ids=[TaskID(value="t-known"), TaskID(value="t-forgotten")],
            ),
        )
    )
    lost = await master.wait_update("t-forgotten", "TASK_LOST")
    assert lost.status.reason.value == "REASON_RECONCILIATION"
    assert [u.status.state.value for u in master.updates("t-known")] == [
        "TASK_STARTING",
        "TASK_RUNNING",
    ]
    # A framework the agent never saw: the master's FrameworkInfo says it is partition-aware.
    aware = FrameworkInfo(
        user="root", name="aware", id=FrameworkID(value="fw-aware"),
        capabilities=[FrameworkCapability(type="PARTITION_AWARE")],
    )  # fmt: skip
    await master.send(
        AgentEvent(
            type=AgentEventType.RECONCILE_TASKS,
            reconcile_tasks=ReconcileTasks(
                framework_id=FrameworkID(value="fw-aware"),
                task_ids=[TaskID(value="t-never-here")],
                framework_info=aware,
            ),
        )
    )
    dropped = await master.wait_update("t-never-here", "TASK_DROPPED")
    assert dropped.status.uuid is not None  # reliable: retried until acknowledged


async def test_ended_sandboxes_are_garbage_collected(master: FakeMaster, tmp_path: Any) -> None:
    proc = AgentProcess(master, str(tmp_path / "w"), str(tmp_path / "r"), "--gc_delay=1secs")
    try:
        agent = await proc.start()
        await master.wait_for(lambda: master.registers)
        await run_task(master, command_task("t-gc", "true", master.agent_id or ""))
        await master.wait_update("t-gc", "TASK_FINISHED")
        runs = os.path.join(
            agent.flags.work_dir,
            "slaves",
            master.agent_id,
            "frameworks",
            "fw-1",
            "executors",
            "t-gc",
            "runs",
        )
        run = os.path.realpath(os.path.join(runs, "latest"))
        assert os.path.isdir(run)
        # The directory goes before the removal is counted (the count follows the removal in its thread).
        await master.wait_for(lambda: not os.path.exists(run) and agent.gc.succeeded >= 1)
    finally:
        await proc.stop()


async def test_master_shutdown_ends_executors_and_the_agent(
    master: FakeMaster, agent_proc: AgentProcess
) -> None:
    agent = await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    await run_task(master, command_task("t-down", "sleep 1000", master.agent_id or ""))
    await master.wait_update("t-down", "TASK_RUNNING")
    await master.send(
        AgentEvent(type=AgentEventType.SHUTDOWN, shutdown=Shutdown(message="removed"))
    )
    assert agent_proc.task is not None
    await asyncio.wait_for(agent_proc.task, 30)  # run() returns once everything has ended
    assert agent.containerizer.containers() == []
    assert not os.path.lexists(os.path.join(agent.flags.work_dir, "meta", "slaves", "latest"))


async def test_task_groups_go_to_one_default_executor(
    master: FakeMaster, agent_proc: AgentProcess
) -> None:
    agent = await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    agent_id = AgentID(value=master.agent_id or "")
    executor = ExecutorInfo(
        executor_id=ExecutorID(value="pod"),
        type="DEFAULT",
        resources=Resources.parse("cpus:0.1;mem:32").to_list(),
    )

    def group(*names: str) -> TaskGroupInfo:
        return TaskGroupInfo(
            tasks=[
                TaskInfo(
                    name=n,
                    task_id=TaskID(value=n),
                    agent_id=agent_id,
                    executor=executor,
                    command=CommandInfo(value="sleep 0.5"),
                    resources=Resources.parse("cpus:0.1;mem:16").to_list(),
                )
                for n in names
            ]
        )

    for names in (("g1-a", "g1-b"), ("g2-a",)):
        await master.send(
            AgentEvent(
                type=AgentEventType.RUN_TASK_GROUP,
                run_task_group=RunTaskGroup(
                    framework_info=FRAMEWORK, executor_info=executor, task_group=group(*names)
                ),
            )
        )
        if names[0] == "g1-a":
            await master.wait_update("g1-a", "TASK_RUNNING")
            # The second group goes to the executor already running; its container grows.
            pod = agent.frameworks["fw-1"].executors["pod"]
            assert pod.state.value == "RUNNING"
    for name in ("g1-a", "g1-b", "g2-a"):
        finished = await master.wait_update(name, "TASK_FINISHED")
        assert finished.status.container_status.container_id.parent == pod.container_id
    assert (
        len(
            {
                u.status.container_status.container_id.parent
                for u in master.updates()
                if u.status.container_status
            }
        )
        == 1
    )


async def test_update_framework_reaches_the_agents_record(
    master: FakeMaster, agent_proc: AgentProcess
) -> None:
    agent = await agent_proc.start()
    await master.wait_for(lambda: master.registers)
    await run_task(master, command_task("t-upd", "sleep 1000", master.agent_id or ""))
    await master.wait_update("t-upd", "TASK_RUNNING")
    renamed = FrameworkInfo(
        user="root", name="renamed", id=FrameworkID(value="fw-1"), checkpoint=True
    )
    await master.send(
        AgentEvent(
            type=AgentEventType.UPDATE_FRAMEWORK,
            update_framework=UpdateFramework(framework_info=renamed),
        )
    )
    await master.wait_for(lambda: agent.frameworks["fw-1"].info.name == "renamed")
    # Checkpointed too, so a restarted agent knows the new info.
    path = os.path.join(
        agent.flags.work_dir,
        "meta",
        "slaves",
        master.agent_id,
        "frameworks",
        "fw-1",
        "framework.info",
    )
    with open(path, "rb") as f:
        assert json.loads(f.read())["name"] == "renamed"
    # A message for an executor the agent does not run is dropped and counted.
    await master.send(
        AgentEvent(
            type=AgentEventType.FRAMEWORK_MESSAGE,
            framework_message=FrameworkToExecutor(
                framework_id=FrameworkID(value="fw-1"),
                executor_id=ExecutorID(value="nobody"),
                data=b"x",
            ),
        )
    )
    await master.wait_for(lambda: agent.metrics["invalid_framework_messages"] == 1)


@pytest.mark.root
@pytest.mark.parametrize(("switch_user", "expected_uid"), [("true", "65534"), ("false", "0")])
async def test_tasks_run_as_their_frameworks_user_unless_switch_user_is_off(
    master: FakeMaster, tmp_path: Any, switch_user: str, expected_uid: str
) -> None:
    proc = AgentProcess(
        master, str(tmp_path / "w"), str(tmp_path / "r"), f"--switch_user={switch_user}"
    )
    nobody = FrameworkInfo(user="nobody", name="n", id=FrameworkID(value="fw-n"), checkpoint=True)
    try:
        agent = await proc.start()
        await master.wait_for(lambda: master.registers)
        await run_task(master, command_task("who", "id -u", master.agent_id or ""), nobody)
        await master.wait_update("who", "TASK_FINISHED")
        sandbox = agent.frameworks["fw-n"].executors["who"].directory
        with open(os.path.join(sandbox, "stdout")) as f:
            assert f.read().split()[-1] == expected_uid
        # A framework whose user this host lacks gets its task failed, not run as root.
        ghost = FrameworkInfo(
            user="no-such-user-here", name="g", id=FrameworkID(value="fw-g"), checkpoint=True
        )
        await run_task(master, command_task("ghost", "id -u", master.agent_id or ""), ghost)
        if switch_user == "true":
            failed = await master.wait_update("ghost", "TASK_FAILED")
            assert "no-such-user-here" in (failed.status.message or "")
        else:
            await master.wait_update("ghost", "TASK_FINISHED")
    finally:
        await proc.stop()
