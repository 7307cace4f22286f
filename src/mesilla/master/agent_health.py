"""Agents' health on the master (Mesos's `SlaveObserver`): a PING every ``--agent_ping_timeout``.

An agent that leaves ``--max_agent_ping_timeouts`` pings in a row unanswered
(hung, partitioned, or its stream closed and not back) is unreachable; a
PONG, or a re-registration, forgives the pings missed before it. The count
lives on the `Agent` record (`pinged`, `ping_timeouts`) so that one observer
per agent spans its streams.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable

from mesilla.master.agent import Agent
from mesilla.master.outbox import Outbox

log = logging.getLogger(__name__)


def forgive(agent: Agent) -> None:
    """A PONG or a re-registration: the agent is alive; pings missed before do not count."""
    agent.pinged = False
    agent.ping_timeouts = 0


class AgentHealth:
    def __init__(
        self,
        outbox: Outbox,
        counters: Counter[str],
        *,
        ping_timeout: float,
        max_ping_timeouts: int,
        registered: Callable[[Agent], bool],
        unreachable: Callable[[Agent], Awaitable[None]],
    ) -> None:
        """`registered`: whether the record is still the registered agent; `unreachable`:
        what to do with one whose pings went unanswered."""
        self._outbox = outbox
        self._counters = counters
        self.ping_timeout = ping_timeout
        self.max_ping_timeouts = max_ping_timeouts
        self._registered = registered
        self._unreachable = unreachable

    @property
    def total_ping_timeout(self) -> float:
        """What an agent waits without hearing from the master before it re-registers."""
        return self.ping_timeout * self.max_ping_timeouts

    async def observe(self, agent: Agent) -> None:
        """Pings `agent` while it is registered; a disconnected agent cannot answer, so its
        pings count as missed."""
        loop = asyncio.get_running_loop()
        while self._registered(agent):
            deadline = loop.time() + self.ping_timeout
            agent.pinged = True  # before sending: the PONG may come back before send returns
            try:
                # A hung agent stops reading: once the socket buffers fill, a send waits
                # forever, which must not stop the count.
                async with asyncio.timeout_at(deadline):
                    await self._outbox.ping(agent)
            except TimeoutError:
                pass
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            if not self._registered(agent) or not agent.pinged:
                continue
            agent.ping_timeouts += 1
            if agent.ping_timeouts >= self.max_ping_timeouts:
                log.info(
                    "agent %s answered none of the last %d pings: unreachable", agent.id, agent.ping_timeouts
                )
                self._counters["master/slave_unreachable_scheduled"] += 1
                await self._unreachable(agent)
                return
