"""How the agent describes an executor to the containerizer.

* `command_executor_info`: the ExecutorInfo Mesos makes up for a command task
  (`Slave::getExecutorInfo`): executor id = task id, a descriptive name, the
  task's URIs, environment, labels and container, and Mesilla's command
  executor as the program.
* `executor_environment`: the Mesos executor environment (``MESOS_*``).
* `container_config`: the `ContainerConfig` of an executor's container.
"""

from __future__ import annotations

import os
import sys
import uuid

from mesilla.agent.flags import AgentFlags
from mesilla.common.durations import format_duration
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import (
    CommandInfo,
    ContainerID,
    DurationInfo,
    ExecutorID,
    ExecutorInfo,
    FrameworkInfo,
    Resource,
    TaskInfo,
)

COMMAND_EXECUTOR_MODULE = "mesilla.executor.command"
DEFAULT_EXECUTOR_MODULE = "mesilla.executor.default"

# Mesos pads a command task's kill grace period by the reap interval and one
# second before the agent gives up on its executor.
_KILL_GRACE_PADDING_NS = 2 * 10**9


def _python_module_command(module: str, base: CommandInfo | None = None) -> CommandInfo:
    return CommandInfo(
        uris=base.uris if base else [],
        environment=base.environment if base else None,
        user=base.user if base else None,
        shell=False,
        value=sys.executable,
        arguments=[sys.executable, "-m", module],
    )


def _command_summary(command: CommandInfo | None) -> str:
    if command is None or command.value is None:
        return (
            "(Command: NO COMMAND)"
            if command is None or command.shell
            else "(Command: NO EXECUTABLE)"
        )
    if command.shell:
        value = command.value
        return f"(Command: sh -c '{value if len(value) <= 15 else value[:12] + '...'}')"
    args = ", ".join([command.value, *command.arguments])
    return f"(Command: [{args if len(args) <= 15 else args[:12] + '...'}])"


def command_executor_info(framework: FrameworkInfo, task: TaskInfo) -> ExecutorInfo:
    """The executor of a command task (a TaskInfo with `command` and no `executor`)."""
    grace = None
    if task.kill_policy and task.kill_policy.grace_period:
        grace = DurationInfo(
            nanoseconds=task.kill_policy.grace_period.nanoseconds + _KILL_GRACE_PADDING_NS
        )
    return ExecutorInfo(
        executor_id=ExecutorID(value=task.task_id.value),
        type="CUSTOM",
        framework_id=framework.id,
        command=_python_module_command(COMMAND_EXECUTOR_MODULE, task.command),
        container=task.container,
        name=f"Command Executor (Task: {task.task_id.value}) {_command_summary(task.command)}",
        source=task.task_id.value,
        labels=task.labels,
        discovery=task.discovery,
        shutdown_grace_period=grace,
    )


def executor_command(info: ExecutorInfo) -> CommandInfo:
    """What runs in the executor's container: its own command, or Mesilla's default executor."""
    if info.type == "DEFAULT" and (info.command is None or info.command.value is None):
        return _python_module_command(DEFAULT_EXECUTOR_MODULE, info.command)
    if info.command is None:
        raise ValueError(f"Executor '{info.executor_id.value}' has no command to run")
    return info.command


def shutdown_grace_period(flags: AgentFlags, info: ExecutorInfo) -> float:
    if info.shutdown_grace_period is not None:
        return info.shutdown_grace_period.nanoseconds / 1e9
    return flags.executor_shutdown_grace_period


def has_image(info: ExecutorInfo) -> bool:
    container = info.container
    return bool(container and container.mesos and container.mesos.image)


def _own_network(flags: AgentFlags, info: ExecutorInfo) -> bool:
    named = info.container is not None and any(n.name for n in info.container.network_infos)
    return named or flags.default_network is not None


def executor_environment(
    flags: AgentFlags,
    info: ExecutorInfo,
    *,
    directory: str,
    agent_id: str,
    endpoint: str,
    checkpoint: bool,
) -> dict[str, str]:
    """The environment of an executor's process, as Mesos's `executorEnvironment`.

    As Mesos without ``--executor_environment_variables``, executors inherit the
    agent's environment (minus Mesilla's own flag variables); with it, exactly
    those variables. The Mesos variables come on top and the executor's
    `CommandInfo.environment` last.
    """
    if flags.executor_environment is not None:
        env = dict(flags.executor_environment)
    else:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MESILLA_")}
    env.update(
        {
            "LIBPROCESS_PORT": "0",
            "MESOS_FRAMEWORK_ID": info.framework_id.value if info.framework_id else "",
            "MESOS_EXECUTOR_ID": info.executor_id.value,
            "MESOS_DIRECTORY": directory,
            "MESOS_SANDBOX": flags.sandbox_directory if has_image(info) else directory,
            "MESOS_SLAVE_ID": agent_id,
            "MESOS_AGENT_ID": agent_id,
            "MESOS_SLAVE_PID": f"slave(1)@{endpoint}",
            "MESOS_AGENT_ENDPOINT": endpoint,
            "MESOS_CHECKPOINT": "1" if checkpoint else "0",
            "MESOS_HTTP_COMMAND_EXECUTOR": "1",
            "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": format_duration(
                shutdown_grace_period(flags, info)
            ),
        }
    )
    socket_path = flags.domain_socket
    if socket_path and (flags.http_executor_domain_sockets or _own_network(flags, info)):
        env["MESOS_DOMAIN_SOCKET"] = socket_path
    if checkpoint:
        env["MESOS_RECOVERY_TIMEOUT"] = format_duration(flags.recovery_timeout)
        env["MESOS_SUBSCRIPTION_BACKOFF_MAX"] = format_duration(
            flags.executor_reregistration_timeout
        )
    command = info.command
    if command and command.environment:
        for variable in command.environment.variables:
            if variable.type == "VALUE" and variable.value is not None:
                env[variable.name] = variable.value
    return env


def container_config(
    info: ExecutorInfo,
    *,
    directory: str,
    environment: dict[str, str],
    task: TaskInfo | None,
    resources: list[Resource],
    user: str | None,
    limits: dict[str, float] | None = None,
) -> ContainerConfig:
    return ContainerConfig(
        command=executor_command(info),
        sandbox=directory,
        container_info=info.container,
        resources=resources,
        limits=limits or {},
        environment=environment,
        user=user,
        executor_as_root=info.type == "DEFAULT" or task is not None,
        executor_info=info,
        task_info=task,
        stdout=os.path.join(directory, "stdout"),
        stderr=os.path.join(directory, "stderr"),
    )


def executor_user(flags: AgentFlags, framework: FrameworkInfo, info: ExecutorInfo) -> str | None:
    """Who the executor runs as: as Mesos, its command's user, else its framework's,
    unless the agent runs without --switch_user (then as the agent itself)."""
    if not flags.switch_user:
        return None
    return (info.command.user if info.command else None) or framework.user or None


def new_container_id() -> ContainerID:
    return ContainerID(value=str(uuid.uuid4()))
