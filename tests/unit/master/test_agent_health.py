"""The master's health checks of agents (Mesos's `SlaveObserver`), without HTTP.

Agents register through `AgentLinks.register` on a recording stream, a fake
below the interface under test that can answer each PING with a PONG. Pings are
short; every assertion is about counts and states, none about time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from mesilla.common.flags import FlagError, parse
from mesilla.common.resources import Resources
from mesilla.master.agent import Agent
from mesilla.master.main import MASTER_FLAGS, validate_ping_flags
from mesilla.master.master import Master
from mesilla.master.registry import AgentMark, InMemoryRegistry
from mesilla.master.tasks import new_task_record
from mesilla.v1 import internal
from mesilla.v1.mesos import (
    AgentID,
    AgentInfo,
    CommandInfo,
    FrameworkCapability,
    FrameworkID,
    FrameworkInfo,
    TaskID,
    TaskInfo,
    TaskState,
)

MAX_PINGS = 3
PING = internal.AgentEventType.PING


class AgentStream:
    """What the master sends one agent; `answer` (if set) is its PONG to each PING,
    delivered on the next loop iteration as from the network."""

    def __init__(self) -> None:
        self.events: list[internal.AgentEvent] = []
        self.closed = False
        self.answer: Callable[[], None] | None = None
        #: The first this-many pings go unanswered even with `answer` set.
        self.ignore = 0

    @property
    def pings(self) -> int:
        return sum(e.type is PING for e in self.events)

    async def send(self, event: internal.AgentEvent) -> bool:
        if self.closed:
            return False
        self.events.append(event)
        if event.type is PING and self.answer is not None and self.pings > self.ignore:
            asyncio.get_running_loop().call_soon(self.answer)
        return True

    def close(self) -> None:
        self.closed = True


@pytest.fixture
async def master(tmp_path: Any) -> AsyncIterator[Master]:
    flags = parse(
        MASTER_FLAGS,
        [
            f"--work_dir={tmp_path}",
            "--agent_ping_timeout=20ms",
            f"--max_agent_ping_timeouts={MAX_PINGS}",
        ],
        environ={},
    )
    m = Master(flags, InMemoryRegistry())
    await m.start()
    yield m
    await m.stop()


async def register(
    master: Master, stream: AgentStream, agent_id: str | None = None
) -> Agent:
    info = AgentInfo(
        hostname="h",
        port=5051,
        id=AgentID(value=agent_id) if agent_id else None,
        resources=Resources.parse("cpus:4;mem:1024").to_list(),
    )
    agent = await master.agent_links.register(
        stream,  # type: ignore[arg-type]
        f"stream-{len(stream.events)}-{id(stream)}",
        internal.Register(agent_info=info),
        "127.0.0.1",
    )
    assert agent is not None
    return agent


def answering(master: Master, stream: AgentStream, agent: Agent) -> None:
    stream.answer = lambda: master.agent_links.pong(agent)


async def until(predicate: Callable[[], object]) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), 10)


def running_task(master: Master, agent: Agent, partition_aware: bool) -> Any:
    name = "aware" if partition_aware else "plain"
    capabilities = (
        [FrameworkCapability(type="PARTITION_AWARE")] if partition_aware else []
    )
    framework = master.book.add_framework(
        name,
        FrameworkInfo(
            user="u", name=name, id=FrameworkID(value=name), capabilities=capabilities
        ),
    )
    info = TaskInfo(
        name=name,
        task_id=TaskID(value=f"{name}-task"),
        agent_id=AgentID(value=agent.id),
        resources=Resources.parse("cpus:1;mem:128").to_list(),
        command=CommandInfo(value="sleep 1000"),
    )
    record = new_task_record(framework, info)
    master.book.add_task(record)
    return framework, record


async def test_registered_announces_the_total_ping_timeout(master: Master) -> None:
    stream = AgentStream()
    await register(master, stream)
    registered = stream.events[0]
    assert registered.type is internal.AgentEventType.REGISTERED
    assert registered.registered is not None
    assert registered.registered.connection.total_ping_timeout_seconds == pytest.approx(
        0.02 * MAX_PINGS
    )


async def test_an_agent_that_answers_every_ping_stays(master: Master) -> None:
    stream = AgentStream()
    agent = await register(master, stream)
    answering(master, stream, agent)
    await until(lambda: stream.pings >= 3 * MAX_PINGS)
    assert master.agents.get(agent.id) is agent and agent.connected
    assert agent.ping_timeouts == 0 and not stream.closed
    assert master.counters["master/slave_unreachable_completed"] == 0


async def test_a_late_pong_forgives_the_pings_missed_before(master: Master) -> None:
    stream = AgentStream()
    agent = await register(master, stream)
    stream.ignore = MAX_PINGS - 1  # one more and it would be unreachable
    answering(master, stream, agent)
    await until(lambda: stream.pings >= 3 * MAX_PINGS)
    assert master.agents.get(agent.id) is agent and agent.ping_timeouts == 0
    assert master.counters["master/slave_unreachable_completed"] == 0


async def test_a_hung_agent_is_unreachable_after_max_unanswered_pings(
    master: Master,
) -> None:
    stream = AgentStream()  # the stream stays open but nothing answers
    agent = await register(master, stream)
    aware, aware_task = running_task(master, agent, partition_aware=True)
    plain, plain_task = running_task(master, agent, partition_aware=False)

    await until(lambda: agent.id not in master.agents)
    assert stream.pings == MAX_PINGS and stream.closed
    assert agent.id in master.unreachable_agents
    state = await master.registry.recover()
    assert state.agents[agent.id].mark is AgentMark.UNREACHABLE
    # PARTITION_AWARE frameworks hear TASK_UNREACHABLE, others TASK_LOST; both tasks
    # wait as unreachable for the agent to come back.
    assert aware_task.statuses[-1].state is TaskState.TASK_UNREACHABLE
    assert plain_task.statuses[-1].state is TaskState.TASK_LOST
    assert aware_task.task_id.value in aware.unreachable_tasks
    assert plain_task.task_id.value in plain.unreachable_tasks
    assert master.counters["master/slave_unreachable_scheduled"] == 1
    assert master.counters["master/slave_unreachable_completed"] == 1


async def test_a_disconnected_agent_is_unreachable_after_max_ping_timeouts(
    master: Master,
) -> None:
    stream = AgentStream()
    agent = await register(master, stream)
    answering(master, stream, agent)
    assert agent.stream_id is not None
    master.agent_links.disconnected(agent, agent.stream_id)
    assert stream.closed and not agent.connected
    await until(lambda: agent.id not in master.agents)
    assert agent.id in master.unreachable_agents


async def test_reregistration_forgives_pings_missed_while_away(tmp_path: Any) -> None:
    flags = parse(
        MASTER_FLAGS,
        [f"--work_dir={tmp_path}", "--agent_ping_timeout=20ms", "--max_agent_ping_timeouts=1000"],
        environ={},
    )
    master = Master(flags, InMemoryRegistry())
    await master.start()
    try:
        first = AgentStream()
        agent = await register(master, first)
        observer = agent.observer
        assert agent.stream_id is not None
        master.agent_links.disconnected(agent, agent.stream_id)
        await until(lambda: agent.ping_timeouts >= 2)

        second = AgentStream()
        again = await register(master, second, agent.id)
        answering(master, second, again)
        assert again is agent and agent.connected and agent.ping_timeouts == 0
        await until(lambda: second.pings >= 2)
        assert agent.observer is observer  # one observer per agent, across streams
        assert agent.ping_timeouts == 0
    finally:
        await master.stop()


@pytest.mark.parametrize(
    "argv",
    [
        ["--agent_ping_timeout=0secs"],
        ["--agent_ping_timeout=16mins"],
        ["--max_agent_ping_timeouts=0"],
    ],
)
def test_ping_flags_out_of_range_are_refused(argv: list[str], tmp_path: Any) -> None:
    flags = parse(MASTER_FLAGS, [f"--work_dir={tmp_path}", *argv], environ={})
    with pytest.raises(FlagError):
        validate_ping_flags(flags)


async def test_a_reregistration_before_the_disconnection_was_seen_disconnects_first(
    master: Master,
) -> None:
    # An agent killed and restarted at once: its new REGISTER may come before the master
    # sees the old stream close. The outcome is the same either way: a framework without
    # checkpointing loses its task as disconnected, and the old stream is closed.
    first = AgentStream()
    agent = await register(master, first)
    plain, plain_task = running_task(master, agent, partition_aware=False)
    second = AgentStream()
    again = await register(master, second, agent.id)
    assert again is agent and agent.connected and first.closed and not second.closed
    assert plain_task.statuses[-1].state is TaskState.TASK_LOST
    assert plain_task.statuses[-1].reason.value == "REASON_AGENT_DISCONNECTED"
    assert plain_task.task_id.value not in plain.tasks
