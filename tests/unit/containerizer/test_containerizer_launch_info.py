"""Merging isolators' launch infos and deriving argv and environment."""

from __future__ import annotations

import json

import pytest

from mesilla.containerizer.launch_info import (
    DEFAULT_PATH,
    command_argv,
    container_environment,
    merge_launch_infos,
    own_executor_arguments,
)
from mesilla.containerizer.launcher.oci import DEFAULT_CAPABILITIES
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo, Mount
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    Environment,
    EnvironmentVariable,
    TaskID,
    TaskInfo,
)


def test_merge_later_isolators_win_and_collections_accumulate() -> None:
    first = ContainerLaunchInfo(
        environment={"A": "1", "B": "1"},
        working_directory="/first",
        mounts=[Mount("/a", "/a")],
        clone_namespaces={"pid"},
        rlimits=[("RLMT_NOFILE", 1, 2)],
        cgroup_resources={"memory": {"limit": 100}, "cpu": {"shares": 1024}},
    )
    second = ContainerLaunchInfo(
        environment={"B": "2"},
        mounts=[Mount("/b", "/b")],
        clone_namespaces={"mount"},
        cgroup_resources={"memory": {"swap": 100}},
        user="nobody",
    )
    merged = merge_launch_infos([first, second])
    assert merged.environment == {"A": "1", "B": "2"}
    assert merged.working_directory == "/first"
    assert [m.source for m in merged.mounts] == ["/a", "/b"]
    assert merged.clone_namespaces == {"pid", "mount"}
    assert merged.rlimits == [("RLMT_NOFILE", 1, 2)]
    assert merged.cgroup_resources == {
        "memory": {"limit": 100, "swap": 100},
        "cpu": {"shares": 1024},
    }
    assert merged.user == "nobody"
    # The isolators' own objects are left as they were.
    assert first.cgroup_resources["memory"] == {"limit": 100}


def test_argv_shell_and_executable() -> None:
    shell = ContainerConfig(command=CommandInfo(value="echo hi"), sandbox="/s")
    assert command_argv(shell, ContainerLaunchInfo()) == ["/bin/sh", "-c", "echo hi"]
    plain = ContainerConfig(
        command=CommandInfo(shell=False, value="/bin/echo", arguments=["echo", "a", "b"]),
        sandbox="/s",
    )
    assert command_argv(plain, ContainerLaunchInfo()) == ["/bin/echo", "a", "b"]
    bare = ContainerConfig(command=CommandInfo(shell=False, value="/bin/true"), sandbox="/s")
    assert command_argv(bare, ContainerLaunchInfo()) == ["/bin/true"]
    # An isolator's command (docker/runtime's entrypoint) replaces the configured one.
    replaced = ContainerLaunchInfo(command=CommandInfo(shell=False, value="/entry"))
    assert command_argv(shell, replaced) == ["/entry"]


def test_argv_needs_a_value() -> None:
    with pytest.raises(ValueError, match="value"):
        command_argv(ContainerConfig(command=CommandInfo(), sandbox="/s"), ContainerLaunchInfo())


def test_environment_precedence() -> None:
    command = CommandInfo(
        value="x",
        environment=Environment(variables=[
            EnvironmentVariable(name="SHARED", value="command"),
            EnvironmentVariable(name="SECRET", type="SECRET"),
        ]),
    )  # fmt: skip
    config = ContainerConfig(
        command=command, sandbox="/s", environment={"SHARED": "agent", "AGENT": "1"}
    )
    env = container_environment(config, ContainerLaunchInfo(environment={"ISO": "1"}), "/sb")
    assert env == {
        "SHARED": "command",
        "AGENT": "1",
        "ISO": "1",
        "MESOS_SANDBOX": "/sb",
        "PATH": DEFAULT_PATH,
    }


def test_command_task_with_rootfs_keeps_the_executor_on_the_host() -> None:
    task = TaskInfo(name="t", task_id=TaskID(value="t"), agent_id=AgentID(value="a"))
    config = ContainerConfig(
        command=CommandInfo(value="x"), sandbox="/s", task_info=task, rootfs="/images/r1",
        user="alice",
    )  # fmt: skip
    info = ContainerLaunchInfo(rootfs="/images/r1")
    arguments = own_executor_arguments(config, info, "/mnt/mesos/sandbox")
    assert arguments == [
        "--rootfs=/images/r1",
        "--sandbox_directory=/mnt/mesos/sandbox",
        "--task_bounding_capabilities=" + json.dumps(list(DEFAULT_CAPABILITIES)),
        "--user=alice",
    ]
    assert info.rootfs is None and info.user == "root"
    assert [(m.source, m.target) for m in info.mounts] == [("/images/r1", "/images/r1")]
    # The task's volumes go inside its rootfs, after the rootfs itself.
    volumes = ContainerLaunchInfo(mounts=[Mount("/vol", "/data"), Mount("/s", "/images/r1/mnt")])
    own_executor_arguments(config, volumes, "/mnt/mesos/sandbox")
    assert [(m.source, m.target) for m in volumes.mounts] == [
        ("/images/r1", "/images/r1"), ("/vol", "/images/r1/data"), ("/s", "/images/r1/mnt"),
    ]  # fmt: skip
    # Capabilities of its own bound the task's instead of the default set.
    asks = ContainerLaunchInfo(rootfs="/images/r1", capabilities=["CAP_NET_ADMIN"])
    assert '--task_bounding_capabilities=["CAP_NET_ADMIN"]' in own_executor_arguments(
        config, asks, "/mnt/mesos/sandbox"
    )
    # Not a command task, or no image: nothing changes.
    plain = ContainerLaunchInfo(rootfs="/images/r1")
    config.task_info = None
    assert own_executor_arguments(config, plain, "/mnt/mesos/sandbox") == []
    assert plain.rootfs == "/images/r1" and plain.user is None


def test_own_executors_run_as_root_and_give_their_user_to_their_tasks() -> None:
    task = TaskInfo(name="t", task_id=TaskID(value="t"), agent_id=AgentID(value="a"))
    command = ContainerConfig(
        command=CommandInfo(value="x"), sandbox="/s", task_info=task, user="alice",
        executor_as_root=True,
    )  # fmt: skip
    info = ContainerLaunchInfo()
    assert own_executor_arguments(command, info, "/mnt/mesos/sandbox") == ["--user=alice"]
    assert info.user == "root" and info.rootfs is None
    # The default executor: its nested containers take the configured user.
    default = ContainerConfig(
        command=CommandInfo(value="x"), sandbox="/s", user="alice", executor_as_root=True
    )
    info = ContainerLaunchInfo()
    assert own_executor_arguments(default, info, "/mnt/mesos/sandbox") == []
    assert info.user == "root"
    # A custom executor runs as its user.
    custom = ContainerConfig(command=CommandInfo(value="x"), sandbox="/s", user="alice")
    info = ContainerLaunchInfo()
    assert own_executor_arguments(custom, info, "/mnt/mesos/sandbox") == []
    assert info.user is None
