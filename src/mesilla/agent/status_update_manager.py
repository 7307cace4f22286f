"""Reliable, ordered delivery of task status updates to the master.

As Mesos's task status update manager (`src/slave/task_status_update_manager.cpp`):

* each task has a stream: updates queue in arrival order, and only the head is
  sent; it is resent with exponential backoff (10 s doubling up to 10 min)
  until the master relays the framework's acknowledgement of its uuid, then
  the next update is sent;
* an update whose uuid the stream has already seen is a duplicate and dropped;
  an acknowledgement that is not for the head is ignored;
* streams of checkpointing frameworks write every update and every
  acknowledgement to `task.updates` (fsync'ed) before acting on it, and are
  rebuilt from that log on agent restart. The appends run in a worker thread,
  one stream's in order (their fsyncs would stall the agent's event loop, and
  a pod's tasks report at once); the stream sends its head to the master, and
  the agent acknowledges an update to its executor (`durable`), only once the
  log has it;
* the stream ends when its terminal update is acknowledged.

While the agent is disconnected from the master the manager is paused (no
sends, no retries); `resume` sends every stream's head again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from mesilla.agent import checkpoints
from mesilla.agent.checkpointer import Checkpointer
from mesilla.common.tasks import TaskOwner
from mesilla.v1 import codec
from mesilla.v1.internal import StatusUpdate
from mesilla.v1.mesos import TaskState

log = logging.getLogger(__name__)

# Mesos's STATUS_UPDATE_RETRY_INTERVAL_MIN / _MAX (src/slave/constants.hpp).
RETRY_INTERVAL_MIN = 10.0
RETRY_INTERVAL_MAX = 600.0

StreamKey = tuple[str, str]  # (framework id, task id)


class StatusUpdateError(Exception):
    """An update the stream cannot take (e.g. after its terminal update); names the task."""


@dataclass
class _Stream:
    framework_id: str
    task_id: str
    path: str | None  # task.updates, None for frameworks that do not checkpoint
    pending: deque[StatusUpdate] = field(default_factory=deque)
    received: set[bytes] = field(default_factory=set)
    acknowledged: set[bytes] = field(default_factory=set)
    terminated: bool = False
    retry: asyncio.TimerHandle | None = None
    interval: float = RETRY_INTERVAL_MIN
    writes: asyncio.Task[None] | None = None  # the last append to `path`, in a worker thread

    def record(
        self, record: checkpoints.UpdateRecord, checkpointer: Checkpointer, tasks: TaskOwner
    ) -> None:
        """Appends the record after the stream's earlier ones (see `written`)."""
        if self.path is None:
            return
        path, data, previous = self.path, codec.encode(record), self.writes

        async def append() -> None:
            if previous is not None:
                await previous
            await checkpointer.update_record(path, data)

        self.writes = tasks.spawn(append(), f"checkpoint of {self.task_id}'s status update")

    async def written(self) -> None:
        """Returns once the records so far are durable; raises if one could not be written
        (then neither it nor any later record is, and the stream acts on none of them)."""
        if self.writes is not None:
            await asyncio.shield(self.writes)

    def apply(self, record: checkpoints.UpdateRecord) -> None:
        """Replays one record (live or from the checkpoint) onto the in-memory state."""
        if record.type == "UPDATE":
            assert record.update is not None and record.update.status.uuid is not None
            self.received.add(record.update.status.uuid)
            self.pending.append(record.update)
            if record.update.status.state.terminal:
                self.terminated = True
        else:
            assert record.uuid is not None
            self.acknowledged.add(record.uuid)
            if self.pending and self.pending[0].status.uuid == record.uuid:
                self.pending.popleft()

    @property
    def finished(self) -> bool:
        return self.terminated and not self.pending


class StatusUpdateManager:
    def __init__(
        self,
        forward: Callable[[StatusUpdate], None],
        checkpointer: Checkpointer,
        tasks: TaskOwner,
        *,
        initial_interval: float = RETRY_INTERVAL_MIN,
        max_interval: float = RETRY_INTERVAL_MAX,
    ) -> None:
        self._forward = forward
        self._checkpointer = checkpointer
        self._tasks = tasks  # the appends' owner
        self._initial = initial_interval
        self._max = max_interval
        self._streams: dict[StreamKey, _Stream] = {}
        self._paused = True

    # -- updates and acknowledgements --

    def update(self, update: StatusUpdate, path: str | None = None) -> bool:
        """Queues (and checkpoints, with a `path`) an update; False if it was a duplicate."""
        status = update.status
        if status.uuid is None:
            raise StatusUpdateError(f"Status update for task '{status.task_id.value}' has no uuid")
        key = (update.framework_id.value, status.task_id.value)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream(key[0], key[1], path)
        if status.uuid in stream.received or status.uuid in stream.acknowledged:
            log.info("Ignoring duplicate status update %s for task %s", status.state.value, key[1])
            return False
        if stream.terminated:
            raise StatusUpdateError(
                f"Status update {status.state.value} for task '{key[1]}' of framework "
                f"'{key[0]}' arrived after its terminal update"
            )
        record = checkpoints.UpdateRecord(type="UPDATE", update=update)
        stream.record(record, self._checkpointer, self._tasks)
        stream.apply(record)
        if len(stream.pending) == 1:
            self._send_head_when_written(stream)
        return True

    def acknowledgement(self, framework_id: str, task_id: str, uuid: bytes) -> bool | None:
        """Handles the framework's ack; None if it matched nothing, else whether the stream ended."""
        stream = self._streams.get((framework_id, task_id))
        if stream is None or not stream.pending:
            log.warning("Ignoring acknowledgement for task %s with no pending update", task_id)
            return None
        if uuid in stream.acknowledged:
            log.info("Ignoring duplicate acknowledgement for task %s", task_id)
            return None
        if stream.pending[0].status.uuid != uuid:
            log.warning("Ignoring acknowledgement for task %s: not the update in flight", task_id)
            return None
        record = checkpoints.UpdateRecord(type="ACK", uuid=uuid)
        stream.record(record, self._checkpointer, self._tasks)
        stream.apply(record)
        self._cancel(stream)
        if stream.finished:
            del self._streams[(framework_id, task_id)]
            return True
        if stream.pending:
            # Not before the ack is durable: a crash would resend the acked update after it.
            self._send_head_when_written(stream)
        return False

    async def durable(self, framework_id: str, task_id: str) -> None:
        """Returns once the task's stream has checkpointed what it has been given so far."""
        stream = self._streams.get((framework_id, task_id))
        if stream is not None:
            await stream.written()

    # -- recovery, connection state --

    def recover(
        self,
        framework_id: str,
        task_id: str,
        records: list[checkpoints.UpdateRecord],
        path: str | None,
    ) -> None:
        """Rebuilds a stream from its `task.updates`; nothing is sent until `resume`."""
        stream = _Stream(framework_id, task_id, path)
        for record in records:
            stream.apply(record)
        if not stream.finished:
            self._streams[(framework_id, task_id)] = stream

    def pause(self) -> None:
        self._paused = True
        for stream in self._streams.values():
            self._cancel(stream)

    def resume(self) -> None:
        self._paused = False
        for stream in list(self._streams.values()):
            if stream.pending:
                self._send_head(stream, reset=True)

    def cleanup(self, framework_id: str) -> None:
        """Forgets a removed framework's streams (its acknowledgements will never come)."""
        for key in [k for k in self._streams if k[0] == framework_id]:
            self._cancel(self._streams.pop(key))

    def close(self) -> None:
        for stream in self._streams.values():
            self._cancel(stream)

    # -- queries --

    def pending(self, framework_id: str, task_id: str) -> list[StatusUpdate]:
        stream = self._streams.get((framework_id, task_id))
        return list(stream.pending) if stream else []

    def seen(self, framework_id: str, task_id: str, uuid: bytes) -> bool:
        """Whether the task's stream already has this update (a resend from the executor)."""
        stream = self._streams.get((framework_id, task_id))
        return stream is not None and (uuid in stream.received or uuid in stream.acknowledged)

    def has_stream(self, framework_id: str, task_id: str) -> bool:
        return (framework_id, task_id) in self._streams

    def latest_unacknowledged(self, framework_id: str, task_id: str) -> TaskState | None:
        stream = self._streams.get((framework_id, task_id))
        return stream.pending[-1].status.state if stream and stream.pending else None

    # -- sending --

    def _send_head_when_written(self, stream: _Stream) -> None:
        writes = stream.writes
        if writes is None or writes.done():
            self._send_head(stream, reset=True)
            return

        def written(task: asyncio.Task[None]) -> None:
            if task.cancelled() or task.exception() is not None:
                return  # never acted upon (logged by the task owner)
            # Unless it was sent meanwhile (its retry is then set) or the stream ended.
            key = (stream.framework_id, stream.task_id)
            if self._streams.get(key) is stream and stream.retry is None:
                self._send_head(stream, reset=True)

        writes.add_done_callback(written)

    def _send_head(self, stream: _Stream, *, reset: bool) -> None:
        self._cancel(stream)
        if self._paused or not stream.pending:
            return
        if reset:
            stream.interval = self._initial
        head = stream.pending[0]
        try:
            self._forward(head)
        except Exception:
            log.exception("Forwarding the status update of task %s failed", stream.task_id)
        loop = asyncio.get_running_loop()
        stream.retry = loop.call_later(stream.interval, self._retry, stream)

    def _retry(self, stream: _Stream) -> None:
        stream.retry = None
        if self._streams.get((stream.framework_id, stream.task_id)) is not stream:
            return
        stream.interval = min(stream.interval * 2, self._max)
        log.info(
            "Resending status update %s of task %s (unacknowledged)",
            stream.pending[0].status.state.value,
            stream.task_id,
        )
        self._send_head(stream, reset=False)

    @staticmethod
    def _cancel(stream: _Stream) -> None:
        if stream.retry is not None:
            stream.retry.cancel()
            stream.retry = None
