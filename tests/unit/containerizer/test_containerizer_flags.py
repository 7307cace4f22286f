"""`ContainerizerFlags`: the containerizer's flags, typed, from the agent's command line."""

from __future__ import annotations

import pytest

from mesilla.cli import _daemon_flags
from mesilla.common import mesos_flags
from mesilla.common.flags import parse
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS, ContainerizerFlags
from mesilla.containerizer.isolators.namespaces.base import NamespaceSharingError
from mesilla.containerizer.isolators.namespaces.pid import PidNamespaceIsolator
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import CommandInfo, ContainerID, ContainerInfo, LinuxInfo


def _agent_flags(*argv: str) -> ContainerizerFlags:
    specs, accepted = _daemon_flags("agent")
    flags = parse(specs, ["--work_dir=/w", "--master=127.0.0.1:5050", *argv], {}, accepted=accepted,
                  aliases=mesos_flags.DEPRECATED)  # fmt: skip
    return ContainerizerFlags.of(flags)


def test_the_defaults_are_the_specs() -> None:
    assert ContainerizerFlags.of(parse(CONTAINERIZER_FLAGS, [], {})) == ContainerizerFlags()


def test_values_come_typed_from_the_agent_command_line() -> None:
    flags = _agent_flags(
        "--image_providers=docker", "--container_disk_watch_interval=2mins",
        "--cgroups_max_pids=64", "--no-fork_default_executors", "--resources=cpus:2",
    )  # fmt: skip
    assert flags.image_providers == ("docker",)
    assert flags.container_disk_watch_interval == 120.0
    assert flags.cgroups_max_pids == 64
    assert flags.fork_default_executors is False
    assert (flags.work_dir, flags.resources, flags.default_role) == ("/w", "cpus:2", "*")
    assert ContainerizerFlags.of(flags) is flags


@pytest.mark.asyncio
async def test_disallow_sharing_agent_pid_namespace_takes_effect() -> None:
    # Once accepted by name only (a Mesos flag "without effect"), so the isolator never saw it.
    config = ContainerConfig(
        command=CommandInfo(value="true"),
        sandbox="/tmp",
        container_info=ContainerInfo(type="MESOS", linux_info=LinuxInfo(share_pid_namespace=True)),
    )
    container_id = ContainerID(value="c")
    allowed = PidNamespaceIsolator(_agent_flags())
    assert await allowed.prepare(container_id, config) is not None
    refused = PidNamespaceIsolator(_agent_flags("--disallow_sharing_agent_pid_namespace"))
    with pytest.raises(NamespaceSharingError, match="disallow_sharing_agent_pid_namespace"):
        await refused.prepare(container_id, config)
