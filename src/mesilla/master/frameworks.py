"""Framework life cycle on the master: subscribe, failover, disconnection, teardown, update.

A framework that loses its stream is deactivated (its offers go back to the
allocator) and removed once its `failover_timeout` passes without a new
SUBSCRIBE carrying its id. Removal (TEARDOWN or failover expiry) marks its
tasks TASK_KILLED and sends SHUTDOWN_FRAMEWORK to every agent.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from mesilla.common.errors import BadRequest
from mesilla.common.http import EventStream
from mesilla.master.base import MasterBase
from mesilla.master.framework import Framework
from mesilla.master.status_updates import master_status
from mesilla.master.validation import validate_framework_info, validate_framework_update
from mesilla.v1 import internal
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import FrameworkID, FrameworkInfo, Reason, TaskState

log = logging.getLogger(__name__)

# Longer failover timeouts (even infinite ones) mean "wait as good as forever".
_MAX_FAILOVER_TIMEOUT = 10 * 365 * 86400.0


async def _send_error(stream: EventStream, message: str) -> None:
    await stream.send(
        sched.Event(type=sched.EventType.ERROR, error=sched.Error(message=message))
    )
    stream.close()


class FrameworksMixin(MasterBase):
    def _new_framework(self, framework_id: str, info: FrameworkInfo) -> Framework:
        framework = Framework(
            id=framework_id,
            info=info,
            max_completed_tasks=self.flags.get("max_completed_tasks_per_framework")
            or 1000,
        )
        self.frameworks[framework_id] = framework
        return framework

    def _recover_framework(self, framework_id: str, info: FrameworkInfo) -> Framework:
        """A framework known from the registry or an agent, until it subscribes again."""
        framework = self.frameworks.get(framework_id)
        if framework is None:
            info = msgspec.structs.replace(info, id=FrameworkID(value=framework_id))
            framework = self._new_framework(framework_id, info)
            framework.recovered = True
            self.allocator.add_framework(framework_id, framework.roles, active=False)
            self.notify("FRAMEWORK_ADDED", framework)
        return framework

    def _check_allowed_roles(self, info: FrameworkInfo) -> str | None:
        """``--roles``: when set, the only roles frameworks may use (besides '*')."""
        allowed = self.flags.get("roles")
        if not allowed:
            return None
        names = set(allowed.split(",")) | {"*"}
        unknown = sorted(set(info.effective_roles()) - names)
        if unknown:
            return f"Role(s) {', '.join(unknown)} are not in the master's --roles ({allowed})"
        return None

    def is_completed_framework(self, framework_id: str) -> bool:
        return any(f.id == framework_id for f in self.completed_frameworks)

    async def subscribe(
        self, stream: EventStream, stream_id: str, call: sched.Subscribe
    ) -> Framework | None:
        """SUBSCRIBE on an open stream: registers, re-registers or fails over the framework.

        Returns None when the subscription was refused (with an ERROR event on the stream).
        """
        info = call.framework_info
        error = validate_framework_info(
            info, call.suppressed_roles
        ) or self._check_allowed_roles(info)
        if error is not None:
            await _send_error(stream, error)
            return None
        if info.id is not None and self.is_completed_framework(info.id.value):
            await _send_error(stream, "Framework has been removed")
            return None
        framework: Framework | None = None
        if info.id is not None:
            framework = self.frameworks.get(info.id.value)
        if framework is None:
            framework_id = (
                info.id.value if info.id is not None else self.new_framework_id()
            )
            info = msgspec.structs.replace(info, id=FrameworkID(value=framework_id))
            await self.registry.add_framework(info)
            framework = self._new_framework(framework_id, info)
            self.allocator.add_framework(
                framework_id,
                framework.roles,
                suppressed_roles=set(call.suppressed_roles),
            )
            added = True
        else:
            added = False
            await self._failover(framework, info, call.suppressed_roles)
        framework.suppressed_roles = set(call.suppressed_roles)
        framework.connect(stream, stream_id)
        await framework.send(
            sched.Event(
                type=sched.EventType.SUBSCRIBED,
                subscribed=sched.Subscribed(
                    framework_id=FrameworkID(value=framework.id),
                    heartbeat_interval_seconds=self.flags.heartbeat_interval,
                    master_info=self.master_info,
                ),
            )
        )
        framework.heartbeat_task = self.spawn(self._heartbeat(framework, stream))
        self.counters[
            "master/messages_register_framework"
            if added
            else "master/messages_reregister_framework"
        ] += 1
        self.notify("FRAMEWORK_ADDED" if added else "FRAMEWORK_UPDATED", framework)
        log.info("framework %s (%s) subscribed", framework.id, framework.info.name)
        return framework

    async def _failover(
        self, framework: Framework, info: FrameworkInfo, suppressed: list[str]
    ) -> None:
        """A re-SUBSCRIBE with a known id: the old stream, if any, gets ERROR and is closed."""
        old = framework.disconnect()
        if old is not None:
            await _send_error(old, "Framework failed over")
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
            framework.failover_timer = None
        for offer in list(framework.offers.values()):
            self.remove_offer(offer, rescind=False)
        if framework.info != info:
            framework.info = info
            await self.registry.add_framework(info)
        self.allocator.update_framework(framework.id, framework.roles, set(suppressed))
        self.allocator.activate_framework(framework.id)

    async def _heartbeat(self, framework: Framework, stream: EventStream) -> None:
        event = sched.Event(type=sched.EventType.HEARTBEAT)
        while await stream.send(event):
            await asyncio.sleep(self.flags.heartbeat_interval)

    def framework_disconnected(self, framework: Framework, stream_id: str) -> None:
        """The framework's stream closed: stop offers and start its failover timeout."""
        if framework.stream_id != stream_id or self.stopping:
            return  # an old stream of a framework that failed over, or the master stopping
        framework.disconnect()
        self.allocator.deactivate_framework(framework.id)
        for offer in list(framework.offers.values()):
            self.remove_offer(offer, rescind=False)
        timeout = framework.info.failover_timeout
        log.info(
            "framework %s disconnected; failover timeout %ss", framework.id, timeout
        )
        framework.failover_timer = asyncio.get_running_loop().call_later(
            min(max(timeout, 0.0), _MAX_FAILOVER_TIMEOUT),
            lambda: self.spawn(self._failover_expired(framework)),
        )
        self.notify("FRAMEWORK_UPDATED", framework)

    async def _failover_expired(self, framework: Framework) -> None:
        if self.frameworks.get(framework.id) is framework and not framework.connected:
            log.info(
                "framework %s did not fail over in time: removing it", framework.id
            )
            await self.remove_framework(framework)

    async def teardown(self, framework: Framework) -> None:
        self.counters["master/messages_unregister_framework"] += 1
        await self.remove_framework(framework)

    async def remove_framework(self, framework: Framework) -> None:
        """Removes a framework for good: its tasks are killed and it becomes completed."""
        if self.frameworks.get(framework.id) is not framework:
            return
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
            framework.failover_timer = None
        stream = framework.disconnect()
        if stream is not None:
            stream.close()
        for offer in list(framework.offers.values()):
            self.remove_offer(offer, rescind=False, recover=False)
        for task in list(framework.tasks.values()):
            if not task.state.terminal:
                status = master_status(
                    task.task_id.value,
                    TaskState.TASK_KILLED,
                    Reason.REASON_FRAMEWORK_REMOVED,
                    f"Framework {framework.id} removed",
                    agent_id=task.agent_id.value,
                    executor_id=task.executor_id,
                )
                self.update_task(task, status, recover=False)
            self.remove_task(task)
        for task in list(framework.unreachable_tasks.values()):
            framework.complete_task(task)
        # Every agent, as Mesos: one may run an executor the master never heard of (launched
        # just before the agent restarted, its task lost), which nothing else would end.
        for agent in list(self.agents.values()):
            agent.executors.pop(framework.id, None)
            await agent.shutdown_framework(framework.id)
        framework.executors.clear()
        self.allocator.remove_framework(framework.id)
        del self.frameworks[framework.id]
        framework.unregistered_time = time.time()
        self.completed_frameworks.append(framework)
        await self.registry.remove_framework(framework.id)
        self.notify("FRAMEWORK_REMOVED", framework)
        log.info("framework %s removed", framework.id)

    async def update_framework(
        self, framework: Framework, call: sched.UpdateFramework
    ) -> None:
        """UPDATE_FRAMEWORK: new FrameworkInfo and suppressed roles; agents hear of the change."""
        info = call.framework_info
        error = validate_framework_info(
            info, call.suppressed_roles
        ) or validate_framework_update(framework.info, info)
        if error is not None:
            raise BadRequest(f"Supplied FrameworkInfo is not valid: {error}")
        changed = info != framework.info
        framework.info = info
        framework.suppressed_roles = set(call.suppressed_roles)
        self.allocator.update_framework(
            framework.id, framework.roles, framework.suppressed_roles
        )
        if not changed:
            return
        await self.registry.add_framework(info)
        agent_ids = {t.agent_id.value for t in framework.tasks.values()} | set(
            framework.executors
        )
        for agent_id in agent_ids:
            agent = self.agents.get(agent_id)
            if agent is not None:
                await agent.send(
                    internal.AgentEvent(
                        type=internal.AgentEventType.UPDATE_FRAMEWORK,
                        update_framework=internal.UpdateFramework(framework_info=info),
                    )
                )
        self.notify("FRAMEWORK_UPDATED", framework)

    def suppress(self, framework: Framework, roles: list[str]) -> None:
        self.counters["master/messages_suppress_offers"] += 1
        chosen = set(roles) if roles else set(framework.roles)
        _check_roles(framework, chosen)
        framework.suppressed_roles |= chosen
        self.allocator.suppress_offers(framework.id, chosen)

    def revive(self, framework: Framework, roles: list[str]) -> None:
        self.counters["master/messages_revive_offers"] += 1
        chosen = set(roles) if roles else set(framework.roles)
        _check_roles(framework, chosen)
        framework.suppressed_roles -= chosen
        self.allocator.revive_offers(framework.id, chosen)


def _check_roles(framework: Framework, roles: set[str]) -> None:
    unknown = sorted(roles - set(framework.roles))
    if unknown:
        raise BadRequest(
            f"Framework {framework.id} is not subscribed to role(s) {', '.join(unknown)}: "
            "subscribe to them with UPDATE_FRAMEWORK first"
        )
