"""Offers: turning the allocator's allocations into OFFERS, and taking them back.

One offer per framework, agent and role (`allocation_info.role`), all of a
framework's new offers in one OFFERS event. An offer leaves the books when it
is accepted, declined, rescinded (agent gone, framework failed over) or times
out (``--offer_timeout``); except for an accept, its resources go back to the
allocator, with a refuse filter when the framework declined them.
"""

from __future__ import annotations

import asyncio
import logging
import time

from mesilla.common.resources import Resources
from mesilla.master.agent import Agent
from mesilla.master.allocator import Allocations
from mesilla.master.framework import Framework
from mesilla.master.parts import Parts
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import (
    URL,
    Address,
    AgentID,
    AllocationInfo,
    ExecutorID,
    Filters,
    FrameworkID,
    Offer,
    OfferID,
)

log = logging.getLogger(__name__)

# How long making offers may hold the event loop before handing it back.
SLICE = 0.01


class Offerer:
    def __init__(self, parts: Parts, *, offer_timeout: float | None) -> None:
        self._book = parts.book
        self._allocator = parts.allocator
        self._outbox = parts.outbox
        self._owner = parts.owner
        # Offers booked by `_offer` and not yet sent: removed meanwhile, they need no RESCIND.
        self._unsent: set[str] = set()
        self._counters = parts.counters
        self._offer_timeout = offer_timeout
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._stopping = False

    def stop(self) -> None:
        """No more offers; the pending timeouts are cancelled (the offers die with the master)."""
        self._stopping = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def allocated(self, allocations: Allocations) -> None:
        """The allocator's offer callback (synchronous): the offers are made and sent by a
        task of the master's, as Mesos's allocator hands its allocations to the master."""
        if not self._stopping and allocations:
            self._owner.spawn(self._offer(allocations), "offers")

    async def _offer(self, allocations: Allocations) -> None:
        """Books and sends the offers, handing the event loop back every `SLICE` seconds: a
        cycle at 10,000 agents can allocate thousands of offers, which made in one go held
        the loop 0.1 to 0.2 s. A framework or an agent gone meanwhile gets none (its
        resources go back), and an offer removed meanwhile is not sent."""
        clock = time.perf_counter
        due = clock() + SLICE
        for framework_id, by_agent in allocations.items():
            offers: list[Offer] = []
            for agent_id, by_role in by_agent.items():
                if clock() >= due:
                    await asyncio.sleep(0)
                    due = clock() + SLICE
                framework = self._book.frameworks.get(framework_id)
                agent = self._book.agents.get(agent_id)
                for role, resources in by_role.items():
                    if (
                        self._stopping
                        or framework is None
                        or not framework.active
                        or agent is None
                        or not agent.active
                    ):
                        self._allocator.recover_resources(framework_id, agent_id, resources)
                        continue
                    offer = self._make_offer(framework, agent, role, resources)
                    self._unsent.add(offer.id.value)
                    offers.append(offer)
            framework = self._book.frameworks.get(framework_id)
            self._unsent.difference_update(offer.id.value for offer in offers)
            offers = [offer for offer in offers if offer.id.value in self._book.offers]
            if offers and framework is not None:
                self._outbox.offers(framework, offers)

    def _make_offer(self, framework: Framework, agent: Agent, role: str, resources: Resources) -> Offer:
        ip, _, port = agent.pid.rpartition("@")[2].rpartition(":")
        offer = Offer(
            id=OfferID(value=self._book.new_offer_id()),
            framework_id=FrameworkID(value=framework.id),
            agent_id=AgentID(value=agent.id),
            hostname=agent.hostname,
            url=URL(
                scheme="http",
                address=Address(hostname=agent.hostname, ip=ip, port=int(port or agent.info.port)),
                path="/slave(1)",
            ),
            domain=agent.info.domain,
            resources=resources.to_list(allocation_role=role),
            attributes=list(agent.info.attributes),
            executor_ids=[ExecutorID(value=e) for e in agent.executors.get(framework.id, {})],
            allocation_info=AllocationInfo(role=role),
        )
        offer_id = offer.id.value
        self._book.add_offer(offer)
        if self._offer_timeout:
            self._timers[offer_id] = asyncio.get_running_loop().call_later(
                self._offer_timeout, self._timed_out, offer_id
            )
        return offer

    def _timed_out(self, offer_id: str) -> None:
        offer = self._book.offers.get(offer_id)
        if offer is not None:
            log.info("offer %s timed out: rescinding it", offer_id)
            self.remove(offer, rescind=True)

    def remove(self, offer: Offer, *, rescind: bool, recover: bool = True) -> None:
        """Takes an offer off the books; `recover` returns its resources to the allocator,
        `rescind` tells its framework (RESCIND)."""
        offer_id = offer.id.value
        self._book.remove_offer(offer_id)
        timer = self._timers.pop(offer_id, None)
        if timer is not None:
            timer.cancel()
        if recover:
            self._allocator.recover_resources(
                offer.framework_id.value, offer.agent_id.value, Resources.from_list(offer.resources)
            )
        framework = self._book.frameworks.get(offer.framework_id.value)
        if offer_id in self._unsent:
            self._unsent.discard(offer_id)
        elif rescind and framework is not None:
            self._outbox.rescind(framework, offer.id)

    def remove_all(self, offers: dict[str, Offer], *, rescind: bool, recover: bool = True) -> None:
        """Every offer of an agent or a framework (`Agent.offers`, `Framework.offers`)."""
        for offer in list(offers.values()):
            self.remove(offer, rescind=rescind, recover=recover)

    def take(self, offer_ids: list[str]) -> tuple[list[Offer], Resources]:
        """ACCEPT: the (validated) offers leave the books; their resources are the launch's."""
        offers = [self._book.offers[offer_id] for offer_id in offer_ids]
        available = Resources()
        for offer in offers:
            available = available + Resources.from_list(offer.resources)
            self.remove(offer, rescind=False, recover=False)
        return offers, available

    def decline(self, framework_id: str, call: sched.Decline) -> None:
        """DECLINE: the offers' resources go back with a refuse filter (default 5 s)."""
        self._counters["master/messages_decline_offers"] += 1
        refuse = (call.filters or Filters()).refuse_seconds
        for offer_id in call.offer_ids:
            offer = self._book.offers.get(offer_id.value)
            if offer is None or offer.framework_id.value != framework_id:
                log.warning("ignoring decline of unknown offer %s", offer_id.value)
                continue
            self.remove(offer, rescind=False, recover=False)
            self._allocator.recover_resources(
                framework_id,
                offer.agent_id.value,
                Resources.from_list(offer.resources),
                refuse_seconds=refuse,
            )
