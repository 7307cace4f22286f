"""Executor tokens (--authenticate_http_executors): each executor's JWT acts on its own
containers, sandbox and executor calls only, and stops working when its executor ends.

Two frameworks' command tasks run on one agent that authenticates its executor and
read-write realms; framework A's executor token is turned against framework B's
containers, with B's real container ids in hand.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.agent_fake_master import AgentProcess, FakeMaster
from tests.integration.master_harness import until

from mesilla.common import recordio
from mesilla.common.authentication import basic_authorization
from mesilla.common.resources import Resources
from mesilla.v1.internal import AgentEvent, AgentEventType, KillTask, RunTask, RunTaskGroup
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    ContainerID,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    TaskGroupInfo,
    TaskID,
    TaskInfo,
)

pytestmark = [pytest.mark.integration]

OPERATOR = {"Authorization": basic_authorization("ops", "ops-secret")}


class Side:
    def __init__(self, name: str, proc: AgentProcess) -> None:
        self.fid, self.eid = f"fw-{name}", f"task-{name}"
        self.proc = proc

    @property
    def executor(self) -> Any:
        assert self.proc.agent is not None
        return self.proc.agent.frameworks[self.fid].executors[self.eid]

    @property
    def cid(self) -> str:
        return str(self.executor.container_id.value)

    def token(self) -> dict[str, str]:
        assert self.proc.agent is not None and self.proc.agent.executor_tokens is not None
        # What the agent put in this executor's environment (the same claims and key).
        token = self.proc.agent.executor_tokens.sign(self.fid, self.eid, self.cid)
        return {"Authorization": f"Bearer {token}"}


async def _run(master: FakeMaster, side: Side) -> None:
    framework = FrameworkInfo(user="root", name=side.fid, id=FrameworkID(value=side.fid), checkpoint=True)
    task = TaskInfo(
        name=side.eid,
        task_id=TaskID(value=side.eid),
        agent_id=AgentID(value=master.agent_id or ""),
        command=CommandInfo(value="echo own-output; sleep 1000"),
    )
    await master.send(
        AgentEvent(type=AgentEventType.RUN_TASK, run_task=RunTask(framework_info=framework, task=task))
    )
    # TASK_RUNNING came through the executor API: the executor's token passed.
    await master.wait_update(side.eid, "TASK_RUNNING")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[FakeMaster, AgentProcess, Side, Side]]:
    key = tmp_path / "jwt.key"
    key.write_bytes(os.urandom(32))
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({"credentials": [{"principal": "ops", "secret": "ops-secret"}]}))
    master = FakeMaster()
    await master.start()
    proc = AgentProcess(
        master, str(tmp_path / "work"), str(tmp_path / "run"),
        "--authenticate_http_executors", f"--jwt_secret_key={key}",
        "--authenticate_http_readwrite", f"--http_credentials={creds}",
    )
    try:
        await proc.start()
        await master.wait_for(lambda: master.registers)
        a, b = Side("a", proc), Side("b", proc)
        await _run(master, a)
        await _run(master, b)
        yield master, proc, a, b
    finally:
        await proc.stop()
        await master.stop()


async def _call(
    session: aiohttp.ClientSession, proc: AgentProcess, call: dict[str, Any], headers: dict[str, str]
) -> tuple[int, str]:
    assert proc.agent is not None
    async with session.post(f"http://{proc.agent.endpoint}/api/v1", json=call, headers=headers) as r:
        return r.status, await r.text()


def _container_calls(child: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "WAIT_NESTED_CONTAINER", "wait_nested_container": {"container_id": child}},
        {"type": "WAIT_CONTAINER", "wait_container": {"container_id": child}},
        {"type": "ATTACH_CONTAINER_OUTPUT", "attach_container_output": {"container_id": child}},
        {"type": "KILL_NESTED_CONTAINER", "kill_nested_container": {"container_id": child}},
        {"type": "KILL_CONTAINER", "kill_container": {"container_id": child}},
        {"type": "REMOVE_NESTED_CONTAINER", "remove_nested_container": {"container_id": child}},
        {"type": "REMOVE_CONTAINER", "remove_container": {"container_id": child}},
    ]


def _launch(child: dict[str, Any], kind: str = "LAUNCH_NESTED_CONTAINER") -> dict[str, Any]:
    field = kind.lower()
    return {"type": kind, field: {"container_id": child, "command": {"value": "sleep 1000"}}}


async def _attach_input(
    session: aiohttp.ClientSession, proc: AgentProcess, child: dict[str, Any], headers: dict[str, str]
) -> int:
    assert proc.agent is not None
    first = {
        "type": "ATTACH_CONTAINER_INPUT",
        "attach_container_input": {"type": "CONTAINER_ID", "container_id": child},
    }
    async with session.post(
        f"http://{proc.agent.endpoint}/api/v1",
        data=recordio.encode(json.dumps(first).encode()),
        headers={
            **headers,
            "Content-Type": "application/recordio",
            "Message-Content-Type": "application/json",
        },
    ) as r:
        return r.status


async def test_a_token_reaches_its_own_containers_only(
    cluster: tuple[FakeMaster, AgentProcess, Side, Side],
) -> None:
    _master, proc, a, b = cluster
    b_child = {"value": "b-child", "parent": {"value": b.cid}}
    a_child = {"value": "a-child", "parent": {"value": a.cid}}
    async with aiohttp.ClientSession() as s:
        # B's own token starts a child of B's: its real ids are what A will try.
        assert (await _call(s, proc, _launch(b_child), b.token()))[0] == 200
        refused = [
            _launch({"value": "intruder", "parent": {"value": b.cid}}),
            _launch({"value": "intruder", "parent": {"value": b.cid}}, "LAUNCH_CONTAINER"),
            _launch({"value": "intruder", "parent": {"value": b.cid}}, "LAUNCH_NESTED_CONTAINER_SESSION"),
            *_container_calls(b_child),
            # Its executor's own container or another root: not nested under A's.
            {"type": "KILL_CONTAINER", "kill_container": {"container_id": {"value": b.cid}}},
            {"type": "KILL_CONTAINER", "kill_container": {"container_id": {"value": a.cid}}},
            {"type": "READ_FILE", "read_file": {"path": f"{b.executor.directory}/stdout", "offset": 0}},
            {"type": "LIST_FILES", "list_files": {"path": b.executor.directory}},
            {"type": "GET_STATE"},
            {"type": "GET_CONTAINERS"},
        ]
        for call in refused:
            status, text = await _call(s, proc, call, a.token())
            assert status == 403, (call, status, text)
        assert await _attach_input(s, proc, b_child, a.token()) == 403
        # B's child is untouched, still running.
        assert proc.agent is not None
        assert proc.agent.containerizer.config(_id(b_child)) is not None
        assert "intruder" not in json.dumps([str(c) for c in proc.agent.containerizer.containers()])

        # The same calls on A's own tree pass.
        assert (await _call(s, proc, _launch(a_child), a.token()))[0] == 200
        status, text = await _call(
            s,
            proc,
            {"type": "READ_FILE", "read_file": {"path": f"{a.executor.directory}/stdout", "offset": 0}},
            a.token(),
        )
        assert status == 200, text
        assert (
            await _call(
                s, proc, {"type": "LIST_FILES", "list_files": {"path": a.executor.directory}}, a.token()
            )
        )[0] == 200
        status, _ = await _call(
            s,
            proc,
            {"type": "ATTACH_CONTAINER_OUTPUT", "attach_container_output": {"container_id": a_child}},
            a.token(),
        )
        assert status != 403
        for kind in ("KILL_NESTED_CONTAINER", "WAIT_NESTED_CONTAINER", "REMOVE_NESTED_CONTAINER"):
            own = {"type": kind, kind.lower(): {"container_id": a_child}}
            assert (await _call(s, proc, own, a.token()))[0] == 200, kind
        # Operators' credentials are not confined.
        assert (await _call(s, proc, {"type": "GET_STATE"}, OPERATOR))[0] == 200
        assert (
            await _call(
                s,
                proc,
                {"type": "KILL_NESTED_CONTAINER", "kill_nested_container": {"container_id": b_child}},
                OPERATOR,
            )
        )[0] == 200


def _id(doc: dict[str, Any]) -> ContainerID:
    parent = doc.get("parent")
    return ContainerID(value=doc["value"], parent=_id(parent) if parent else None)


async def test_the_executor_api_takes_a_token_for_its_own_executor_only(
    cluster: tuple[FakeMaster, AgentProcess, Side, Side],
) -> None:
    _, proc, a, b = cluster
    assert proc.agent is not None
    url = f"http://{proc.agent.endpoint}/api/v1/executor"
    message = {
        "type": "MESSAGE",
        "framework_id": {"value": b.fid},
        "executor_id": {"value": b.eid},
        "message": {"data": "aGk="},
    }
    async with aiohttp.ClientSession() as s:
        async with s.post(url, json=message, headers=a.token()) as r:
            assert r.status == 403 and "'fid' claim" in await r.text()
        for headers in ({}, OPERATOR, {"Authorization": "Bearer not.a.token"}):
            async with s.post(url, json=message, headers=headers) as r:
                assert r.status == 401
                assert r.headers["WWW-Authenticate"] == 'Bearer realm="mesos-agent-executor"'
        async with s.post(url, json=message, headers=b.token()) as r:
            assert r.status == 202, await r.text()


async def test_a_token_ends_with_its_executor_and_is_never_written_down(
    cluster: tuple[FakeMaster, AgentProcess, Side, Side], tmp_path: Path
) -> None:
    master, proc, a, _ = cluster
    token, a_cid = a.token(), a.cid
    secret = token["Authorization"].split()[1].encode()
    for root in (tmp_path / "work", tmp_path / "run"):
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        assert secret not in f.read(), path
    async with aiohttp.ClientSession() as s:
        own = {"value": "a-late", "parent": {"value": a.cid}}
        await master.send(
            AgentEvent(
                type=AgentEventType.KILL_TASK,
                kill_task=KillTask(framework_id=FrameworkID(value=a.fid), task_id=TaskID(value=a.eid)),
            )
        )
        await master.wait_update(a.eid, "TASK_KILLED")
        await until(
            lambda: proc.agent is not None and not proc.agent.executor_alive(a.fid, a.eid, a_cid),
            "A's executor ended",
        )
        status, text = await _call(s, proc, _launch(own), token)
        assert status == 401 and "has ended" in text


async def test_the_default_executor_runs_a_pod_with_its_token(
    cluster: tuple[FakeMaster, AgentProcess, Side, Side],
) -> None:
    """Its SUBSCRIBE, updates and LAUNCH_NESTED_CONTAINER calls all carry its token."""
    master, _proc, a, _ = cluster
    executor = ExecutorInfo(
        executor_id=ExecutorID(value="pod"),
        type="DEFAULT",
        resources=Resources.parse("cpus:0.1;mem:32").to_list(),
    )
    group = TaskGroupInfo(
        tasks=[
            TaskInfo(
                name="p1", task_id=TaskID(value="p1"), agent_id=AgentID(value=master.agent_id or ""),
                executor=executor, command=CommandInfo(value="true"),
                resources=Resources.parse("cpus:0.1;mem:16").to_list(),
            )
        ]
    )
    framework = FrameworkInfo(user="root", name=a.fid, id=FrameworkID(value=a.fid), checkpoint=True)
    await master.send(
        AgentEvent(
            type=AgentEventType.RUN_TASK_GROUP,
            run_task_group=RunTaskGroup(framework_info=framework, executor_info=executor, task_group=group),
        )
    )
    finished = await master.wait_update("p1", "TASK_FINISHED")
    assert finished.status.container_status.container_id.parent is not None


@pytest.mark.parametrize("principal", ["pod-p", None], ids=["with-principal", "without"])
async def test_an_executor_principal_gets_its_credentials(tmp_path: Path, principal: str | None) -> None:
    """The pods design's ExecutorInfo.principal: its --http_credentials reach the default
    executor, whose agent API calls then pass the read-write realm; without, they are 401."""
    secret = "pod-secret-value"
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({"credentials": [{"principal": "pod-p", "secret": secret}]}))
    master = FakeMaster()
    await master.start()
    proc = AgentProcess(
        master, str(tmp_path / "work"), str(tmp_path / "run"),
        "--authenticate_http_readwrite", f"--http_credentials={creds}",
    )
    try:
        await proc.start()
        await master.wait_for(lambda: master.registers)
        executor = ExecutorInfo(
            executor_id=ExecutorID(value="pod"), type="DEFAULT", principal=principal,
            resources=Resources.parse("cpus:0.1;mem:32").to_list(),
        )
        task = TaskInfo(
            name="p1", task_id=TaskID(value="p1"), agent_id=AgentID(value=master.agent_id or ""),
            executor=executor, command=CommandInfo(value="true"),
            resources=Resources.parse("cpus:0.1;mem:16").to_list(),
        )
        framework = FrameworkInfo(user="root", name="f", id=FrameworkID(value="fw-p"), checkpoint=True)
        await master.send(
            AgentEvent(
                type=AgentEventType.RUN_TASK_GROUP,
                run_task_group=RunTaskGroup(
                    framework_info=framework, executor_info=executor, task_group=TaskGroupInfo(tasks=[task])
                ),
            )
        )
        if principal is not None:
            await master.wait_update("p1", "TASK_FINISHED")
        else:
            failed = await master.wait_update("p1", "TASK_FAILED")
            assert "401" in (failed.status.message or ""), failed.status.message
        for root in (tmp_path / "work", tmp_path / "run"):
            for dirpath, _, names in os.walk(root):
                for name in names:
                    path = os.path.join(dirpath, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        with open(path, "rb") as f:
                            assert secret.encode() not in f.read(), path
    finally:
        await proc.stop()
        await master.stop()
