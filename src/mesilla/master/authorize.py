"""The master's authorization points: who sees what of its state, whose tasks run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from mesilla.common.authentication import principal_of
from mesilla.common.visibility import Viewer
from mesilla.v1.mesos import FrameworkInfo, TaskInfo

if TYPE_CHECKING:
    from mesilla.master.master import Master


def viewer(master: Master, request: web.Request) -> Viewer | None:
    """The request's principal's view of the master's state; None without --acls."""
    if master.authorizer is None:
        return None
    users = {f.id: f.info.user for f in master.completed_frameworks}
    users.update({f.id: f.info.user for f in master.frameworks.values()})
    return Viewer(master.authorizer, principal_of(request), users)


def task_user(task: TaskInfo, framework: FrameworkInfo) -> str:
    """The user a task runs as (Mesos's run_tasks object): its command's, its executor's,
    else its framework's."""
    for command in (task.command, task.executor.command if task.executor else None):
        if command is not None and command.user:
            return command.user
    return framework.user
