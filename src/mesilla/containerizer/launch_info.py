"""Building a container's launch from its config and the isolators' contributions.

The containerizer merges every isolator's `ContainerLaunchInfo` (in isolator
order), then derives the first process's argv and environment from the
result and the `ContainerConfig`, as Mesos's containerizer does before it
forks.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any

from mesilla.containerizer.launcher.oci import DEFAULT_CAPABILITIES
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo, Mount

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def merge_launch_infos(infos: list[ContainerLaunchInfo]) -> ContainerLaunchInfo:
    """Isolators' contributions in order; later ones win for single values."""
    merged = ContainerLaunchInfo()
    for info in infos:
        merged.environment.update(info.environment)
        merged.mounts.extend(info.mounts)
        merged.clone_namespaces |= info.clone_namespaces
        merged.secret_names |= info.secret_names
        merged.enter_namespaces.update(info.enter_namespaces)
        merged.rlimits.extend(info.rlimits)
        _merge_dicts(merged.cgroup_resources, info.cgroup_resources)
        single = ("working_directory", "rootfs", "capabilities", "bounding_capabilities")
        for name in (*single, "command", "user"):
            if getattr(info, name) is not None:
                setattr(merged, name, getattr(info, name))
    return merged


def _merge_dicts(into: dict[str, Any], new: dict[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge_dicts(into[key], value)
        else:
            into[key] = copy.deepcopy(value)  # later merges must not edit an isolator's dict


def command_argv(config: ContainerConfig, launch_info: ContainerLaunchInfo) -> list[str]:
    """The first process's argv: `sh -c value` for shell commands, else `arguments`
    (argv[0] included, as Mesos) run through the executable `value`."""
    command = launch_info.command or config.command
    if command.shell:
        if not command.value:
            raise ValueError("a shell command needs 'value'")
        return ["/bin/sh", "-c", command.value]
    if not command.value:
        raise ValueError("a non-shell command needs 'value' (the executable)")
    if not command.arguments:
        return [command.value]
    # Launchers exec argv[0] by path, so `value` takes the place of arguments[0].
    return [command.value, *command.arguments[1:]]


def container_environment(
    config: ContainerConfig, launch_info: ContainerLaunchInfo, sandbox_dir: str
) -> dict[str, str]:
    """The agent's variables, then the isolators', then the command's own (Mesos's precedence)."""
    env = dict(config.environment)
    env.update(launch_info.environment)
    command = launch_info.command or config.command
    if command.environment is not None:
        for variable in command.environment.variables:
            if variable.type == "VALUE" and variable.value is not None:
                env[variable.name] = variable.value
    env.setdefault("MESOS_SANDBOX", sandbox_dir)
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def _into(rootfs: str, mount: Mount) -> Mount:
    """`mount` with its target, a path in the task's view, inside `rootfs`."""
    if mount.target == rootfs or mount.target.startswith(rootfs.rstrip("/") + "/"):
        return mount  # already there (filesystem/linux's sandbox)
    return dataclasses.replace(mount, target=os.path.join(rootfs, mount.target.lstrip("/")))


def own_executor_arguments(
    config: ContainerConfig, launch_info: ContainerLaunchInfo, sandbox_directory: str
) -> list[str]:
    """Mesilla's own executors' extra arguments; `launch_info` is changed accordingly.

    Such an executor (`config.executor_as_root`) runs as root and its tasks as
    the container's user, unless the container has capabilities of its own:
    the command executor is told the user (`--user`), the default executor's
    nested containers take their parent's user. As
    Mesos, a command task with an image has the command executor stay on the
    host's filesystem (the image need not hold an interpreter) and put only the
    task into the rootfs, with at most the container's bounding set (the OCI
    runtimes' default when it has no capability information, as the linux
    launcher gives any container with an image).
    """
    arguments: list[str] = []
    user = launch_info.user or config.user
    if config.task_info is not None and config.rootfs:
        launch_info.rootfs = None
        # Where the executor's own filesystem is built (linux launcher), the task's
        # rootfs must still be reachable at its host path, with the task's volumes
        # inside it, where the task pivots.
        rootfs = Mount(source=config.rootfs, target=config.rootfs)
        volumes = [_into(config.rootfs, m) for m in launch_info.mounts if m != rootfs]
        launch_info.mounts = [rootfs, *volumes]
        arguments += [f"--rootfs={config.rootfs}", f"--sandbox_directory={sandbox_directory}"]
        bounding = launch_info.bounding_capabilities or launch_info.capabilities
        arguments.append(
            "--task_bounding_capabilities=" + json.dumps(bounding or list(DEFAULT_CAPABILITIES))
        )
    elif not config.executor_as_root or launch_info.capabilities is not None:
        # With the task's capabilities only, an executor might not be able to switch
        # users: it runs as the task's user itself, as Mesos's do.
        return arguments
    if user:
        if config.task_info is not None:
            arguments.append(f"--user={user}")
        launch_info.user = "root"
    return arguments
