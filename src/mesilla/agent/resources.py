"""Sizing an executor's container to the executor and its live tasks (Mesos's
`containerizer->update`): when tasks arrive, before they are delivered, and
when they end."""

from __future__ import annotations

import logging
import math

from mesilla.agent.agent import Agent
from mesilla.agent.state import Executor
from mesilla.common.errors import ContainerError

log = logging.getLogger(__name__)


def startup_limits(agent: Agent, executor: Executor) -> dict[str, float]:
    """No CFS cap until Mesilla's own executor subscribes: at a pod's 0.1-0.2 cpus its
    Python start-up (~120 ms of CPU) would take a second or more. A custom executor is
    capped from the start, as in Mesos, since its start-up is not ours to bound."""
    own = executor.info.type == "DEFAULT" or executor.command_task
    return {"cpus": math.inf} if own and agent.flags.cgroups_enable_cfs else {}


async def cap_after_subscribe(agent: Agent, executor: Executor) -> None:
    """Applies the CFS quota `startup_limits` held back (the tasks then run capped)."""
    if agent.flags.cgroups_enable_cfs:
        await update_resources(agent, executor)


async def update_resources(agent: Agent, executor: Executor) -> None:
    """Sizes the executor's container to the executor plus its live tasks."""
    try:
        await agent.containerizer.update(executor.container_id, executor.allocated_resources(), {})
    except ContainerError as exc:  # the container may be gone already
        log.warning("Failed to update the resources of executor %s: %s", executor, exc)
