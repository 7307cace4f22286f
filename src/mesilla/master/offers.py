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

from mesilla.common.resources import Resources
from mesilla.master.base import MasterBase
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import (
    URL,
    Address,
    AgentID,
    AllocationInfo,
    ExecutorID,
    FrameworkID,
    Offer,
    OfferID,
)

log = logging.getLogger(__name__)

Allocations = dict[str, dict[str, dict[str, Resources]]]


class OffersMixin(MasterBase):
    def _on_allocations(self, allocations: Allocations) -> None:
        """The allocator's offer callback (synchronous): book offers, send them in the background."""
        if self.stopping:
            return
        for framework_id, by_agent in allocations.items():
            framework = self.frameworks.get(framework_id)
            offers: list[Offer] = []
            for agent_id, by_role in by_agent.items():
                agent = self.agents.get(agent_id)
                for role, resources in by_role.items():
                    if (
                        framework is None
                        or not framework.active
                        or agent is None
                        or not agent.active
                    ):
                        self.allocator.recover_resources(
                            framework_id, agent_id, resources
                        )
                        continue
                    offers.append(
                        self._make_offer(framework_id, agent_id, role, resources)
                    )
            if offers and framework is not None:
                self.spawn(
                    framework.send(
                        sched.Event(
                            type=sched.EventType.OFFERS,
                            offers=sched.Offers(offers=offers),
                        )
                    )
                )

    def _make_offer(
        self, framework_id: str, agent_id: str, role: str, resources: Resources
    ) -> Offer:
        agent = self.agents[agent_id]
        framework = self.frameworks[framework_id]
        ip, _, port = agent.pid.rpartition("@")[2].rpartition(":")
        offer = Offer(
            id=OfferID(value=self.new_offer_id()),
            framework_id=FrameworkID(value=framework_id),
            agent_id=AgentID(value=agent_id),
            hostname=agent.hostname,
            url=URL(
                scheme="http",
                address=Address(
                    hostname=agent.hostname, ip=ip, port=int(port or agent.info.port)
                ),
                path="/slave(1)",
            ),
            domain=agent.info.domain,
            resources=resources.to_list(allocation_role=role),
            attributes=list(agent.info.attributes),
            executor_ids=[
                ExecutorID(value=e) for e in agent.executors.get(framework_id, {})
            ],
            allocation_info=AllocationInfo(role=role),
        )
        offer_id = offer.id.value
        self.offers[offer_id] = offer
        framework.offers[offer_id] = offer
        agent.offers[offer_id] = offer
        timeout = self.flags.get("offer_timeout")
        if timeout:
            self._offer_timers[offer_id] = asyncio.get_running_loop().call_later(
                timeout, self._offer_timed_out, offer_id
            )
        return offer

    def _offer_timed_out(self, offer_id: str) -> None:
        offer = self.offers.get(offer_id)
        if offer is not None:
            log.info("offer %s timed out: rescinding it", offer_id)
            self.remove_offer(offer, rescind=True)

    def remove_offer(
        self, offer: Offer, *, rescind: bool, recover: bool = True
    ) -> None:
        """Takes an offer off the books; `recover` returns its resources to the allocator."""
        offer_id = offer.id.value
        self.offers.pop(offer_id, None)
        timer = self._offer_timers.pop(offer_id, None)
        if timer is not None:
            timer.cancel()
        framework = self.frameworks.get(offer.framework_id.value)
        agent = self.agents.get(offer.agent_id.value)
        if framework is not None:
            framework.offers.pop(offer_id, None)
        if agent is not None:
            agent.offers.pop(offer_id, None)
        if recover:
            self.allocator.recover_resources(
                offer.framework_id.value,
                offer.agent_id.value,
                Resources.from_list(offer.resources),
            )
        if rescind and framework is not None and framework.connected:
            self.spawn(
                framework.send(
                    sched.Event(
                        type=sched.EventType.RESCIND,
                        rescind=sched.Rescind(offer_id=offer.id),
                    )
                )
            )

    def decline(self, framework_id: str, call: sched.Decline) -> None:
        """DECLINE: the offers' resources go back with a refuse filter (default 5 s)."""
        self.counters["master/messages_decline_offers"] += 1
        refuse = (call.filters or sched.Filters()).refuse_seconds
        for offer_id in call.offer_ids:
            offer = self.offers.get(offer_id.value)
            if offer is None or offer.framework_id.value != framework_id:
                log.warning("ignoring decline of unknown offer %s", offer_id.value)
                continue
            self.remove_offer(offer, rescind=False, recover=False)
            self.allocator.recover_resources(
                framework_id,
                offer.agent_id.value,
                Resources.from_list(offer.resources),
                refuse_seconds=refuse,
            )
