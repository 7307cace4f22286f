"""Regression: a container id that climbs out of the runtime directory removes nothing.

Found by a user: after one container ran, ``REMOVE_CONTAINER`` with
``{"value": "../../../victim"}`` answered 200 and removed
``<runtime_dir>/containers/../../../victim``. Mesos answers 400
(`validateContainerId`), and REMOVE of a container it does not know 404.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.agent_fake_master import AgentProcess, FakeMaster
from tests.integration.traversal import Canary

from mesilla.v1.internal import AgentEvent, AgentEventType, RunTask
from mesilla.v1.mesos import AgentID, CommandInfo, FrameworkID, FrameworkInfo, TaskID, TaskInfo

pytestmark = [pytest.mark.integration]

FRAMEWORK = FrameworkInfo(user="root", name="t", id=FrameworkID(value="fw-1"))


@pytest.fixture
async def ran(tmp_path: Path) -> AsyncIterator[tuple[AgentProcess, Canary, Path]]:
    """An agent under <tmp>/a/b after one container ran, and the canaries beside it."""
    runtime_dir = tmp_path / "a" / "b" / "run"
    work_dir = tmp_path / "a" / "b" / "work"
    canary = Canary(tmp_path, [work_dir, runtime_dir])
    master = FakeMaster()
    await master.start()
    proc = AgentProcess(master, str(work_dir), str(runtime_dir))
    try:
        await proc.start()
        await master.wait_for(lambda: master.registers)
        task = TaskInfo(
            name="once",
            task_id=TaskID(value="once"),
            agent_id=AgentID(value=master.agent_id or ""),
            command=CommandInfo(value="true"),
        )
        await master.send(
            AgentEvent(
                type=AgentEventType.RUN_TASK, run_task=RunTask(framework_info=FRAMEWORK, task=task)
            )
        )
        await master.wait_update("once", "TASK_FINISHED")
        yield proc, canary, runtime_dir
    finally:
        await proc.stop()
        await master.stop()


async def _call(proc: AgentProcess, body: dict[str, Any]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{proc.url}/api/v1", json=body) as response:
            return response.status, await response.text()


@pytest.mark.parametrize("value", ["../../victim", "../../../victim", "../../../../victim"])
@pytest.mark.parametrize("call", ["REMOVE_CONTAINER", "REMOVE_NESTED_CONTAINER"])
async def test_remove_with_a_climbing_container_id_is_refused(
    ran: tuple[AgentProcess, Canary, Path], value: str, call: str
) -> None:
    proc, canary, runtime_dir = ran
    victim = runtime_dir.parent / "victim"  # <runtime_dir>/containers/../../victim
    assert (victim / "precious").exists()
    container_id: dict[str, Any] = {"value": value}
    if call == "REMOVE_NESTED_CONTAINER":
        container_id = {"value": value, "parent": {"value": "p"}}
    status, text = await _call(proc, {"type": call, call.lower(): {"container_id": container_id}})
    assert status == 400, text
    assert f"'{call.lower()}.container_id' is invalid" in text
    assert (victim / "precious").read_text().startswith("canary")
    canary.assert_intact(value)


@pytest.mark.parametrize(
    ("call", "container_id"),
    [
        ("REMOVE_CONTAINER", {"value": "never-launched"}),
        ("REMOVE_NESTED_CONTAINER", {"value": "child", "parent": {"value": "never-launched"}}),
    ],
)
async def test_remove_of_an_unknown_container_is_not_found(
    ran: tuple[AgentProcess, Canary, Path], call: str, container_id: dict[str, Any]
) -> None:
    proc, canary, _ = ran
    status, text = await _call(proc, {"type": call, call.lower(): {"container_id": container_id}})
    assert status == 404, text
    canary.assert_intact(container_id)
