"""Crash-safe checkpoint files and reading back the agent's checkpointed state.

Mesos checkpoints protobufs; Mesilla writes the same files (see
`mesilla.agent.paths`) as compact JSON of the v1 messages:

* single-message files (`slave.info`, `framework.info`, `executor.info`,
  `task.info`, `forked.pid`) are replaced atomically: write a temporary file,
  fsync it, rename it over the old one, fsync the directory. A crash leaves
  either the old or the new content, never a mix.
* the tasks of a task group are checkpointed as one unit (`MetaDir.launch`):
  recovery sees all of them or none.
* `task.updates` is an append-only log of RecordIO-framed records, each
  fsync'ed before the update is acted upon. A crash can leave a partial last
  record; reading drops it (the update was never acknowledged to anyone).
  Anything else unreadable is corruption, reported as `CheckpointError`.

`recover_agent` reads the whole tree back. With ``strict`` a corrupt file
stops recovery; otherwise it is logged, counted in `errors` and skipped, as
Mesos's ``--strict=false`` does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

import msgspec

from mesilla.agent import paths
from mesilla.common import files, recordio, secrets
from mesilla.common.errors import BadRequest
from mesilla.common.validation import validate_container_id, validate_id
from mesilla.v1 import codec
from mesilla.v1.internal import StatusUpdate
from mesilla.v1.mesos import AgentInfo, ContainerID, ExecutorInfo, FrameworkInfo, Message, Task

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


class CheckpointError(Exception):
    """A checkpoint file that cannot be read; the message names the file and the problem."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(
            f"Checkpoint '{path}' is unreadable: {problem}. Fix or remove it, or start "
            f"the agent with --strict=false to skip it, or --recover=cleanup"
        )
        self.path = path


# --- primitive I/O -------------------------------------------------------------------


def checkpoint(path: str, message: Message) -> None:
    """Atomically replaces `path` with the JSON of `message`, less its secrets' values."""
    files.write_atomically(path, encode(message))


def encode(message: Message) -> bytes:
    """A checkpoint file's content: the message's JSON, less its secrets' values."""
    return secrets.redact(codec.encode(message))


def read_message(path: str, type_: type[T]) -> T:
    """The message checkpointed at `path`; `CheckpointError` if it is missing or corrupt."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CheckpointError(path, exc.strerror or str(exc)) from None
    try:
        return codec.decode(data, type_)
    except BadRequest as exc:
        raise CheckpointError(path, exc.reason) from None


def touch(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "ab") as f:
        os.fsync(f.fileno())


def append_record(path: str, record: bytes) -> None:
    """Appends one framed record and makes it durable before returning."""
    directory = os.path.dirname(path)
    created = not os.path.exists(path)
    if created:
        os.makedirs(directory, exist_ok=True)
    with open(path, "ab") as f:
        f.write(recordio.encode(record))
        f.flush()
        os.fsync(f.fileno())
    if created:
        files.fsync_directory(directory)


def read_records(path: str) -> list[bytes]:
    """The complete records of an append-only log; a partial last record is cut off.

    The partial tail is also truncated away on disk, so later appends start
    on a record boundary.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CheckpointError(path, exc.strerror or str(exc)) from None
    decoder = recordio.Decoder()
    try:
        records = decoder.feed(data)
    except BadRequest as exc:
        raise CheckpointError(path, exc.reason) from None
    if decoder.pending:
        complete = sum(len(recordio.encode(r)) for r in records)
        log.warning(
            "Truncating a partial record at byte %d of '%s' (left by a crash)", complete, path
        )
        with open(path, "r+b") as f:
            f.truncate(complete)
            os.fsync(f.fileno())
    return records


# --- status update records -------------------------------------------------------------


class UpdateRecord(Message):
    """One entry of `task.updates` (Mesos's StatusUpdateRecord): an update or its ack."""

    type: str  # UPDATE | ACK
    update: StatusUpdate | None = None
    uuid: bytes | None = None


def decode_update_records(path: str, records: list[bytes]) -> list[UpdateRecord]:
    out = []
    for index, raw in enumerate(records):
        try:
            record = msgspec.json.decode(raw, type=UpdateRecord)
        except msgspec.MsgspecError as exc:
            raise CheckpointError(path, f"record {index}: {exc}") from None
        if record.type not in ("UPDATE", "ACK") or (
            (record.update is None) if record.type == "UPDATE" else (record.uuid is None)
        ):
            raise CheckpointError(path, f"record {index} is neither a full UPDATE nor an ACK")
        out.append(record)
    return out


# --- reading back the agent's state ----------------------------------------------------


@dataclass
class TaskCheckpoint:
    task_id: str
    updates_path: str  # its `task.updates`, where its update stream goes on
    task: Task | None = None
    records: list[UpdateRecord] = field(default_factory=list)


@dataclass
class RunCheckpoint:
    container_id: str
    forked_pid: int | None = None
    libprocess_pid: str | None = None  # a v0 executor's UPID
    http: bool = False
    completed: bool = False
    tasks: dict[str, TaskCheckpoint] = field(default_factory=dict)


@dataclass
class ExecutorCheckpoint:
    executor_id: str
    info: ExecutorInfo | None = None
    latest: str | None = None  # the container id `runs/latest` points at
    runs: dict[str, RunCheckpoint] = field(default_factory=dict)


@dataclass
class FrameworkCheckpoint:
    framework_id: str
    info: FrameworkInfo | None = None
    executors: dict[str, ExecutorCheckpoint] = field(default_factory=dict)


@dataclass
class AgentCheckpoint:
    agent_info: AgentInfo
    frameworks: dict[str, FrameworkCheckpoint] = field(default_factory=dict)
    errors: int = 0


def read_boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def listdir_ids(path: str, validate: Callable[[str], None] = validate_id) -> list[str]:
    """The ids checkpointed in `path`; a name that is no valid id is skipped, never followed."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    found = []
    for name in sorted(names):
        if name == paths.LATEST or files.is_temporary(name):
            continue
        try:
            validate(name)
        except BadRequest as exc:
            log.warning("Skipping '%s' in %s during recovery: %s", name, path, exc)
            continue
        found.append(name)
    return found


def validate_container_name(value: str) -> None:
    validate_container_id(ContainerID(value=value))


def _link_target(link: str, validate: Callable[[str], None]) -> str | None:
    """The id a `latest` link names, or None (with a warning) when it names no valid id."""
    name = os.path.basename(os.readlink(link))
    try:
        validate(name)
    except BadRequest as exc:
        log.warning("Ignoring '%s' during recovery: it points at '%s': %s", link, name, exc)
        return None
    return name


class _Reader:
    def __init__(self, work_dir: str, agent_id: str, strict: bool) -> None:
        self.work_dir = work_dir
        self.agent_id = agent_id
        self.strict = strict
        self.errors = 0

    def guarded(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return fn(*args, **kwargs)
        except CheckpointError as exc:
            if self.strict:
                raise
            self.errors += 1
            log.error("Skipping during recovery: %s", exc)
            return None

    def framework(self, fw: str) -> FrameworkCheckpoint:
        state = FrameworkCheckpoint(fw)
        info_path = paths.framework_info_path(self.work_dir, self.agent_id, fw)
        if os.path.exists(info_path):
            state.info = self.guarded(read_message, info_path, FrameworkInfo)
        executors_dir = os.path.join(
            paths.framework_meta_dir(self.work_dir, self.agent_id, fw), "executors"
        )
        for ex in listdir_ids(executors_dir):
            state.executors[ex] = self.executor(fw, ex)
        return state

    def executor(self, fw: str, ex: str) -> ExecutorCheckpoint:
        state = ExecutorCheckpoint(ex)
        info_path = paths.executor_info_path(self.work_dir, self.agent_id, fw, ex)
        if os.path.exists(info_path):
            state.info = self.guarded(read_message, info_path, ExecutorInfo)
        runs_dir = os.path.join(
            paths.executor_meta_dir(self.work_dir, self.agent_id, fw, ex), "runs"
        )
        latest = os.path.join(runs_dir, paths.LATEST)
        if os.path.islink(latest):
            state.latest = _link_target(latest, validate_container_name)
        for cid in listdir_ids(runs_dir, validate_container_name):
            state.runs[cid] = self.run(fw, ex, cid)
        return state

    def run(self, fw: str, ex: str, cid: str) -> RunCheckpoint:
        args = (self.work_dir, self.agent_id, fw, ex, cid)
        state = RunCheckpoint(cid)
        pid_path = paths.forked_pid_path(*args)
        if os.path.exists(pid_path):
            state.forked_pid = self.guarded(_read_pid, pid_path)
        libprocess_path = paths.libprocess_pid_path(*args)
        if os.path.exists(libprocess_path):
            state.libprocess_pid = self.guarded(_read_text, libprocess_path)
        state.http = os.path.exists(paths.http_marker_path(*args))
        state.completed = os.path.exists(paths.executor_sentinel_path(*args))
        run_meta = paths.run_meta_dir(*args)
        tasks_dir = os.path.join(run_meta, "tasks")
        pending = paths.pending_task_group_path(*args)
        if os.path.exists(pending):
            self.guarded(_discard_pending_group, pending, tasks_dir)
        for task_id in listdir_ids(tasks_dir):
            state.tasks[task_id] = self.task(paths.run_task_dir(run_meta, task_id), task_id)
        return state

    def task(self, task_dir: str, task_id: str) -> TaskCheckpoint:
        updates_path = os.path.join(task_dir, paths.TASK_UPDATES)
        state = TaskCheckpoint(task_id, updates_path)
        info_path = os.path.join(task_dir, paths.TASK_INFO)
        if os.path.exists(info_path):
            state.task = self.guarded(read_message, info_path, Task)
        if os.path.exists(updates_path):
            records = self.guarded(
                lambda p: decode_update_records(p, read_records(p)), updates_path
            )
            state.records = records or []
        return state


def _discard_pending_group(pending: str, tasks_dir: str) -> None:
    """Removes the tasks of a group whose checkpoint a crash interrupted, then the marker.

    None of them was launched or reported (that happens only once the whole
    group is checkpointed), so the agent forgets them all and the master
    learns of them as of any task the agent never checkpointed. Removing the
    marker last makes this safe to repeat after another crash.
    """
    try:
        with open(pending, "rb") as f:
            task_ids = msgspec.json.decode(f.read(), type=list[str])
    except (OSError, msgspec.MsgspecError) as exc:
        raise CheckpointError(pending, f"expecting a list of task ids: {exc}") from None
    # Only names found in the directory: the file's content never makes a path.
    discarded = sorted(set(task_ids) & set(listdir_ids(tasks_dir)))
    log.warning(
        "Discarding the partly checkpointed task group %s in '%s' (left by a crash)",
        task_ids,
        tasks_dir,
    )
    for task_id in discarded:
        files.remove_tree(tasks_dir, task_id)
    if discarded:
        files.fsync_directory(tasks_dir)
    files.remove_file(os.path.dirname(pending), pending)
    files.fsync_directory(os.path.dirname(pending))


def _read_pid(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError) as exc:
        raise CheckpointError(path, f"expecting a process id: {exc}") from None


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(path, f"unreadable: {exc}") from None


def recover_agent(work_dir: str, strict: bool) -> AgentCheckpoint | None:
    """The checkpointed agent of this boot, or None if there is none to recover.

    A changed boot id (the host rebooted) means every checkpointed executor is
    gone: the old state is discarded and the agent registers as a new one.
    """
    latest = paths.latest_agent_path(work_dir)
    if not os.path.islink(latest):
        return None
    boot_id_file = paths.boot_id_path(work_dir)
    if os.path.exists(boot_id_file):
        with open(boot_id_file) as f:
            if f.read().strip() != (read_boot_id() or ""):
                log.info("The host rebooted since the last checkpoint: starting as a new agent")
                return None
    agent_id = _link_target(latest, validate_id)
    if agent_id is None:
        return None
    reader = _Reader(work_dir, agent_id, strict)
    info = reader.guarded(read_message, paths.agent_info_path(work_dir, agent_id), AgentInfo)
    if info is None:
        return None
    state = AgentCheckpoint(info)
    for fw in listdir_ids(os.path.join(paths.agent_meta_dir(work_dir, agent_id), "frameworks")):
        state.frameworks[fw] = reader.framework(fw)
    state.errors = reader.errors
    return state


def checkpoint_agent(work_dir: str, info: AgentInfo) -> None:
    """Records the registered agent and the boot it belongs to."""
    assert info.id is not None
    write_agent(work_dir, info.id.value, encode(info))


def write_agent(work_dir: str, agent_id: str, data: bytes) -> None:
    """`slave.info` (`data`), the boot id and the `latest` link to the agent's tree."""
    files.write_atomically(paths.agent_info_path(work_dir, agent_id), data)
    boot_id = read_boot_id()
    if boot_id is not None:
        files.write_atomically(paths.boot_id_path(work_dir), boot_id.encode())
    paths.update_latest_symlink(
        paths.latest_agent_path(work_dir), paths.agent_meta_dir(work_dir, agent_id)
    )


@dataclass
class LaunchCheckpoint:
    """The files of one launch (`MetaDir.launch`): `framework.info` and, for a
    new executor, `executor.info` and the run as its `runs/latest`; the tasks
    (a task, or a task group) as a unit.

    `write` writes the files of each step in one batch
    (`files.write_all_atomically`), renamed in order, so a killed agent
    leaves a prefix (and a crashed host, on a journaling file system that
    commits renames in order): never a task without its framework and
    executor. A group's `task.info` files are written while `task_group.pending` lists them, and that file
    goes once all are durable. Recovery discards the tasks a pending file
    still lists, so a crash at any instant leaves the whole group checkpointed
    or none of it, as a pod is launched as one unit.
    """

    first: list[tuple[str, bytes]]
    latest: tuple[str, str] | None  # (link, run directory)
    pending: tuple[str, bytes] | None
    tasks: list[tuple[str, bytes]]

    def write(self) -> None:
        """Durable on return."""
        if self.pending is None:
            files.write_all_atomically(self.first + self.tasks)
            self._link_latest()
            return
        files.write_all_atomically([*self.first, self.pending])
        self._link_latest()
        files.write_all_atomically(self.tasks)
        files.remove_file(os.path.dirname(self.pending[0]), self.pending[0])
        files.fsync_directory(os.path.dirname(self.pending[0]))

    def _link_latest(self) -> None:
        # After the batch that created the run's directory: recovery ignores
        # the run (and its tasks) until the link is there.
        if self.latest is not None:
            link, run_dir = self.latest
            paths.update_latest_symlink(link, run_dir)
            files.fsync_directory(os.path.dirname(link))


class MetaDir:
    """The paths and contents of one agent's checkpoints (`Checkpointer` writes them)."""

    def __init__(self, work_dir: str, agent_id: str) -> None:
        self.work_dir = work_dir
        self.agent_id = agent_id

    def _run(
        self, framework_id: str, executor_id: str, container_id: str
    ) -> tuple[str, str, str, str, str]:
        return (self.work_dir, self.agent_id, framework_id, executor_id, container_id)

    def launch(
        self,
        executor_id: str,
        container_id: str,
        tasks: list[Task],
        *,
        framework: FrameworkInfo | None = None,
        executor: ExecutorInfo | None = None,
    ) -> LaunchCheckpoint:
        """The checkpoint of one launch, encoded now (the messages may change
        once the caller goes on), to `write` in any thread."""
        fw = tasks[0].framework_id.value
        run = self._run(fw, executor_id, container_id)
        first: list[tuple[str, bytes]] = []
        if framework is not None:
            path = paths.framework_info_path(self.work_dir, self.agent_id, fw)
            first.append((path, encode(framework)))
        latest = None
        if executor is not None:
            first.append((paths.executor_info_path(*run[:4]), encode(executor)))
            run_dir = paths.run_meta_dir(*run)
            latest = (os.path.join(os.path.dirname(run_dir), paths.LATEST), run_dir)
        task_files = [(paths.task_info_path(*run, t.task_id.value), encode(t)) for t in tasks]
        pending = None
        if len(tasks) > 1:
            ids = msgspec.json.encode([t.task_id.value for t in tasks])
            pending = (paths.pending_task_group_path(*run), ids)
        return LaunchCheckpoint(first, latest, pending, task_files)
