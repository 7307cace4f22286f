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
from mesilla.master.framework import Framework
from mesilla.master.offers import Offerer
from mesilla.master.parts import Parts
from mesilla.master.tasks import Tasks, task_status
from mesilla.master.validation import validate_framework_info, validate_framework_update
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import FrameworkID, FrameworkInfo, Reason, TaskState

log = logging.getLogger(__name__)

# Longer failover timeouts (even infinite ones) mean "wait as good as forever".
_MAX_FAILOVER_TIMEOUT = 10 * 365 * 86400.0


def check_allowed_roles(info: FrameworkInfo, allowed: str | None) -> None:
    """``--roles``: when set, the only roles frameworks may use (besides '*')."""
    if not allowed:
        return
    unknown = sorted(set(info.effective_roles()) - set(allowed.split(",")) - {"*"})
    if unknown:
        raise BadRequest(
            f"Role(s) {', '.join(unknown)} are not in the master's --roles ({allowed})",
            field="framework_info.roles",
        )


def _check_roles(framework: Framework, roles: set[str]) -> None:
    unknown = sorted(roles - set(framework.roles))
    if unknown:
        raise BadRequest(
            f"Framework {framework.id} is not subscribed to role(s) {', '.join(unknown)}: "
            "subscribe to them with UPDATE_FRAMEWORK first"
        )


class FrameworkStreams:
    def __init__(
        self,
        parts: Parts,
        offerer: Offerer,
        tasks: Tasks,
        *,
        heartbeat_interval: float,
        allowed_roles: str | None,
    ) -> None:
        self._parts = parts
        self._offerer = offerer
        self._tasks = tasks
        self.heartbeat_interval = heartbeat_interval
        self._allowed_roles = allowed_roles

    def stop(self) -> None:
        """Closes every framework's stream (the master is `stopping`: a closing stream is its own doing)."""
        for framework in self._parts.book.frameworks.values():
            if framework.failover_timer is not None:
                framework.failover_timer.cancel()
            stream = framework.disconnect()
            if stream is not None:
                stream.close()

    def recover(self, framework_id: str, info: FrameworkInfo) -> Framework:
        """A framework known from the registry or an agent, until it subscribes again."""
        framework = self._parts.book.frameworks.get(framework_id)
        if framework is None:
            framework = self._parts.book.add_framework(framework_id, info, recovered=True)
            self._parts.allocator.add_framework(framework_id, framework.roles, active=False)
            self._parts.outbox.notify("FRAMEWORK_ADDED", framework)
        return framework

    async def subscribe(self, stream: EventStream, stream_id: str, call: sched.Subscribe) -> Framework | None:
        """SUBSCRIBE on an open stream: registers, re-registers or fails over the framework.

        Returns None when the subscription was refused (with an ERROR event on the stream).
        """
        info = call.framework_info
        try:
            validate_framework_info(info, call.suppressed_roles)
            check_allowed_roles(info, self._allowed_roles)
        except BadRequest as exc:
            await self._parts.outbox.error(stream, exc.reason)
            return None
        if info.id is not None and self._parts.book.is_completed_framework(info.id.value):
            await self._parts.outbox.error(stream, "Framework has been removed")
            return None
        framework = self._parts.book.frameworks.get(info.id.value) if info.id is not None else None
        added = framework is None
        if framework is None:
            framework_id = info.id.value if info.id is not None else self._parts.book.new_framework_id()
            info = msgspec.structs.replace(info, id=FrameworkID(value=framework_id))
            await self._parts.registry.add_framework(info)
            framework = self._parts.book.add_framework(framework_id, info)
            self._parts.allocator.add_framework(
                framework_id, framework.roles, suppressed_roles=set(call.suppressed_roles)
            )
        else:
            await self._failover(framework, info, call.suppressed_roles)
        framework.suppressed_roles = set(call.suppressed_roles)
        framework.connect(stream, stream_id)
        await self._parts.outbox.subscribed(framework, self.heartbeat_interval, self._parts.master_info())
        framework.heartbeat_task = self._parts.owner.spawn(
            self._heartbeat(stream), f"heartbeats to {framework.id}"
        )
        self._parts.counters[
            "master/messages_register_framework" if added else "master/messages_reregister_framework"
        ] += 1
        self._parts.outbox.notify("FRAMEWORK_ADDED" if added else "FRAMEWORK_UPDATED", framework)
        log.info("framework %s (%s) subscribed", framework.id, framework.info.name)
        return framework

    async def _failover(self, framework: Framework, info: FrameworkInfo, suppressed: list[str]) -> None:
        """A re-SUBSCRIBE with a known id: the old stream, if any, gets ERROR and is closed."""
        old = framework.disconnect()
        if old is not None:
            await self._parts.outbox.error(old, "Framework failed over")
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
            framework.failover_timer = None
        self._offerer.remove_all(framework.offers, rescind=False)
        if framework.info != info:
            framework.info = info
            await self._parts.registry.add_framework(info)
        self._parts.allocator.update_framework(framework.id, framework.roles, set(suppressed))
        self._parts.allocator.activate_framework(framework.id)

    async def _heartbeat(self, stream: EventStream) -> None:
        event = sched.Event(type=sched.EventType.HEARTBEAT)
        while await stream.send(event):  # noqa: ASYNC110 (a period, not a wait for a state)
            await asyncio.sleep(self.heartbeat_interval)

    def disconnected(self, framework: Framework, stream_id: str) -> None:
        """The framework's stream closed: stop offers and start its failover timeout."""
        if framework.stream_id != stream_id or self._parts.stopping():
            return  # an old stream of a framework that failed over, or the master stopping
        framework.disconnect()
        self._parts.allocator.deactivate_framework(framework.id)
        self._offerer.remove_all(framework.offers, rescind=False)
        timeout = framework.info.failover_timeout
        log.info("framework %s disconnected; failover timeout %ss", framework.id, timeout)
        framework.failover_timer = asyncio.get_running_loop().call_later(
            min(max(timeout, 0.0), _MAX_FAILOVER_TIMEOUT),
            lambda: self._parts.owner.spawn(
                self._failover_expired(framework), f"failover timeout of {framework.id}"
            ),
        )
        self._parts.outbox.notify("FRAMEWORK_UPDATED", framework)

    async def _failover_expired(self, framework: Framework) -> None:
        if self._parts.book.frameworks.get(framework.id) is framework and not framework.connected:
            log.info("framework %s did not fail over in time: removing it", framework.id)
            await self.remove(framework)

    async def teardown(self, framework: Framework) -> None:
        self._parts.counters["master/messages_unregister_framework"] += 1
        await self.remove(framework)

    async def remove(self, framework: Framework) -> None:
        """Removes a framework for good: its tasks are killed and it becomes completed."""
        if self._parts.book.frameworks.get(framework.id) is not framework:
            return
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
            framework.failover_timer = None
        stream = framework.disconnect()
        if stream is not None:
            stream.close()
        self._offerer.remove_all(framework.offers, rescind=False, recover=False)
        for task in list(framework.tasks.values()):
            if not task.state.terminal:
                removed = f"Framework {framework.id} removed"
                status = task_status(task, TaskState.TASK_KILLED, Reason.REASON_FRAMEWORK_REMOVED, removed)
                self._tasks.update(task, status, recover=False)
        self._parts.book.remove_framework(framework, time.time())
        # Every agent, as Mesos: one may run an executor the master never heard of (launched
        # just before the agent restarted, its task lost), which nothing else would end.
        for agent in list(self._parts.book.agents.values()):
            await self._parts.outbox.shutdown_framework(agent, framework.id)
        self._parts.allocator.remove_framework(framework.id)
        await self._parts.registry.remove_framework(framework.id)
        self._parts.outbox.notify("FRAMEWORK_REMOVED", framework)
        log.info("framework %s removed", framework.id)

    async def update(self, framework: Framework, call: sched.UpdateFramework) -> None:
        """UPDATE_FRAMEWORK: new FrameworkInfo and suppressed roles; agents hear of the change."""
        info = call.framework_info
        try:
            validate_framework_info(info, call.suppressed_roles)
            validate_framework_update(framework.info, info)
        except BadRequest as exc:
            raise BadRequest(f"Supplied FrameworkInfo is not valid: {exc.reason}", field=exc.field) from exc
        changed = info != framework.info
        framework.info = info
        framework.suppressed_roles = set(call.suppressed_roles)
        self._parts.allocator.update_framework(framework.id, framework.roles, framework.suppressed_roles)
        if not changed:
            return
        await self._parts.registry.add_framework(info)
        agent_ids = {t.agent_id.value for t in framework.tasks.values()} | set(framework.executors)
        for agent_id in agent_ids:
            agent = self._parts.book.agents.get(agent_id)
            if agent is not None:
                await self._parts.outbox.update_framework(agent, info)
        self._parts.outbox.notify("FRAMEWORK_UPDATED", framework)

    def suppress(self, framework: Framework, roles: list[str]) -> None:
        self._parts.counters["master/messages_suppress_offers"] += 1
        chosen = set(roles) if roles else set(framework.roles)
        _check_roles(framework, chosen)
        framework.suppressed_roles |= chosen
        self._parts.allocator.suppress_offers(framework.id, chosen)

    def revive(self, framework: Framework, roles: list[str]) -> None:
        self._parts.counters["master/messages_revive_offers"] += 1
        chosen = set(roles) if roles else set(framework.roles)
        _check_roles(framework, chosen)
        framework.suppressed_roles -= chosen
        self._parts.allocator.revive_offers(framework.id, chosen)
