"""The master's relay of messages between schedulers and executors: Mesos's counters."""

from __future__ import annotations

from tests.unit.master.test_master_state import master, setup_task

from mesilla.master.master import Master
from mesilla.v1 import internal
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import AgentID, ExecutorID, FrameworkID

__all__ = ["master"]  # the fixture, used by name


async def test_a_message_to_a_disconnected_peer_is_dropped_and_counted_invalid(master: Master) -> None:
    framework, agent, _ = setup_task(master)
    to_framework = internal.ExecutorToFramework(
        framework_id=FrameworkID(value=framework.id), executor_id=ExecutorID(value="e"), data=b"x"
    )
    to_executor = sched.FrameworkMessage(
        agent_id=AgentID(value=agent.id), executor_id=ExecutorID(value="e"), data=b"y"
    )
    framework.connected, agent.connected = False, False
    await master.relay.executor_message(agent, to_framework)
    await master.relay.framework_message(framework, to_executor)
    framework.connected, agent.connected = True, True
    await master.relay.executor_message(agent, to_framework)
    await master.relay.framework_message(framework, to_executor)
    await master.relay.framework_message(framework, to_executor)
    relayed = {
        direction: [
            master.counters[f"master/{kind}"]
            for kind in (
                f"messages_{direction}",
                f"valid_{direction}_messages",
                f"invalid_{direction}_messages",
            )
        ]
        for direction in ("executor_to_framework", "framework_to_executor")
    }
    # (relayed, valid, invalid) in each direction
    assert relayed == {"executor_to_framework": [2, 1, 1], "framework_to_executor": [3, 2, 1]}
