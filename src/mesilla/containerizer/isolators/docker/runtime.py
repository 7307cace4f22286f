"""The docker/runtime isolator: a docker image's runtime config (Entrypoint, Cmd,
Env, WorkingDir, User) applied to the container's launch, as Mesos's
`isolators/docker/runtime.cpp` does.

The launch command follows Mesos's table against the CommandInfo:
- `shell=true`: the command runs as given (`/bin/sh -c value`); no value is an error.
- `shell=false` with a `value`: the command runs as given.
- `shell=false` without a `value`: the image decides. With an Entrypoint, it is
  the executable and argv starts with it; the CommandInfo's arguments follow, or
  the image's Cmd when there are none. Without an Entrypoint, Cmd[0] is the
  executable; the CommandInfo's arguments follow, or the rest of Cmd. An image
  with neither cannot run.

For a command task (the container runs the command executor for `task_info`),
the task's command, working directory and environment go to the command
executor as `--task_command`, `--working_directory` and `--task_environment`
arguments appended to its own command; for any other container (custom or
default executor, nested container) they replace the container's own.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from mesilla.common.flags import Flags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1 import codec
from mesilla.v1.mesos import CommandInfo, ContainerID, Environment, EnvironmentVariable

log = logging.getLogger(__name__)


class ImageCommandError(ValueError):
    """The CommandInfo and the image config together give nothing to run."""


class DockerRuntimeIsolator(Isolator):
    name = "docker/runtime"
    supports_nesting = True

    def __init__(self, flags: Flags | None = None) -> None:
        self.flags = flags

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        if config.image_config is None:
            return None  # no docker image: nothing to apply
        return launch_info(
            container_id, config, config.image_config.get("config") or {}
        )


def launch_info(
    container_id: ContainerID, config: ContainerConfig, image: dict[str, Any]
) -> ContainerLaunchInfo:
    """What the image config `image` (the `config` object of an image's config blob)
    contributes to launching `config`."""
    environment = image_environment(image, container_id)
    working_directory = image.get("WorkingDir") or None
    if config.task_info is None:
        command = launch_command(config.command, image)
    elif config.task_info.command is not None:
        command = launch_command(config.task_info.command, image)
    else:
        command = None  # a task without a command: nothing to derive
    info = ContainerLaunchInfo(user=_image_user(config, image))
    if config.task_info is None:
        info.environment = environment
        info.working_directory = working_directory
        info.command = command
        return info
    # A command task: the command executor runs the task and gets its settings as flags.
    arguments: list[str] = []
    if environment:
        variables = [
            EnvironmentVariable(name=k, value=v) for k, v in environment.items()
        ]
        arguments.append(
            "--task_environment="
            + codec.encode(Environment(variables=variables)).decode()
        )
    if working_directory:
        arguments.append(f"--working_directory={working_directory}")
    if command is not None:
        arguments.append("--task_command=" + codec.encode(command).decode())
    if arguments:
        executor = config.command
        info.command = msgspec.structs.replace(
            executor, arguments=[*executor.arguments, *arguments]
        )
    return info


def launch_command(command: CommandInfo, image: dict[str, Any]) -> CommandInfo | None:
    """The command to run instead of `command`, or None when `command` runs as given."""
    if command.shell:
        if not command.value:
            raise ImageCommandError("Shell specified but no command value provided")
        return None
    if command.value:
        return None
    entrypoint: list[str] = image.get("Entrypoint") or []
    cmd: list[str] = image.get("Cmd") or []
    if entrypoint:
        arguments = [*entrypoint, *(command.arguments or cmd)]
        return msgspec.structs.replace(
            command, value=entrypoint[0], arguments=arguments
        )
    if cmd:
        arguments = [cmd[0], *(command.arguments or cmd[1:])]
        return msgspec.structs.replace(command, value=cmd[0], arguments=arguments)
    raise ImageCommandError(
        "No executable is found: the command has no value and the image has neither "
        "Entrypoint nor Cmd; set CommandInfo.value"
    )


def image_environment(
    image: dict[str, Any], container_id: ContainerID
) -> dict[str, str]:
    environment: dict[str, str] = {}
    for entry in image.get("Env") or []:
        name, equals, value = entry.partition("=")
        if not equals:
            log.debug(
                "Skipping invalid variable '%s' in the image of %s", entry, container_id
            )
            continue
        environment[name] = value
    return environment


def _image_user(config: ContainerConfig, image: dict[str, Any]) -> str | None:
    """The image's User, unless the framework chose one (which wins, as in Mesos)."""
    if config.user or config.command.user:
        return None
    return image.get("User") or None
