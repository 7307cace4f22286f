"""What the parts of `Master` (its mixins) may rely on from each other.

Declarations only: `mesilla.master.master.Master` defines the attributes and
combines the mixins that implement the methods.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Coroutine
from typing import Any

from mesilla.common.authorization import Authorizer
from mesilla.common.flags import Flags
from mesilla.common.resources import Resources
from mesilla.master.agent import Agent
from mesilla.master.allocator import HierarchicalDRFAllocator
from mesilla.master.framework import Framework
from mesilla.master.registry import Registry
from mesilla.v1.mesos import (
    AgentInfo,
    FrameworkInfo,
    MasterInfo,
    Offer,
    Task,
    TaskStatus,
)


class MasterBase:
    flags: Flags
    authorizer: Authorizer | None
    registry: Registry
    id: str
    master_info: MasterInfo
    frameworks: dict[str, Framework]
    completed_frameworks: deque[Framework]
    agents: dict[str, Agent]
    recovered_agents: dict[str, AgentInfo]
    unreachable_agents: dict[str, float]
    gone_agents: dict[str, float]
    offers: dict[str, Offer]
    counters: Counter[str]
    stopping: bool
    allocator: HierarchicalDRFAllocator
    _offer_timers: dict[str, asyncio.TimerHandle]

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        raise NotImplementedError

    def notify(self, kind: str, payload: Any) -> None:
        raise NotImplementedError

    def new_framework_id(self) -> str:
        raise NotImplementedError

    def new_agent_id(self) -> str:
        raise NotImplementedError

    def new_offer_id(self) -> str:
        raise NotImplementedError

    # frameworks.py
    def _recover_framework(self, framework_id: str, info: FrameworkInfo) -> Framework:
        raise NotImplementedError

    def is_completed_framework(self, framework_id: str) -> bool:
        raise NotImplementedError

    # agents.py
    def _close_agent_stream(self, agent: Agent) -> None:
        raise NotImplementedError

    async def _expire_recovered_agents(self) -> None:
        raise NotImplementedError

    # offers.py
    def remove_offer(
        self, offer: Offer, *, rescind: bool, recover: bool = True
    ) -> None:
        raise NotImplementedError

    # status_updates.py
    def update_task(
        self,
        task: Task,
        status: TaskStatus,
        latest: Any = None,
        *,
        recover: bool = True,
    ) -> None:
        raise NotImplementedError

    def remove_task(self, task: Task, *, unreachable: bool = False) -> None:
        raise NotImplementedError

    async def forward_update(self, framework: Framework, status: TaskStatus) -> None:
        raise NotImplementedError

    def recover_executor(
        self, agent: Agent, framework_id: str, executor_id: str
    ) -> Resources:
        raise NotImplementedError
