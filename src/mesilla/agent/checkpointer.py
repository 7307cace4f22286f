"""The agent's checkpoint writes, every one off the event loop.

`mesilla.agent.checkpoints` defines the files and writes them synchronously
(for recovery's reader and the tests); the running agent writes only through
`Checkpointer`, whose every write is awaited and fsyncs in a worker thread:
an fsync on the loop would stall every executor and pod of the agent. Each
method encodes its messages when called (the caller may change them once it
goes on) and returns the write to await.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from mesilla.agent import checkpoints, paths
from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.v1.mesos import AgentInfo, FrameworkInfo

# (work_dir, agent_id, framework_id, executor_id, container_id): one executor run.
Run = tuple[str, str, str, str, str]
# A write to await (a coroutine: `agent.spawn` can own it too).
Write = Coroutine[Any, Any, None]


class Checkpointer:
    def __init__(self, work_dir: str) -> None:
        self.work_dir = work_dir

    def agent(self, info: AgentInfo) -> Write:
        """`slave.info`, the boot id and `latest`: the agent registered."""
        assert info.id is not None
        return in_thread(checkpoints.write_agent, self.work_dir, info.id.value, checkpoints.encode(info))

    def framework(self, agent_id: str, info: FrameworkInfo) -> Write:
        assert info.id is not None
        path = paths.framework_info_path(self.work_dir, agent_id, info.id.value)
        return in_thread(files.write_atomically, path, checkpoints.encode(info))

    def meta(self, agent_id: str) -> checkpoints.MetaDir:
        """The agent's checkpoint files, e.g. to make a launch's (`MetaDir.launch`)."""
        return checkpoints.MetaDir(self.work_dir, agent_id)

    def launch(self, launch: checkpoints.LaunchCheckpoint) -> Write:
        """A launch's files as one unit (`checkpoints.LaunchCheckpoint`)."""
        return in_thread(launch.write)

    def forked_pid(self, run: Run, pid: int) -> Write:
        return in_thread(files.write_atomically, paths.forked_pid_path(*run), str(pid).encode())

    def libprocess_pid(self, run: Run, pid: str) -> Write:
        return in_thread(files.write_atomically, paths.libprocess_pid_path(*run), pid.encode())

    def http_marker(self, run: Run) -> Write:
        """The executor speaks the v1 HTTP API (recovery then waits for its SUBSCRIBE)."""
        return in_thread(checkpoints.touch, paths.http_marker_path(*run))

    def sentinel(self, run: Run) -> Write:
        """The run is over (recovery leaves it alone)."""
        return in_thread(checkpoints.touch, paths.executor_sentinel_path(*run))

    def update_record(self, path: str, data: bytes) -> Write:
        """One record appended to a task's `task.updates` (`StatusUpdateManager`)."""
        return in_thread(checkpoints.append_record, path, data)

    def marker(self, path: str) -> Write:
        """An empty file whose existence is the record (a standalone container's id)."""
        return in_thread(checkpoints.touch, path)

    def run(self, agent_id: str, framework_id: str, executor_id: str, container_id: str) -> Run:
        return (self.work_dir, agent_id, framework_id, executor_id, container_id)

