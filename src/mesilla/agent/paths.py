"""The agent's on-disk layout, as Mesos's `src/slave/paths.hpp` lays it out.

Two trees live under ``--work_dir``:

* sandboxes: ``slaves/<agent>/frameworks/<fw>/executors/<exec>/runs/<container>/``
  (plus a ``runs/latest`` symlink to the newest run);
* checkpoints: ``meta/`` with ``boot_id``, ``slaves/latest`` and, per agent,
  ``slave.info``, ``frameworks/<fw>/framework.info``,
  ``executors/<exec>/executor.info``, ``runs/<container>/pids/forked.pid``,
  ``runs/<container>/http.marker``, ``runs/<container>/executor.sentinel`` and
  ``runs/<container>/tasks/<task>/{task.info,task.updates}``; while the tasks
  of a task group are being checkpointed, ``runs/<container>/task_group.pending``
  (Mesilla's own: it makes a group's checkpoint all-or-nothing).

Every function only builds paths; nothing here touches the disk except
`update_latest_symlink`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from mesilla.common import files

LATEST = "latest"


def meta_dir(work_dir: str) -> str:
    return os.path.join(work_dir, "meta")


def boot_id_path(work_dir: str) -> str:
    return os.path.join(meta_dir(work_dir), "boot_id")


def latest_agent_path(work_dir: str) -> str:
    """`meta/slaves/latest`: a symlink to the current agent's meta directory."""
    return os.path.join(meta_dir(work_dir), "slaves", LATEST)


# The checkpoint tree mirrors the sandboxes' under `meta/`.


def agent_meta_dir(work_dir: str, agent_id: str) -> str:
    return agent_dir(meta_dir(work_dir), agent_id)


def agent_info_path(work_dir: str, agent_id: str) -> str:
    return os.path.join(agent_meta_dir(work_dir, agent_id), "slave.info")


def framework_meta_dir(work_dir: str, agent_id: str, framework_id: str) -> str:
    return framework_dir(meta_dir(work_dir), agent_id, framework_id)


def framework_info_path(work_dir: str, agent_id: str, framework_id: str) -> str:
    return os.path.join(framework_meta_dir(work_dir, agent_id, framework_id), "framework.info")


def executor_meta_dir(work_dir: str, agent_id: str, framework_id: str, executor_id: str) -> str:
    return executor_dir(meta_dir(work_dir), agent_id, framework_id, executor_id)


def executor_info_path(work_dir: str, agent_id: str, framework_id: str, executor_id: str) -> str:
    return os.path.join(
        executor_meta_dir(work_dir, agent_id, framework_id, executor_id), "executor.info"
    )


def run_meta_dir(
    work_dir: str, agent_id: str, framework_id: str, executor_id: str, container_id: str
) -> str:
    return executor_run_dir(meta_dir(work_dir), agent_id, framework_id, executor_id, container_id)


#: The path of one file of a run's checkpoint, from the run's (work_dir, agent_id,
#: framework_id, executor_id, container_id).
RunFile = Callable[[str, str, str, str, str], str]


def _run_file(*names: str) -> RunFile:
    def path(work_dir: str, agent_id: str, framework_id: str, executor_id: str, container_id: str) -> str:
        return os.path.join(run_meta_dir(work_dir, agent_id, framework_id, executor_id, container_id), *names)

    return path


forked_pid_path = _run_file("pids", "forked.pid")
#: The UPID of a v0 (libprocess) executor, which a restarted agent reconnects to.
libprocess_pid_path = _run_file("pids", "libprocess.pid")
#: Present once the executor subscribed over HTTP (all of Mesilla's executors do).
http_marker_path = _run_file("http.marker")
#: Present once the run has completed, so recovery does not wait for it.
executor_sentinel_path = _run_file("executor.sentinel")
#: The ids of a task group whose tasks are being checkpointed; gone once all are.
pending_task_group_path = _run_file("task_group.pending")


def task_meta_dir(
    work_dir: str,
    agent_id: str,
    framework_id: str,
    executor_id: str,
    container_id: str,
    task_id: str,
) -> str:
    return run_task_dir(run_meta_dir(work_dir, agent_id, framework_id, executor_id, container_id), task_id)


def run_task_dir(run_meta: str, task_id: str) -> str:
    """A task's checkpoint directory under its run's (`run_meta_dir`): recovery reads a
    thousand tasks, and building each path from the work directory up was a third of it."""
    return os.path.join(run_meta, "tasks", task_id)


#: The path of one file of a task's checkpoint, from its run's ids and the task's.
TaskFile = Callable[[str, str, str, str, str, str], str]


def _task_file(name: str) -> TaskFile:
    def path(
        work_dir: str, agent_id: str, framework_id: str, executor_id: str, container_id: str, task_id: str
    ) -> str:
        task = task_meta_dir(work_dir, agent_id, framework_id, executor_id, container_id, task_id)
        return os.path.join(task, name)

    return path


TASK_INFO = "task.info"
#: The task's status updates, appended as they come.
TASK_UPDATES = "task.updates"
task_info_path = _task_file(TASK_INFO)
task_updates_path = _task_file(TASK_UPDATES)


# --- sandboxes ---------------------------------------------------------------------


def agent_dir(work_dir: str, agent_id: str) -> str:
    return os.path.join(work_dir, "slaves", agent_id)


def framework_dir(work_dir: str, agent_id: str, framework_id: str) -> str:
    return os.path.join(agent_dir(work_dir, agent_id), "frameworks", framework_id)


def executor_dir(work_dir: str, agent_id: str, framework_id: str, executor_id: str) -> str:
    return os.path.join(framework_dir(work_dir, agent_id, framework_id), "executors", executor_id)


def executor_run_dir(
    work_dir: str, agent_id: str, framework_id: str, executor_id: str, container_id: str
) -> str:
    """The executor's sandbox for one run (container)."""
    return os.path.join(
        executor_dir(work_dir, agent_id, framework_id, executor_id), "runs", container_id
    )


def executor_latest_run_path(
    work_dir: str, agent_id: str, framework_id: str, executor_id: str
) -> str:
    return os.path.join(executor_dir(work_dir, agent_id, framework_id, executor_id), "runs", LATEST)


def executor_virtual_path(framework_id: str, executor_id: str) -> str:
    """The path under which `/files` serves an executor's latest sandbox."""
    return f"/frameworks/{framework_id}/executors/{executor_id}/runs/{LATEST}"


def update_latest_symlink(link: str, target: str) -> None:
    """Points `link` at `target`, replacing an old link atomically (symlink + rename).

    The link is made under a temporary name (`files.TMP_PREFIX`), which the
    checkpoint listings skip if a crash leaves it behind."""
    directory, name = os.path.split(link)
    tmp = os.path.join(directory, f"{files.TMP_PREFIX}{name}.{os.getpid()}")
    if os.path.lexists(tmp):
        files.remove_file(directory, tmp)
    os.symlink(target, tmp)
    files.replace(directory, tmp, link)
