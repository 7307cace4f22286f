"""The agent's flags, typed: what its parts read, parsed and checked once at start-up.

`AgentFlags.from_flags` takes the parsed command line (`mesilla.agent.main`'s
`AGENT_FLAGS`) and raises FlagError for a value the agent cannot use;
`parsed` keeps the whole of it for GET_FLAGS and `/flags`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from mesilla.common.flags import FlagError, Flags
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolators.network.cni import default_network


@dataclass(frozen=True)
class AgentFlags:
    work_dir: str
    runtime_dir: str
    ip: str
    port: int
    master: str
    recover: str  # "reconnect" or "cleanup"
    strict: bool
    gc_delay: float
    executor_registration_timeout: float
    executor_reregistration_timeout: float
    executor_shutdown_grace_period: float
    registration_backoff_factor: float
    cgroups_enable_cfs: bool
    switch_user: bool
    recovery_timeout: float
    sandbox_directory: str  # where a container with an image sees its sandbox
    # --executor_environment_variables: what executors get instead of the agent's own.
    executor_environment: Mapping[str, str] | None
    http_executor_domain_sockets: bool
    domain_socket: str | None  # where executors reach the agent, if on a unix socket
    default_network: str | None  # --network_cni_default_network, with network/cni on
    containerizer: ContainerizerFlags  # what the containerizer's parts read
    parsed: Flags

    @classmethod
    def from_flags(cls, flags: Flags) -> AgentFlags:
        """Every field but the derived ones is the flag of its name, as its type (str, int,
        float or bool); a field of another type is derived here."""
        containerizer = ContainerizerFlags.of(flags)
        values: dict[str, Any] = {
            "executor_environment": executor_environment_variables(flags),
            "domain_socket": domain_socket(flags),
            "default_network": default_network(containerizer),
            "containerizer": containerizer,
            "parsed": flags,
        }
        for f in fields(cls):
            if f.name not in values:
                values[f.name] = _read(flags, f.name, _PLAIN_TYPES[str(f.type)])
        return cls(**values)


Plain = str | int | float | bool
_PLAIN_TYPES: dict[str, type[Plain]] = {"str": str, "int": int, "float": float, "bool": bool}


def _read(flags: Flags, name: str, kind: type[Plain]) -> Plain:
    """A flag as `kind`; an unset switch reads false."""
    if kind is bool:
        return bool(flags.get(name))
    return kind(getattr(flags, name))


def executor_environment_variables(flags: Flags) -> dict[str, str] | None:
    """`--executor_environment_variables`: a JSON object of strings, or None when unset."""
    text = flags.get("executor_environment_variables")
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise FlagError(f"Invalid --executor_environment_variables: {exc}") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise FlagError(
            "Invalid --executor_environment_variables: expecting a JSON object of strings"
        )
    return value


DOMAIN_SOCKET_FILE = "agent.sock"
DOMAIN_SOCKET_MAX_PATH = 107  # sun_path holds 108 bytes with its NUL


def domain_socket(flags: Flags) -> str | None:
    """The unix socket the agent serves its executor and agent APIs on, if any.

    As Mesos's `--http_executor_domain_sockets` (at `--domain_socket_location`,
    default `<runtime_dir>/agent.sock`); with network/cni also without that flag,
    since an executor in a network namespace of its own cannot reach the
    agent's address otherwise.
    """
    wanted = flags.get("http_executor_domain_sockets") or "network/cni" in (
        flags.get("isolation") or ""
    ).split(",")
    if not wanted:
        return None
    location = flags.get("domain_socket_location") or os.path.join(
        flags.runtime_dir, DOMAIN_SOCKET_FILE
    )
    if len(location) > DOMAIN_SOCKET_MAX_PATH:
        raise FlagError(
            f"Domain socket location '{location}' is longer than {DOMAIN_SOCKET_MAX_PATH} "
            "characters: set a shorter --domain_socket_location"
        )
    return location


