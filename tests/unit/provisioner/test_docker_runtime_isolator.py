"""docker/runtime: Mesos's precedence between CommandInfo and the image config."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mesilla.containerizer.isolators import ISOLATORS
from mesilla.containerizer.isolators.docker.runtime import (
    DockerRuntimeIsolator,
    ImageCommandError,
    launch_command,
)
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    ContainerID,
    Resource,
    TaskID,
    TaskInfo,
)

E = ["/entry", "--flag"]
C = ["/cmd", "arg"]
IMAGES = {
    "E0C0": {},
    "E0C1": {"Cmd": C},
    "E1C0": {"Entrypoint": E},
    "E1C1": {"Entrypoint": E, "Cmd": C},
}
ERROR = "error"
SAME = "unchanged"

# (shell, value, arguments) -> expected (value, arguments) per image column, as Mesos's table.
TABLE: list[tuple[bool, str | None, list[str], dict[str, Any]]] = [
    (
        False,
        None,
        [],
        {
            "E0C0": ERROR,
            "E0C1": ("/cmd", ["/cmd", "arg"]),
            "E1C0": ("/entry", ["/entry", "--flag"]),
            "E1C1": ("/entry", ["/entry", "--flag", "/cmd", "arg"]),
        },
    ),
    (
        False,
        None,
        ["user1", "user2"],
        {
            "E0C0": ERROR,
            "E0C1": ("/cmd", ["/cmd", "user1", "user2"]),
            "E1C0": ("/entry", ["/entry", "--flag", "user1", "user2"]),
            "E1C1": ("/entry", ["/entry", "--flag", "user1", "user2"]),
        },
    ),
    (False, "/bin/value", [], dict.fromkeys(IMAGES, SAME)),
    (False, "/bin/value", ["v", "a"], dict.fromkeys(IMAGES, SAME)),
    (True, None, [], dict.fromkeys(IMAGES, ERROR)),
    (True, None, ["a"], dict.fromkeys(IMAGES, ERROR)),
    (True, "echo hi", [], dict.fromkeys(IMAGES, SAME)),
    (True, "echo hi", ["a"], dict.fromkeys(IMAGES, SAME)),
]


@pytest.mark.parametrize(("shell", "value", "arguments", "expected"), TABLE)
@pytest.mark.parametrize("column", list(IMAGES))
def test_precedence_table(
    shell: bool,
    value: str | None,
    arguments: list[str],
    expected: dict[str, Any],
    column: str,
) -> None:
    command = CommandInfo(shell=shell, value=value, arguments=arguments)
    want = expected[column]
    if want == ERROR:
        with pytest.raises(ImageCommandError):
            launch_command(command, IMAGES[column])
        return
    result = launch_command(command, IMAGES[column])
    if want == SAME:
        assert result is None
    else:
        assert result is not None and (
            result.value,
            result.arguments,
            result.shell,
        ) == (*want, False)


def image_config(**config: Any) -> dict[str, Any]:
    return {"architecture": "amd64", "os": "linux", "config": config}


async def test_environment_working_directory_and_user_from_the_image() -> None:
    config = ContainerConfig(
        command=CommandInfo(shell=False),
        sandbox="/sandbox",
        image_config=image_config(
            Env=["PATH=/bin", "EQ=a=b", "BROKEN"],
            WorkingDir="/work",
            User="nobody",
            Cmd=["/bin/sh"],
        ),
    )

    info = await DockerRuntimeIsolator().prepare(ContainerID(value="c"), config)

    assert info is not None
    assert info.environment == {"PATH": "/bin", "EQ": "a=b"}
    assert info.working_directory == "/work"
    assert info.user == "nobody"
    assert info.command is not None and info.command.value == "/bin/sh"


async def test_framework_user_wins_over_the_image_user() -> None:
    config = ContainerConfig(
        command=CommandInfo(value="true"),
        sandbox="/s",
        user="alice",
        image_config=image_config(User="nobody", WorkingDir=""),
    )
    info = await DockerRuntimeIsolator().prepare(ContainerID(value="c"), config)
    assert info is not None and info.user is None and info.working_directory is None
    assert info.command is None  # shell command runs as given


async def test_container_without_image_is_left_alone() -> None:
    config = ContainerConfig(command=CommandInfo(value="true"), sandbox="/s")
    assert await DockerRuntimeIsolator().prepare(ContainerID(value="c"), config) is None


async def test_command_task_gets_its_settings_as_command_executor_flags() -> None:
    executor = CommandInfo(
        shell=False, value="/usr/libexec/mesilla/executor", arguments=["executor"]
    )
    task = TaskInfo(
        name="t",
        task_id=TaskID(value="t"),
        agent_id=AgentID(value="a"),
        resources=[Resource(name="cpus", type="SCALAR")],
        command=CommandInfo(shell=False, arguments=["x"]),
    )
    config = ContainerConfig(
        command=executor,
        sandbox="/s",
        task_info=task,
        image_config=image_config(Entrypoint=["/entry"], Env=["K=V"], WorkingDir="/w"),
    )

    info = await DockerRuntimeIsolator().prepare(ContainerID(value="c"), config)

    assert info is not None and info.command is not None
    assert info.environment == {} and info.working_directory is None
    assert info.command.value == executor.value
    extra = info.command.arguments[1:]
    assert extra[0] == "--task_environment=" + json.dumps(
        {"variables": [{"name": "K", "value": "V"}]}, separators=(",", ":")
    )
    assert extra[1] == "--working_directory=/w"
    task_command = json.loads(extra[2].removeprefix("--task_command="))
    assert task_command == {
        "shell": False,
        "value": "/entry",
        "arguments": ["/entry", "x"],
    }


def test_registered_under_its_mesos_name() -> None:
    assert ISOLATORS["docker/runtime"].endswith("docker.runtime:DockerRuntimeIsolator")


async def test_command_task_without_a_command_gets_only_environment_flags() -> None:
    executor = CommandInfo(shell=False, value="/executor", arguments=["executor"])
    task = TaskInfo(name="t", task_id=TaskID(value="t"), agent_id=AgentID(value="a"))
    config = ContainerConfig(
        command=executor,
        sandbox="/s",
        task_info=task,
        image_config=image_config(Entrypoint=["/entry"], Env=["K=V"]),
    )

    info = await DockerRuntimeIsolator().prepare(ContainerID(value="c"), config)

    assert info is not None and info.command is not None
    assert [a.split("=", 1)[0] for a in info.command.arguments] == [
        "executor",
        "--task_environment",
    ]
