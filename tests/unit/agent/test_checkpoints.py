"""Checkpoint files: the update log, and reading the agent tree back."""

from __future__ import annotations

import os
from typing import Any

import pytest

from mesilla.agent import checkpoints, paths
from mesilla.agent.checkpoints import CheckpointError, UpdateRecord
from mesilla.common import files
from mesilla.v1 import codec
from mesilla.v1.internal import StatusUpdate
from mesilla.v1.mesos import (
    AgentID,
    AgentInfo,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    Task,
    TaskID,
    TaskState,
    TaskStatus,
)


def test_read_message_reports_corruption_naming_the_file(tmp_path: Any) -> None:
    path = str(tmp_path / "framework.info")
    with open(path, "wb") as f:
        f.write(b'{"user": "u", "name": ')  # cut short by a crash
    with pytest.raises(CheckpointError, match=r"framework\.info") as exc:
        checkpoints.read_message(path, FrameworkInfo)
    assert "--strict=false" in str(exc.value)


def _update(task: str, state: TaskState, uid: bytes) -> StatusUpdate:
    return StatusUpdate(
        framework_id=FrameworkID(value="fw"),
        status=TaskStatus(task_id=TaskID(value=task), state=state, uuid=uid),
    )


def test_update_log_drops_a_partial_last_record(tmp_path: Any) -> None:
    path = str(tmp_path / "task.updates")
    first = UpdateRecord(type="UPDATE", update=_update("t", TaskState.TASK_RUNNING, b"1" * 16))
    checkpoints.append_record(path, codec.encode(first))
    with open(path, "ab") as f:
        f.write(b'120\n{"type": "UPD')  # a crash in the middle of an append
    records = checkpoints.read_records(path)
    assert records == [codec.encode(first)]
    # The log was cut back to the record boundary, so appending works again.
    ack = UpdateRecord(type="ACK", uuid=b"1" * 16)
    checkpoints.append_record(path, codec.encode(ack))
    decoded = checkpoints.decode_update_records(path, checkpoints.read_records(path))
    assert [r.type for r in decoded] == ["UPDATE", "ACK"]


def test_update_log_with_garbage_is_corrupt(tmp_path: Any) -> None:
    path = str(tmp_path / "task.updates")
    with open(path, "wb") as f:
        f.write(b"5\nhello")
    with pytest.raises(CheckpointError, match="record 0"):
        checkpoints.decode_update_records(path, checkpoints.read_records(path))


def _write_tree(work_dir: str) -> None:
    info = AgentInfo(hostname="h", id=AgentID(value="A1"))
    checkpoints.checkpoint_agent(work_dir, info)
    fw = FrameworkInfo(user="u", name="n", id=FrameworkID(value="F"), checkpoint=True)
    checkpoints.checkpoint(paths.framework_info_path(work_dir, "A1", "F"), fw)
    ex = ExecutorInfo(executor_id=ExecutorID(value="E"))
    checkpoints.checkpoint(paths.executor_info_path(work_dir, "A1", "F", "E"), ex)
    run = paths.run_meta_dir(work_dir, "A1", "F", "E", "C")
    os.makedirs(run)
    paths.update_latest_symlink(os.path.join(os.path.dirname(run), "latest"), run)
    task = Task(
        name="t",
        task_id=TaskID(value="T"),
        framework_id=FrameworkID(value="F"),
        agent_id=AgentID(value="A1"),
        state=TaskState.TASK_STAGING,
    )
    checkpoints.checkpoint(paths.task_info_path(work_dir, "A1", "F", "E", "C", "T"), task)
    record = UpdateRecord(type="UPDATE", update=_update("T", TaskState.TASK_RUNNING, b"2" * 16))
    checkpoints.append_record(
        paths.task_updates_path(work_dir, "A1", "F", "E", "C", "T"), codec.encode(record)
    )


def test_recover_agent_reads_the_whole_tree(tmp_path: Any) -> None:
    work_dir = str(tmp_path)
    _write_tree(work_dir)
    state = checkpoints.recover_agent(work_dir, strict=True)
    assert state is not None and state.agent_info.id == AgentID(value="A1")
    executor = state.frameworks["F"].executors["E"]
    assert executor.latest == "C"
    task = executor.runs["C"].tasks["T"]
    assert task.task is not None and task.task.name == "t"
    assert [r.update.status.state for r in task.records] == [TaskState.TASK_RUNNING]  # type: ignore[union-attr]


def test_corrupt_checkpoint_is_fatal_only_when_strict(tmp_path: Any) -> None:
    work_dir = str(tmp_path)
    _write_tree(work_dir)
    with open(paths.executor_info_path(work_dir, "A1", "F", "E"), "wb") as f:
        f.write(b"\x00garbage")
    with pytest.raises(CheckpointError, match=r"executor\.info"):
        checkpoints.recover_agent(work_dir, strict=True)
    state = checkpoints.recover_agent(work_dir, strict=False)
    assert state is not None and state.errors == 1
    assert state.frameworks["F"].executors["E"].info is None


def test_changed_boot_id_discards_the_old_agent(tmp_path: Any) -> None:
    work_dir = str(tmp_path)
    _write_tree(work_dir)
    files.write_atomically(paths.boot_id_path(work_dir), b"another-boot")
    assert checkpoints.recover_agent(work_dir, strict=True) is None


def test_no_checkpoint_means_a_new_agent(tmp_path: Any) -> None:
    assert checkpoints.recover_agent(str(tmp_path), strict=True) is None


def test_names_that_are_no_ids_are_skipped_never_followed(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A work dir someone tampered with: bad names are left alone, with a warning."""
    work_dir = str(tmp_path)
    _write_tree(work_dir)
    runs = os.path.dirname(paths.run_meta_dir(work_dir, "A1", "F", "E", "C"))
    os.makedirs(os.path.join(runs, "a.b"))  # a container id has no '.'
    os.makedirs(os.path.join(runs, "C", "tasks", "bad\nname"))
    executors = os.path.dirname(os.path.dirname(runs))
    os.makedirs(os.path.join(executors, "\x01"))
    latest = os.path.join(runs, paths.LATEST)
    os.unlink(latest)
    os.symlink("..", latest)
    state = checkpoints.recover_agent(work_dir, strict=True)
    assert state is not None
    assert list(state.frameworks["F"].executors) == ["E"]
    executor = state.frameworks["F"].executors["E"]
    assert list(executor.runs) == ["C"] and executor.latest is None
    assert list(executor.runs["C"].tasks) == ["T"]
    assert "Skipping 'a.b'" in caplog.text and "Ignoring" in caplog.text


def test_an_agent_link_to_no_id_recovers_nothing(tmp_path: Any) -> None:
    work_dir = str(tmp_path)
    _write_tree(work_dir)
    latest = paths.latest_agent_path(work_dir)
    os.unlink(latest)
    os.symlink("/", latest)
    assert checkpoints.recover_agent(work_dir, strict=True) is None
