"""environment_secret: secret environment variables resolved into the container's
environment at launch, as Mesos's isolator (always loaded, as in Mesos).

Each `CommandInfo.environment` variable of type SECRET gets its secret's value
(`common/secrets.py`: a VALUE secret's decoded data; a REFERENCE one fails the
launch, there being no secret resolver). For a command task the agent copies
the task's environment into its executor's command, as Mesos does, so the
executor has the variable and its task inherits it. The names go into
`secret_names`, which keeps the values out of every file the containerizer
and launcher write.
"""

from __future__ import annotations

from mesilla.common import secrets
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import ContainerID


class EnvironmentSecretIsolator(Isolator):
    name = "environment_secret"
    supports_nesting = True

    def __init__(self, flags: object = None) -> None:
        pass

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        environment = config.command.environment
        given = environment.variables if environment is not None else []
        variables = [v for v in given if v.type == "SECRET"]
        if not variables:
            return None
        resolved = {
            v.name: secrets.resolve(v.secret, f"Environment variable '{v.name}'") for v in variables
        }
        return ContainerLaunchInfo(environment=resolved, secret_names=set(resolved))
