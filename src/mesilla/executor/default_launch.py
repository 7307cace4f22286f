"""How the default executor turns a TaskInfo into a nested container, and its sandbox links.

* LAUNCH_CONTAINER carries the task's command, container, resources and
  limits. As Mesos, the executor adds ``MESOS_CONTAINER_IP`` and
  ``MESOS_ALLOCATION_ROLE`` to the command's environment, and for every disk
  resource with a volume a SANDBOX_PATH volume of type PARENT, so the task
  sees the volume mounted on the executor's container (MESOS-7225).
* The executor sandbox has ``tasks/<task_id>`` -> ``containers/<container>``
  links (the agent's nested sandbox layout), replaced atomically on restart.
* A restarted task keeps its sandbox: the previous attempt's directory is
  renamed to the new container's before the launch (same filesystem, so the
  rename is atomic and the agent finds the directory in place).
"""

from __future__ import annotations

import copy
import logging
import os
import socket
from typing import Any

from mesilla.common import files

log = logging.getLogger(__name__)

Json = dict[str, Any]


def allocation_role(task: Json) -> str | None:
    for resource in task.get("resources", []):
        role: str | None = (resource.get("allocation_info") or {}).get("role")
        if role:
            return role
    return None


def container_ip(agent_host: str) -> str:
    """The address this executor is reached at: the agent's view, as Mesos's libprocess IP."""
    for name in ("MESOS_CONTAINER_IP", "LIBPROCESS_IP"):
        if os.environ.get(name):
            return os.environ[name]
    # A connected UDP socket picks the route to the agent without sending anything.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((agent_host, 9))
            address: str = probe.getsockname()[0]
            return address
        except OSError:
            return "127.0.0.1"


def launch_container_body(task: Json, ip: str) -> tuple[Json, Json | None, list[Json], Json]:
    """(command, container, resources, limits) of the task's LAUNCH_CONTAINER."""
    command = copy.deepcopy(task.get("command") or {})
    variables = command.setdefault("environment", {}).setdefault("variables", [])
    variables.append({"name": "MESOS_CONTAINER_IP", "type": "VALUE", "value": ip})
    role = allocation_role(task)
    if role is not None:
        variables.append({"name": "MESOS_ALLOCATION_ROLE", "type": "VALUE", "value": role})

    container = copy.deepcopy(task["container"]) if task.get("container") else None
    for resource in task.get("resources", []):
        volume = (resource.get("disk") or {}).get("volume")
        if not volume:
            continue
        if container is None:
            container = {"type": "MESOS"}
        container.setdefault("volumes", []).append(
            {
                "mode": volume.get("mode", "RW"),
                "container_path": volume["container_path"],
                "source": {
                    "type": "SANDBOX_PATH",
                    "sandbox_path": {"type": "PARENT", "path": volume["container_path"]},
                },
            }
        )
    return command, container, list(task.get("resources", [])), dict(task.get("limits") or {})


def container_sandbox(sandbox: str, container_id: Json) -> str:
    return os.path.join(sandbox, "containers", container_id["value"])


def link_task_sandbox(sandbox: str, task_id: str, container_id: Json) -> None:
    """Points `tasks/<task_id>` at the container's sandbox (replacing an older link)."""
    tasks = os.path.join(sandbox, "tasks")
    os.makedirs(tasks, exist_ok=True)
    link = os.path.join(tasks, task_id)
    tmp = f"{link}.tmp"
    if os.path.lexists(tmp):
        files.remove_file(tasks, tmp)
    os.symlink(container_sandbox(sandbox, container_id), tmp)
    files.replace(tasks, tmp, link)


def hand_over_sandbox(sandbox: str, previous: Json, current: Json) -> bool:
    """Moves the previous attempt's sandbox to the new container's place; False if there was none."""
    source = container_sandbox(sandbox, previous)
    target = container_sandbox(sandbox, current)
    try:
        files.replace(sandbox, source, target)
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("Could not keep sandbox %s for the restarted container: %s", source, exc)
        return False
    return True
