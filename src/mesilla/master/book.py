"""The master's book of the cluster: frameworks, agents, offers, tasks and executors.

`Book` holds every index of the master's state and is the only code that
writes them: which frameworks and agents are registered, recovered (known from
the registry), unreachable, gone or completed; which offers are outstanding;
which tasks and executors run where. Each task and executor is indexed twice
(by its framework and by its agent) and each offer three times, always
together, so the two sides can never disagree.

It is pure and synchronous, as dask's `worker_state_machine`: no I/O, no
event loop, no allocator, no clock (times are passed in). A change returns
what its caller must act on (the task became terminal, the executor that was
removed) and the caller, a part of `Master`, does the I/O: the registry, the
allocator, the messages. It is tested without an event loop
(`tests/unit/master/test_book.py`).

Records (`Framework`, `Agent`, `Task`) are shared with the readers (the
operator API, `/state`); only `Book` adds them to or removes them from an
index, and only `Book.update_task` changes a task's state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

import msgspec

from mesilla.master.agent import Agent
from mesilla.master.framework import Framework
from mesilla.master.registry import AgentMark, RegistryState
from mesilla.v1.mesos import (
    AgentCapability,
    AgentInfo,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    Offer,
    Task,
    TaskState,
    TaskStatus,
)


def _without_data(status: TaskStatus) -> TaskStatus:
    """Statuses kept in `Task.statuses` drop `data`, which may be large, as Mesos does."""
    return msgspec.structs.replace(status, data=None)


class Book:
    def __init__(
        self,
        master_id: str,
        *,
        max_completed_frameworks: int = 50,
        max_completed_tasks: int = 1000,
    ) -> None:
        self.master_id = master_id
        #: framework_id -> Framework, every framework not torn down (connected or not).
        self.frameworks: dict[str, Framework] = {}
        self.completed_frameworks: deque[Framework] = deque(maxlen=max_completed_frameworks)
        #: agent_id -> Agent, registered agents (connected or disconnected).
        self.agents: dict[str, Agent] = {}
        #: agent_id -> AgentInfo of agents known from the registry, not yet re-registered.
        self.recovered_agents: dict[str, AgentInfo] = {}
        #: agent_id -> time (seconds since the epoch) it was marked unreachable / gone.
        self.unreachable_agents: dict[str, float] = {}
        self.gone_agents: dict[str, float] = {}
        #: agent_id -> framework_id -> ids of tasks that left the book when their agent came
        #: back from unreachable without them, asked of it (RECONCILE_TASKS) until its answer comes.
        self.asked_tasks: dict[str, dict[str, set[str]]] = {}
        #: offer_id -> Offer, every outstanding offer.
        self.offers: dict[str, Offer] = {}
        self._max_completed_tasks = max_completed_tasks
        self._next_framework = 0
        self._next_agent = 0
        self._next_offer = 0

    # --- ids ------------------------------------------------------------------------------

    def new_framework_id(self) -> str:
        self._next_framework += 1
        return f"{self.master_id}-{self._next_framework - 1:04d}"

    def new_agent_id(self) -> str:
        self._next_agent += 1
        return f"{self.master_id}-S{self._next_agent - 1}"

    def new_offer_id(self) -> str:
        self._next_offer += 1
        return f"{self.master_id}-O{self._next_offer - 1}"

    # --- what the registry remembers --------------------------------------------------------

    def recover(self, state: RegistryState, now: float) -> None:
        """The agents of a recovered registry, by their mark (frameworks: `add_framework`)."""
        for agent_id, entry in state.agents.items():
            if entry.mark is AgentMark.ADMITTED:
                self.recovered_agents[agent_id] = entry.info
            elif entry.mark is AgentMark.UNREACHABLE:
                self.unreachable_agents[agent_id] = entry.time or now
            else:
                self.gone_agents[agent_id] = entry.time or now

    # --- frameworks -------------------------------------------------------------------------

    def add_framework(self, framework_id: str, info: FrameworkInfo, *, recovered: bool = False) -> Framework:
        """A new framework record, its info carrying `framework_id`."""
        info = msgspec.structs.replace(info, id=FrameworkID(value=framework_id))
        framework = Framework(
            id=framework_id,
            info=info,
            max_completed_tasks=self._max_completed_tasks,
            recovered=recovered,
        )
        self.frameworks[framework_id] = framework
        return framework

    def is_completed_framework(self, framework_id: str) -> bool:
        return any(f.id == framework_id for f in self.completed_frameworks)

    def remove_framework(self, framework: Framework, now: float) -> None:
        """The framework becomes completed: its tasks (live and unreachable) complete and its
        executors leave every agent. Offers must have been removed first."""
        for task in [*framework.tasks.values(), *framework.unreachable_tasks.values()]:
            self.remove_task(task)
        for agent in self.agents.values():
            agent.executors.pop(framework.id, None)
        framework.executors.clear()
        del self.frameworks[framework.id]
        framework.unregistered_time = now
        self.completed_frameworks.append(framework)

    # --- agents -------------------------------------------------------------------------------

    def add_agent(
        self,
        info: AgentInfo,
        pid: str,
        *,
        version: str | None,
        capabilities: list[AgentCapability],
        now: float,
    ) -> Agent:
        """A registered agent (`info.id` set); it is no longer recovered or unreachable."""
        assert info.id is not None
        agent = Agent(
            id=info.id.value,
            info=info,
            pid=pid,
            version=version,
            capabilities=capabilities,
            registered_time=now,
        )
        self.agents[agent.id] = agent
        self.recovered_agents.pop(agent.id, None)
        self.unreachable_agents.pop(agent.id, None)
        return agent

    def remove_agent(self, agent: Agent) -> None:
        """The agent leaves the cluster; its tasks must have been removed first. Its
        executors leave their frameworks (the record keeps them, for whoever holds it)."""
        for framework_id in agent.executors:
            framework = self.frameworks.get(framework_id)
            if framework is not None:
                framework.executors.pop(agent.id, None)
        del self.agents[agent.id]

    def mark_unreachable(self, agent_id: str, now: float) -> None:
        self.recovered_agents.pop(agent_id, None)
        self.unreachable_agents[agent_id] = now

    def mark_gone(self, agent_id: str, now: float) -> None:
        self.recovered_agents.pop(agent_id, None)
        self.unreachable_agents.pop(agent_id, None)
        self.asked_tasks.pop(agent_id, None)
        self.gone_agents[agent_id] = now

    def ask_tasks(self, agent_id: str, framework_id: str, task_ids: Iterable[str]) -> None:
        """`task_ids` are asked of the agent; they stay asked until `answered`."""
        self.asked_tasks.setdefault(agent_id, {}).setdefault(framework_id, set()).update(task_ids)

    def answered(self, agent_id: str, framework_id: str, task_id: str) -> None:
        """The agent sent an update for the task (its answer, or the task after all)."""
        by_framework = self.asked_tasks.get(agent_id)
        if by_framework is None or task_id not in by_framework.get(framework_id, ()):
            return
        by_framework[framework_id].discard(task_id)
        if not by_framework[framework_id]:
            del by_framework[framework_id]
        if not by_framework:
            del self.asked_tasks[agent_id]

    # --- offers -----------------------------------------------------------------------------------

    def add_offer(self, offer: Offer) -> None:
        """Books an offer of a registered agent to a registered framework."""
        offer_id = offer.id.value
        self.offers[offer_id] = offer
        self.frameworks[offer.framework_id.value].offers[offer_id] = offer
        self.agents[offer.agent_id.value].offers[offer_id] = offer

    def remove_offer(self, offer_id: str) -> Offer | None:
        """Takes an offer off the books; None if it was not outstanding."""
        offer = self.offers.pop(offer_id, None)
        if offer is None:
            return None
        framework = self.frameworks.get(offer.framework_id.value)
        if framework is not None:
            framework.offers.pop(offer_id, None)
        agent = self.agents.get(offer.agent_id.value)
        if agent is not None:
            agent.offers.pop(offer_id, None)
        return offer

    # --- tasks ---------------------------------------------------------------------------------------

    def tasks(self) -> Iterator[Task]:
        """Every task of every framework that is not completed (unreachable ones included)."""
        for framework in self.frameworks.values():
            yield from framework.tasks.values()
            yield from framework.unreachable_tasks.values()

    def add_task(self, task: Task) -> None:
        """A live task of a registered framework on a registered agent (`task.agent_id`); one
        that was unreachable is live again."""
        framework = self.frameworks[task.framework_id.value]
        agent = self.agents[task.agent_id.value]
        task_id = task.task_id.value
        framework.unreachable_tasks.pop(task_id, None)
        framework.tasks[task_id] = task
        agent.tasks.setdefault(framework.id, {})[task_id] = task

    def update_task(self, task: Task, status: TaskStatus, latest: TaskState | None = None) -> bool:
        """Applies `status` to `task` (`latest`: the agent's newest state, when it is ahead);
        True when the task has just become terminal."""
        was_terminal = task.state.terminal
        task.state = latest or status.state
        task.status_update_state = status.state
        task.status_update_uuid = status.uuid
        # An agent retries an update until acknowledged: a known uuid is kept once.
        if status.uuid is None or all(s.uuid != status.uuid for s in task.statuses):
            task.statuses.append(_without_data(status))
        return task.state.terminal and not was_terminal

    def remove_task(self, task: Task, *, unreachable: bool = False) -> None:
        """Drops a task from its agent; into `unreachable_tasks` or `completed_tasks` of its framework."""
        agent = self.agents.get(task.agent_id.value)
        if agent is not None:
            by_id = agent.tasks.get(task.framework_id.value)
            if by_id is not None:
                by_id.pop(task.task_id.value, None)
                if not by_id:
                    del agent.tasks[task.framework_id.value]
        framework = self.frameworks.get(task.framework_id.value)
        if framework is None:
            return
        task_id = task.task_id.value
        framework.tasks.pop(task_id, None)
        if unreachable:
            framework.unreachable_tasks[task_id] = task
        else:
            framework.unreachable_tasks.pop(task_id, None)
            framework.completed_tasks.append(task)

    def drop_unreachable_tasks(self, agent_id: str) -> dict[str, list[Task]]:
        """The tasks of `agent_id` still unreachable, taken out of the book (the agent is back
        without them), by framework."""
        dropped: dict[str, list[Task]] = {}
        for framework in self.frameworks.values():
            left = [t for t in framework.unreachable_tasks.values() if t.agent_id.value == agent_id]
            for task in left:
                del framework.unreachable_tasks[task.task_id.value]
            if left:
                dropped[framework.id] = left
        return dropped

    # --- executors ----------------------------------------------------------------------------------

    def add_executor(self, framework_id: str, agent_id: str, executor: ExecutorInfo) -> None:
        """An executor of a registered framework on a registered agent (`executor.framework_id` set)."""
        executor_id = executor.executor_id.value
        self.agents[agent_id].executors.setdefault(framework_id, {})[executor_id] = executor
        self.frameworks[framework_id].executors.setdefault(agent_id, {})[executor_id] = executor

    def remove_executor(self, agent: Agent, framework_id: str, executor_id: str) -> ExecutorInfo | None:
        """The executor leaves its agent and framework; it is returned if the agent had it."""
        executors = agent.executors.get(framework_id, {})
        executor = executors.pop(executor_id, None)
        if not executors:
            agent.executors.pop(framework_id, None)
        framework = self.frameworks.get(framework_id)
        if framework is not None:
            by_id = framework.executors.get(agent.id, {})
            by_id.pop(executor_id, None)
            if not by_id:
                framework.executors.pop(agent.id, None)
        return executor
