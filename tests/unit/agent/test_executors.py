"""The command executor's ExecutorInfo and the executor environment, as Mesos builds them."""

from __future__ import annotations

import sys

import pytest

from mesilla.agent.executors import command_executor_info, executor_environment
from mesilla.agent.flags import AgentFlags
from mesilla.agent.main import AGENT_FLAGS
from mesilla.common.flags import FlagError, parse
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    DurationInfo,
    ExecutorID,
    ExecutorInfo,
    FrameworkID,
    FrameworkInfo,
    KillPolicy,
    TaskID,
    TaskInfo,
)

FRAMEWORK = FrameworkInfo(user="u", name="f", id=FrameworkID(value="F"))


def flags(*extra: str) -> AgentFlags:
    return AgentFlags.from_flags(
        parse(AGENT_FLAGS, ["--master=m:1", "--work_dir=/w", *extra], environ={})
    )


def task(command: str, **kw: object) -> TaskInfo:
    return TaskInfo(
        name="t",
        task_id=TaskID(value="T"),
        agent_id=AgentID(value="A"),
        command=CommandInfo(value=command),
        **kw,  # type: ignore[arg-type]
    )


def test_command_executor_info() -> None:
    info = command_executor_info(FRAMEWORK, task("echo hi"))
    assert info.executor_id.value == "T" and info.source == "T"
    assert info.name == "Command Executor (Task: T) (Command: sh -c 'echo hi')"
    assert info.command is not None and info.command.value == sys.executable
    assert info.command.arguments[-2:] == ["-m", "mesilla.executor.command"]
    long = command_executor_info(FRAMEWORK, task("sleep 1000; echo done"))
    assert long.name == "Command Executor (Task: T) (Command: sh -c 'sleep 1000; ...')"


def test_kill_grace_period_is_padded_for_the_executor() -> None:
    grace = KillPolicy(grace_period=DurationInfo(nanoseconds=3 * 10**9))
    info = command_executor_info(FRAMEWORK, task("x", kill_policy=grace))
    assert info.shutdown_grace_period == DurationInfo(nanoseconds=5 * 10**9)


def test_environment() -> None:
    info = ExecutorInfo(executor_id=ExecutorID(value="E"), framework_id=FrameworkID(value="F"))
    env = executor_environment(
        flags("--recovery_timeout=15mins"),
        info,
        directory="/sb",
        agent_id="A",
        endpoint="127.0.0.1:5051",
        checkpoint=True,
    )
    assert env["MESOS_AGENT_ENDPOINT"] == "127.0.0.1:5051"
    assert env["MESOS_SLAVE_PID"] == "slave(1)@127.0.0.1:5051"
    assert env["MESOS_DIRECTORY"] == env["MESOS_SANDBOX"] == "/sb"
    assert env["MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD"] == "5secs"
    assert env["MESOS_RECOVERY_TIMEOUT"] == "15mins"
    assert env["MESOS_SUBSCRIPTION_BACKOFF_MAX"] == "2secs"
    unchecked = executor_environment(
        flags(), info, directory="/sb", agent_id="A", endpoint="e:1", checkpoint=False
    )
    assert unchecked["MESOS_CHECKPOINT"] == "0" and "MESOS_RECOVERY_TIMEOUT" not in unchecked


def test_executor_environment_variables_replace_the_agents() -> None:
    info = ExecutorInfo(executor_id=ExecutorID(value="E"), framework_id=FrameworkID(value="F"))
    env = executor_environment(
        flags('--executor_environment_variables={"PATH": "/only"}'),
        info,
        directory="/sb",
        agent_id="A",
        endpoint="e:1",
        checkpoint=False,
    )
    assert env["PATH"] == "/only" and "HOME" not in env
    with pytest.raises(FlagError, match="JSON object of strings"):
        executor_environment(
            flags("--executor_environment_variables=[1]"),
            info,
            directory="/sb",
            agent_id="A",
            endpoint="e:1",
            checkpoint=False,
        )
