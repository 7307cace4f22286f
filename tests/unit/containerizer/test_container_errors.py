"""A container failure is typed by whose fault it is: the registry's (503), the agent's own
machinery's (500), else what was asked for (400); the lower error stays the cause."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from mesilla.common.errors import (
    ContainerError,
    ContainerLaunchError,
    ImageUnavailable,
    InvalidContainer,
    UnknownContainer,
)
from mesilla.common.flags import parse
from mesilla.containerizer.containerizer import Containerizer
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.isolators.network.cni_plugin import PluginError
from mesilla.containerizer.isolators.network.cni_spec import CniError
from mesilla.containerizer.launcher.base import LaunchError
from mesilla.containerizer.provisioner.errors import RegistryAuthError, RegistryError
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import CommandInfo, ContainerID, ExecutorID, ExecutorInfo, Reason


class FailingIsolator(Isolator):
    """Fails every prepare with `error` (the interface under test is the containerizer's)."""

    name = "test/failing"

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def prepare(self, container_id: ContainerID, config: ContainerConfig) -> ContainerLaunchInfo:
        raise self.error


@pytest.fixture
async def containerizer(tmp_path: Any) -> AsyncIterator[Containerizer]:
    flags = parse(
        CONTAINERIZER_FLAGS, [f"--runtime_dir={tmp_path}/runtime", "--launcher=posix"], environ={}
    )
    c = await Containerizer.create(flags)
    yield c
    for container_id in c.containers():
        await c.destroy(container_id)
    await c.close()


def _config(tmp_path: Any) -> ContainerConfig:
    return ContainerConfig(
        command=CommandInfo(value="true"),
        sandbox=str(tmp_path / "sandbox"),
        executor_info=ExecutorInfo(executor_id=ExecutorID(value="e")),
    )


@pytest.mark.parametrize(
    "error,kind,status",
    [
        (ValueError("no such volume mode 'XX'"), InvalidContainer, 400),
        (CniError("Unknown CNI network(s) nowhere"), InvalidContainer, 400),
        (PluginError("bridge: failed to set up the veth pair"), ContainerLaunchError, 500),
        (RegistryError("Registry request http://r/v2/ failed: connection refused"), ImageUnavailable, 503),
        (RegistryAuthError("registry refused the agent's credentials"), ContainerLaunchError, 500),
        (LaunchError("runc create exited with 1: container init was OOM-killed"), ContainerLaunchError, 500),
    ],
)
async def test_a_launch_failure_is_typed_by_its_cause(
    containerizer: Containerizer, tmp_path: Any, error: Exception, kind: type, status: int
) -> None:
    containerizer._isolators.append(FailingIsolator(error))
    with pytest.raises(ContainerLaunchError) as raised:
        await containerizer.launch(ContainerID(value="c"), _config(tmp_path))
    assert type(raised.value) is kind
    assert raised.value.status == status
    assert raised.value.reason == Reason.REASON_CONTAINER_LAUNCH_FAILED
    assert raised.value.__cause__ is error
    assert raised.value.step == "PREPARING" and str(error) in str(raised.value)
    answer = raised.value.http_error()
    assert (answer.status, answer.reason) == (status, str(raised.value))


async def test_an_unknown_container_is_not_found(containerizer: Containerizer) -> None:
    unknown = ContainerID(value="nobody")
    for call in (
        containerizer.status(unknown),
        containerizer.usage(unknown),
        containerizer.update(unknown, [], {}),
        containerizer.remove(unknown),
    ):
        with pytest.raises(UnknownContainer) as raised:
            await call
        assert isinstance(raised.value, ContainerError) and raised.value.status == 404
        assert raised.value.container_id == unknown


class VanishedCgroup(Isolator):
    """Its usage, status and update fail as a cgroup removed under it would."""

    name = "test/vanished"

    async def usage(self, container_id: ContainerID) -> dict[str, Any]:
        raise FileNotFoundError("memory.stat")

    async def status(self, container_id: ContainerID) -> dict[str, Any]:
        raise FileNotFoundError("net_cls.classid")

    async def update(self, container_id: ContainerID, resources: list[Any], limits: dict[str, float]) -> None:
        raise FileNotFoundError("cpu.max")


async def test_an_isolator_failure_is_a_container_error(containerizer: Containerizer, tmp_path: Any) -> None:
    cid = ContainerID(value="running")
    config = _config(tmp_path)
    config.command = CommandInfo(value="sleep 1000")
    await containerizer.launch(cid, config)
    containerizer._isolators.append(VanishedCgroup())
    for call in (containerizer.usage(cid), containerizer.status(cid), containerizer.update(cid, [], {})):
        with pytest.raises(ContainerError, match="test/vanished") as raised:
            await call
        assert isinstance(raised.value.__cause__, FileNotFoundError)
