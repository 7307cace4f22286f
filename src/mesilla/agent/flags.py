"""The agent's flags, typed: what its parts read, parsed once at start-up.

`AgentFlags.from_flags` takes the parsed command line (`mesilla.agent.main`'s
`AGENT_FLAGS`); `parsed` keeps the whole of it for what reads the
containerizer's flags too (an executor's environment) and for GET_FLAGS.
"""

from __future__ import annotations

from dataclasses import dataclass

from mesilla.common.flags import Flags


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
    parsed: Flags

    @classmethod
    def from_flags(cls, flags: Flags) -> AgentFlags:
        return cls(
            work_dir=str(flags.work_dir),
            runtime_dir=str(flags.runtime_dir),
            ip=str(flags.ip),
            port=int(flags.port),
            master=str(flags.master),
            recover=str(flags.recover),
            strict=bool(flags.strict),
            gc_delay=float(flags.gc_delay),
            executor_registration_timeout=float(flags.executor_registration_timeout),
            executor_reregistration_timeout=float(flags.executor_reregistration_timeout),
            executor_shutdown_grace_period=float(flags.executor_shutdown_grace_period),
            registration_backoff_factor=float(flags.registration_backoff_factor),
            cgroups_enable_cfs=bool(flags.get("cgroups_enable_cfs")),
            parsed=flags,
        )

