"""Images end to end: the containerizer (linux launcher, filesystem/linux and
docker/runtime isolators) runs containers from an image pulled from a real
registry, with the image's Entrypoint, Cmd, Env and WorkingDir applied."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.unit.executor.fake_agent import FakeAgent, launch_event

from mesilla.common.flags import parse
from mesilla.containerizer.containerizer import Containerizer, LaunchResult
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.types import ContainerConfig
from mesilla.testing.images import build_image, push_image
from mesilla.testing.registry import Registry
from mesilla.v1 import codec
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    ContainerID,
    ContainerInfo,
    Image,
    ImageDocker,
    MesosInfo,
    TaskID,
    TaskInfo,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.registry,
    pytest.mark.usefixtures("no_leftover_mounts"),
]


@pytest.fixture
async def containerizer(
    tmp_path: Path, docker_registry: Registry
) -> AsyncIterator[Containerizer]:
    flags = parse(
        CONTAINERIZER_FLAGS,
        [
            f"--runtime_dir={tmp_path}/runtime",
            "--launcher=linux",
            "--isolation=filesystem/linux,docker/runtime",
            "--image_providers=docker",
            f"--docker_store_dir={tmp_path}/store/docker",
            f"--docker_registry={docker_registry.url}",
            "--image_provisioner_backend=overlay",
        ],
        environ={},
    )
    containerizer = await Containerizer.create(flags)
    await containerizer.recover(set())
    try:
        yield containerizer
    finally:
        for container_id in containerizer.containers():
            await containerizer.destroy(container_id)
        await containerizer.close()


@pytest.fixture(scope="module")
def entrypoint_image(docker_registry: Registry) -> str:
    image = build_image(
        with_whiteouts=True,
        entrypoint=["/bin/sh", "-c"],
        cmd=["echo default command"],
        env=["PATH=/bin", "FROM_IMAGE=yes"],
        working_dir="/opt",
    )
    push_image(docker_registry.url, "e2e/entrypoint", "latest", image)
    return f"{docker_registry.host}/e2e/entrypoint:latest"


async def run(
    containerizer: Containerizer,
    tmp_path: Path,
    name: str,
    image: str,
    command: CommandInfo,
) -> str:
    sandbox = tmp_path / name
    sandbox.mkdir()
    container_id = ContainerID(value=name)
    config = ContainerConfig(
        command=command,
        sandbox=str(sandbox),
        container_info=ContainerInfo(
            type="MESOS",
            mesos=MesosInfo(image=Image(type="DOCKER", docker=ImageDocker(name=image))),
        ),
    )
    try:
        assert await containerizer.launch(container_id, config) == LaunchResult.SUCCESS
        termination = await containerizer.wait(container_id)
    finally:
        await containerizer.destroy(container_id)
    assert termination is not None and termination.status == 0, (
        sandbox / "stderr"
    ).read_text()
    return (sandbox / "stdout").read_text()


async def test_image_entrypoint_and_cmd_run_by_default(
    containerizer: Containerizer, tmp_path: Path, entrypoint_image: str
) -> None:
    output = await run(
        containerizer, tmp_path, "default", entrypoint_image, CommandInfo(shell=False)
    )
    assert output == "default command\n"


async def test_arguments_replace_cmd_and_image_config_applies(
    containerizer: Containerizer, tmp_path: Path, entrypoint_image: str
) -> None:
    script = (
        "echo $FROM_IMAGE; pwd; cat /etc/upper-marker; ls /opt/dir; "
        "test -e /etc/removed-by-upper || echo whiteout honoured; "
        "test -d /mnt/mesos/sandbox && echo sandbox mounted"
    )
    output = await run(
        containerizer,
        tmp_path,
        "arguments",
        entrypoint_image,
        CommandInfo(shell=False, arguments=[script]),
    )
    assert (
        output == "yes\n/opt\nupper\nupper-file\nwhiteout honoured\nsandbox mounted\n"
    )


async def test_shell_command_ignores_the_entrypoint(
    containerizer: Containerizer, tmp_path: Path, entrypoint_image: str
) -> None:
    output = await run(
        containerizer,
        tmp_path,
        "shell",
        entrypoint_image,
        CommandInfo(shell=True, value="echo from the shell; echo $FROM_IMAGE"),
    )
    assert output == "from the shell\nyes\n"
    assert os.path.isdir(tmp_path / "store" / "docker" / "layers" / "sha256")


@pytest.fixture
async def agent(unused_port: int) -> AsyncIterator[FakeAgent]:
    fake = FakeAgent(unused_port)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


async def test_command_task_runs_the_image_entrypoint(
    containerizer: Containerizer,
    agent: FakeAgent,
    tmp_path: Path,
    entrypoint_image: str,
) -> None:
    # A command task with shell=false and no value: the image decides what runs,
    # passed to the command executor as --task_command (as Mesos).
    task_command = CommandInfo(shell=False, arguments=["echo $FROM_IMAGE in $PWD"])
    sandbox = tmp_path / "task"
    sandbox.mkdir()
    config = ContainerConfig(
        command=CommandInfo(
            shell=False,
            value=sys.executable,
            arguments=[sys.executable, "-m", "mesilla.executor.command"],
        ),
        sandbox=str(sandbox),
        environment={**os.environ, **agent.environ(MESOS_DIRECTORY=str(sandbox))},
        task_info=TaskInfo(
            name="t",
            task_id=TaskID(value="t1"),
            agent_id=AgentID(value="a"),
            command=task_command,
        ),
        container_info=ContainerInfo(
            type="MESOS",
            mesos=MesosInfo(
                image=Image(type="DOCKER", docker=ImageDocker(name=entrypoint_image))
            ),
        ),
    )
    container_id = ContainerID(value="executor")
    try:
        assert await containerizer.launch(container_id, config) == LaunchResult.SUCCESS
        await asyncio.wait_for(agent.subscribed.wait(), 30)
        agent.send(launch_event("t1", codec.to_builtins(task_command)))
        statuses = [await agent.next_update()]
        while statuses[-1]["state"] in ("TASK_STARTING", "TASK_RUNNING"):
            statuses.append(await agent.next_update())
        assert statuses[-1]["state"] == "TASK_FINISHED", statuses[-1].get("message")
    finally:
        await containerizer.destroy(container_id)
    assert "yes in /opt\n" in (sandbox / "stdout").read_text()
