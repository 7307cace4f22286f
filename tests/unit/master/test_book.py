"""The master's book of the cluster (`mesilla.master.book`): plain calls, no event loop."""

from __future__ import annotations

import pytest

from mesilla.common.resources import Resources
from mesilla.master.agent import Agent
from mesilla.master.book import Book
from mesilla.master.framework import Framework
from mesilla.master.registry import AgentMark, RegisteredAgent, RegistryState
from mesilla.v1.mesos import (
    AgentID,
    AgentInfo,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    Offer,
    OfferID,
    Task,
    TaskID,
    TaskState,
    TaskStatus,
)


def agent_info(agent_id: str = "a") -> AgentInfo:
    return AgentInfo(
        hostname="h", id=AgentID(value=agent_id), resources=Resources.parse("cpus:4;mem:1024").to_list()
    )


@pytest.fixture
def book() -> Book:
    return Book("m", max_completed_frameworks=2, max_completed_tasks=2)


def cluster(book: Book) -> tuple[Framework, Agent]:
    framework = book.add_framework("fw", FrameworkInfo(user="u", name="n"))
    agent = book.add_agent(agent_info(), "slave(1)@127.0.0.1:5051", version=None, capabilities=[], now=1.0)
    return framework, agent


def task(task_id: str = "t", agent_id: str = "a") -> Task:
    return Task(
        name=task_id,
        task_id=TaskID(value=task_id),
        framework_id=FrameworkID(value="fw"),
        agent_id=AgentID(value=agent_id),
        state=TaskState.TASK_STAGING,
        resources=Resources.parse("cpus:1;mem:128").to_list(),
    )


def status(state: str, uuid: bytes | None = b"u" * 16) -> TaskStatus:
    return TaskStatus(task_id=TaskID(value="t"), state=TaskState(state), uuid=uuid, data=b"big")


def offer(offer_id: str) -> Offer:
    return Offer(
        id=OfferID(value=offer_id),
        framework_id=FrameworkID(value="fw"),
        agent_id=AgentID(value="a"),
        hostname="h",
    )


def test_ids_are_the_masters_and_never_reused(book: Book) -> None:
    assert [book.new_framework_id(), book.new_framework_id()] == ["m-0000", "m-0001"]
    assert book.new_agent_id() == "m-S0"
    assert [book.new_offer_id(), book.new_offer_id()] == ["m-O0", "m-O1"]


def test_recovery_sorts_agents_by_their_mark(book: Book) -> None:
    state = RegistryState(
        agents={
            "a": RegisteredAgent(agent_info("a")),
            "b": RegisteredAgent(agent_info("b"), AgentMark.UNREACHABLE, 5.0),
            "c": RegisteredAgent(agent_info("c"), AgentMark.GONE, None),
        }
    )
    book.recover(state, now=9.0)
    assert list(book.recovered_agents) == ["a"]
    assert book.unreachable_agents == {"b": 5.0}
    assert book.gone_agents == {"c": 9.0}
    # A recovered agent that registers is no longer recovered; one that does not is unreachable.
    book.add_agent(agent_info("a"), "pid", version=None, capabilities=[], now=10.0)
    assert not book.recovered_agents and "a" in book.agents
    book.mark_gone("b", 11.0)
    assert book.gone_agents == {"c": 9.0, "b": 11.0} and not book.unreachable_agents


def test_a_task_is_indexed_by_its_framework_and_its_agent(book: Book) -> None:
    framework, agent = cluster(book)
    record = task()
    book.add_task(record)
    assert framework.tasks == {"t": record} and agent.tasks == {"fw": {"t": record}}
    assert list(book.tasks()) == [record]
    book.remove_task(record, unreachable=True)
    assert framework.unreachable_tasks == {"t": record} and agent.tasks == {}
    assert list(book.tasks()) == [record]
    book.add_task(record)  # its agent came back with it
    assert framework.tasks == {"t": record} and not framework.unreachable_tasks
    book.remove_task(record)
    assert not framework.tasks and list(framework.completed_tasks) == [record]


def test_completed_tasks_are_bounded(book: Book) -> None:
    framework, _ = cluster(book)
    for name in ("t1", "t2", "t3"):
        record = task(name)
        book.add_task(record)
        book.remove_task(record)
    assert [t.task_id.value for t in framework.completed_tasks] == ["t2", "t3"]


def test_updates_keep_statuses_once_and_without_data(book: Book) -> None:
    cluster(book)
    record = task()
    book.add_task(record)
    assert book.update_task(record, status("TASK_RUNNING")) is False
    assert book.update_task(record, status("TASK_RUNNING")) is False  # an agent's retry
    assert [s.state.value for s in record.statuses] == ["TASK_RUNNING"]
    assert record.statuses[0].data is None
    # The agent's latest state, ahead of the update, is the task's.
    assert book.update_task(record, status("TASK_RUNNING", b"v" * 16), TaskState.TASK_FAILED) is True
    assert record.state is TaskState.TASK_FAILED
    assert record.status_update_state is TaskState.TASK_RUNNING
    assert record.status_update_uuid == b"v" * 16
    assert book.update_task(record, status("TASK_FAILED", b"w" * 16)) is False  # terminal once


def test_executors_are_indexed_on_both_sides(book: Book) -> None:
    framework, agent = cluster(book)
    executor = ExecutorInfo(executor_id=ExecutorID(value="e"), framework_id=FrameworkID(value="fw"))
    book.add_executor("fw", "a", executor)
    assert agent.executors == {"fw": {"e": executor}}
    assert framework.executors == {"a": {"e": executor}}
    assert book.remove_executor(agent, "fw", "e") is executor
    assert agent.executors == {} and framework.executors == {}
    assert book.remove_executor(agent, "fw", "e") is None


def test_an_offer_is_booked_three_times_and_removed_once(book: Book) -> None:
    framework, agent = cluster(book)
    book.add_offer(offer("o1"))
    assert set(book.offers) == set(framework.offers) == set(agent.offers) == {"o1"}
    assert book.remove_offer("o1") is not None
    assert not book.offers and not framework.offers and not agent.offers
    assert book.remove_offer("o1") is None


def test_a_removed_agent_takes_its_executors_from_frameworks(book: Book) -> None:
    framework, agent = cluster(book)
    book.add_executor("fw", "a", ExecutorInfo(executor_id=ExecutorID(value="e")))
    book.remove_agent(agent)
    assert "a" not in book.agents and framework.executors == {}
    book.mark_unreachable("a", 3.0)
    assert book.unreachable_agents == {"a": 3.0}


def test_a_removed_framework_is_completed_with_its_tasks(book: Book) -> None:
    framework, agent = cluster(book)
    live, away = task("live"), task("away")
    book.add_task(live)
    book.add_task(away)
    book.remove_task(away, unreachable=True)
    book.add_executor("fw", "a", ExecutorInfo(executor_id=ExecutorID(value="e")))
    book.remove_framework(framework, now=7.0)
    assert "fw" not in book.frameworks and book.is_completed_framework("fw")
    assert framework.unregistered_time == 7.0
    assert not framework.tasks and not framework.unreachable_tasks
    assert {t.task_id.value for t in framework.completed_tasks} == {"live", "away"}
    assert agent.tasks == {} and agent.executors == {} and framework.executors == {}


def test_completed_frameworks_are_bounded(book: Book) -> None:
    for name in ("f1", "f2", "f3"):
        book.remove_framework(book.add_framework(name, FrameworkInfo(user="u", name=name)), now=0.0)
    assert [f.id for f in book.completed_frameworks] == ["f2", "f3"]
    assert not book.is_completed_framework("f1")


def test_a_framework_carries_its_id(book: Book) -> None:
    framework = book.add_framework("fw", FrameworkInfo(user="u", name="n"), recovered=True)
    assert framework.info.id == FrameworkID(value="fw") and framework.recovered


def test_an_agent_back_without_its_unreachable_tasks_takes_them_out(book: Book) -> None:
    framework, _ = cluster(book)
    away, elsewhere = task("away"), task("elsewhere", agent_id="b")
    book.add_agent(agent_info("b"), "pid", version=None, capabilities=[], now=1.0)
    for each in (away, elsewhere):
        book.add_task(each)
        book.remove_task(each, unreachable=True)
    assert book.drop_unreachable_tasks("a") == {"fw": [away]}
    assert framework.unreachable_tasks == {"elsewhere": elsewhere}
    assert book.drop_unreachable_tasks("a") == {}
