"""posix/rlimits: the container's resource limits from `ContainerInfo.rlimit_info`.

Mesos names the limits `RLMT_<NAME>`; the launch info carries them with their
POSIX/OCI names (`RLIMIT_<NAME>`) as `(name, soft, hard)`, where None stands
for unlimited (RLIM_INFINITY). As in Mesos, a limit sets both values or
neither (neither: unlimited), the soft value may not exceed the hard one, and
each type appears once.
"""

from __future__ import annotations

from mesilla.containerizer.isolator import SectionIsolator
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import ContainerID, RLimit, RLimitInfo

RLIMIT_TYPES = (
    "AS",
    "CORE",
    "CPU",
    "DATA",
    "FSIZE",
    "LOCKS",
    "MEMLOCK",
    "MSGQUEUE",
    "NICE",
    "NOFILE",
    "NPROC",
    "RSS",
    "RTPRIO",
    "RTTIME",
    "SIGPENDING",
    "STACK",
)
MESOS_TO_POSIX = {f"RLMT_{name}": f"RLIMIT_{name}" for name in RLIMIT_TYPES}


class RLimitError(ValueError):
    """An invalid `RLimitInfo`; the message names the limit and the fix."""


def posix_rlimit(rlimit: RLimit) -> tuple[str, int | None, int | None]:
    name = MESOS_TO_POSIX.get(rlimit.type)
    if name is None:
        raise RLimitError(
            f"Unknown rlimit type '{rlimit.type}': use one of {', '.join(MESOS_TO_POSIX)}"
        )
    if (rlimit.soft is None) != (rlimit.hard is None):
        raise RLimitError(
            f"{rlimit.type} sets only one of 'soft' and 'hard': set both, or neither for unlimited"
        )
    if rlimit.soft is not None and rlimit.hard is not None:
        if rlimit.soft < 0 or rlimit.hard < 0:
            raise RLimitError(f"{rlimit.type} limits must not be negative")
        if rlimit.soft > rlimit.hard:
            raise RLimitError(
                f"{rlimit.type} soft limit {rlimit.soft} exceeds its hard limit {rlimit.hard}"
            )
    return name, rlimit.soft, rlimit.hard


class PosixRLimitsIsolator(SectionIsolator[RLimitInfo]):
    name = "posix/rlimits"
    supports_nesting = True

    def section(self, config: ContainerConfig) -> RLimitInfo | None:
        return config.info.rlimit_info

    def prepare_section(self, container_id: ContainerID, info: RLimitInfo) -> ContainerLaunchInfo:
        limits = [posix_rlimit(r) for r in info.rlimits]
        names = [name for name, _soft, _hard in limits]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise RLimitError(
                f"rlimit(s) {', '.join(duplicates)} given more than once: keep one each"
            )
        return ContainerLaunchInfo(rlimits=limits)
