"""The master's events reach their handlers through one table."""

from __future__ import annotations

from mesilla.agent.master_events import HANDLERS
from mesilla.v1.internal import AgentEventType

# The link answers these itself: REGISTERED (the registration), PING (with PONG).
OWN = {AgentEventType.UNKNOWN, AgentEventType.REGISTERED, AgentEventType.PING}


def test_every_event_the_master_sends_has_a_handler() -> None:
    assert set(HANDLERS) == set(AgentEventType) - OWN
