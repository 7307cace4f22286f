"""The agent's link to the master: PONG to each PING, re-registration after a lost stream or
when the master's pings stop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from mesilla.v1.internal import AgentCallType, AgentEvent, AgentEventType, RunTask
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    FrameworkID,
    FrameworkInfo,
    TaskID,
    TaskInfo,
)
from tests.integration.agent_fake_master import AgentProcess, FakeMaster

pytestmark = [pytest.mark.integration]

FRAMEWORK = FrameworkInfo(user="root", name="link", id=FrameworkID(value="fw-link"))


@pytest.fixture
async def master() -> AsyncIterator[FakeMaster]:
    m = FakeMaster(ping_interval=0.2)
    await m.start()
    yield m
    await m.stop()


@pytest.fixture
async def agent_proc(master: FakeMaster, tmp_path: Any) -> AsyncIterator[AgentProcess]:
    proc = AgentProcess(master, str(tmp_path / "work"), str(tmp_path / "run"))
    await proc.start()
    await master.wait_for(lambda: master.registers)
    task = TaskInfo(
        name="l",
        task_id=TaskID(value="t-link"),
        agent_id=AgentID(value=master.agent_id or ""),
        command=CommandInfo(value="sleep 1000"),
    )
    await master.send(
        AgentEvent(
            type=AgentEventType.RUN_TASK, run_task=RunTask(framework_info=FRAMEWORK, task=task)
        )
    )
    await master.wait_update("t-link", "TASK_RUNNING")
    yield proc
    await proc.stop()


def _reregistration(master: FakeMaster) -> Any:
    return master.registers[1].register if len(master.registers) > 1 else None


async def test_lost_stream_leads_to_reregistration_with_tasks(
    master: FakeMaster, agent_proc: AgentProcess
) -> None:
    master.drop_stream()  # as a master restart would
    register = await master.wait_for(lambda: _reregistration(master))
    assert register.agent_info.id == AgentID(value=master.agent_id)
    assert [t.task_id.value for t in register.tasks] == ["t-link"]
    assert [f.id.value for f in register.frameworks] == ["fw-link"]
    assert register.tasks[0].state.value == "TASK_RUNNING"


async def test_agent_answers_each_ping_with_a_pong(
    master: FakeMaster, agent_proc: AgentProcess
) -> None:
    def pongs() -> list[Any]:
        return [c for c in master.calls if c.type is AgentCallType.PONG]

    # Pings over twice the announced total ping timeout: each answered, the link never dropped.
    await master.wait_for(lambda: len(pongs()) > 2 * FakeMaster.MAX_PING_TIMEOUTS)
    assert all(c.agent_id == AgentID(value=master.agent_id) for c in pongs())
    assert _reregistration(master) is None


async def test_stopped_pings_lead_to_reregistration(
    master: FakeMaster, agent_proc: AgentProcess
) -> None:
    master.pings = False
    register = await master.wait_for(lambda: _reregistration(master))
    assert register.agent_info.id == AgentID(value=master.agent_id)
