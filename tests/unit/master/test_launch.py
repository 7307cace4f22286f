"""A LAUNCH_GROUP through the master's parts, without HTTP: subscribe, offer, accept, run.

The framework's and the agent's streams are recording fakes below the
interface under test (`EventStream.send` / `close`); everything else is the
real master on an in-memory registry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest

from mesilla.common.flags import parse
from mesilla.common.resources import Resources
from mesilla.master import offers as offers_module
from mesilla.master.agent import Agent
from mesilla.master.framework import Framework
from mesilla.master.main import MASTER_FLAGS
from mesilla.master.master import Master
from mesilla.master.registry import InMemoryRegistry
from mesilla.v1 import internal
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import AgentInfo, FrameworkInfo, Operation, TaskState


class Recording:
    """A stream that keeps what the master sends."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.closed = False

    async def send(self, event: Any) -> bool:
        if self.closed:
            return False
        self.events.append(event)
        return True

    def close(self) -> None:
        self.closed = True

    def of_type(self, name: str) -> list[Any]:
        return [e for e in self.events if e.type.value == name]


@pytest.fixture
async def master(tmp_path: Any) -> AsyncIterator[Master]:
    flags = parse(MASTER_FLAGS, [f"--work_dir={tmp_path}", "--allocation_interval=1hrs"], environ={})
    m = Master(flags, InMemoryRegistry())
    await m.start()
    yield m
    await m.stop()


async def until(predicate: Callable[[], object]) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), 10)


def group_operation(agent_id: str) -> Operation:
    task = {
        "agent_id": {"value": agent_id},
        "resources": Resources.parse("cpus:0.5;mem:64").to_list(),
        "command": {"value": "sleep 1000"},
    }
    return msgspec.convert(
        {
            "type": "LAUNCH_GROUP",
            "launch_group": {
                "executor": {
                    "executor_id": {"value": "pod"},
                    "type": "DEFAULT",
                    "resources": Resources.parse("cpus:0.1;mem:32;disk:10").to_list(),
                },
                "task_group": {
                    "tasks": [
                        {"name": name, "task_id": {"value": name}, **task} for name in ("web", "sidecar")
                    ]
                },
            },
        },
        Operation,
    )


async def offered(master: Master) -> tuple[Agent, Recording, Framework, Recording]:
    """An agent and a framework, registered on recording streams, and an offer between them."""
    agent_stream = Recording()
    resources = Resources.parse("cpus:4;mem:1024;disk:1024").to_list()
    agent = await master.agent_links.register(
        agent_stream,  # type: ignore[arg-type]
        "agent-stream",
        internal.Register(agent_info=AgentInfo(hostname="h", port=5051, resources=resources)),
        "127.0.0.1",
    )
    assert agent is not None
    framework_stream = Recording()
    framework = await master.framework_streams.subscribe(
        framework_stream,  # type: ignore[arg-type]
        "framework-stream",
        sched.Subscribe(framework_info=FrameworkInfo(user="u", name="pods")),
    )
    assert framework is not None and framework.connected
    master.allocator.allocate()
    await until(lambda: framework_stream.of_type("OFFERS"))
    return agent, agent_stream, framework, framework_stream


async def test_a_task_group_goes_from_the_offer_to_its_agent(master: Master) -> None:
    agent, agent_stream, framework, _ = await offered(master)
    [offer_id] = list(framework.offers)
    await master.launcher.accept(
        framework,
        sched.Accept(offer_ids=[master.offers[offer_id].id], operations=[group_operation(agent.id)]),
    )

    assert not master.offers and not framework.offers and not agent.offers
    [run] = agent_stream.of_type("RUN_TASK_GROUP")
    assert [t.task_id.value for t in run.run_task_group.task_group.tasks] == ["web", "sidecar"]
    assert run.run_task_group.executor_info.framework_id.value == framework.id
    # Both tasks and their executor are in the book, on both sides.
    assert set(framework.tasks) == set(agent.tasks[framework.id]) == {"web", "sidecar"}
    assert all(t.state is TaskState.TASK_STAGING for t in framework.tasks.values())
    assert set(agent.executors[framework.id]) == set(framework.executors[agent.id]) == {"pod"}
    assert master.counters["master/messages_accept"] == 1


async def test_an_invalid_group_is_answered_task_error_and_keeps_nothing(master: Master) -> None:
    agent, agent_stream, framework, framework_stream = await offered(master)
    operation = group_operation(agent.id)
    assert operation.launch_group is not None
    operation.launch_group.executor.resources = []  # no disk: below the minimum
    [offer] = framework.offers.values()
    await master.launcher.accept(framework, sched.Accept(offer_ids=[offer.id], operations=[operation]))

    errors = [e.update.status for e in framework_stream.of_type("UPDATE")]
    assert [(s.task_id.value, s.state, s.reason.value) for s in errors] == [
        ("web", TaskState.TASK_ERROR, "REASON_TASK_GROUP_INVALID"),
        ("sidecar", TaskState.TASK_ERROR, "REASON_TASK_GROUP_INVALID"),
    ]
    assert (errors[0].message or "").startswith("Executor pod needs")
    assert not framework.tasks and not agent.tasks and not agent.executors
    assert not agent_stream.of_type("RUN_TASK_GROUP")


async def two_agents_and_a_framework(master: Master) -> tuple[list[Agent], Framework, Recording]:
    resources = Resources.parse("cpus:4;mem:1024").to_list()
    agents = []
    for name in ("a", "b"):
        agent = await master.agent_links.register(
            Recording(),  # type: ignore[arg-type]
            f"stream-{name}",
            internal.Register(agent_info=AgentInfo(hostname=name, port=5051, resources=resources)),
            "127.0.0.1",
        )
        assert agent is not None
        agents.append(agent)
    framework_stream = Recording()
    framework = await master.framework_streams.subscribe(
        framework_stream,  # type: ignore[arg-type]
        "framework-stream",
        sched.Subscribe(framework_info=FrameworkInfo(user="u", name="f")),
    )
    assert framework is not None

    return agents, framework, framework_stream


@pytest.mark.parametrize("gone", ["before its offer is made", "once its offer is booked, before it is sent"])
async def test_offers_are_made_a_slice_at_a_time_and_skip_an_agent_gone_meanwhile(
    master: Master, monkeypatch: pytest.MonkeyPatch, gone: str
) -> None:
    # A slice of no time: the offerer hands the loop back before each agent.
    monkeypatch.setattr(offers_module, "SLICE", 0.0)
    agents, framework, framework_stream = await two_agents_and_a_framework(master)
    allocations = master.allocator.allocate()
    assert set(allocations[framework.id]) == {a.id for a in agents}
    [first] = [a for a in agents if a.id == next(iter(allocations[framework.id]))]
    [second] = [a for a in agents if a is not first]
    await asyncio.sleep(0)  # the offerer has started and handed the loop back
    if gone.startswith("before"):
        lost, kept = second, first
    else:
        await asyncio.sleep(0)  # it booked the first agent's offer and handed the loop back
        assert first.offers and not framework_stream.of_type("OFFERS")
        lost, kept = first, second
    await master.agent_links.mark_unreachable(lost)
    await until(lambda: framework_stream.of_type("OFFERS"))

    [event] = framework_stream.of_type("OFFERS")
    assert [o.agent_id.value for o in event.offers.offers] == [kept.id]
    assert set(master.offers) == {o.id.value for o in event.offers.offers}
    # What the gone agent had been allocated went back to the allocator, and its
    # framework, never told of an offer for it, is told of no rescinding either.
    assert lost.id not in master.allocator.allocation(framework.id)
    assert not framework_stream.of_type("RESCIND")
