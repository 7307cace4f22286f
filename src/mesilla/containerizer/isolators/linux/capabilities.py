"""linux/capabilities: the container's Linux capabilities from `LinuxInfo` (Mesos names).

`effective_capabilities` (or the deprecated `capability_info`) is the set the
container's processes hold; `bounding_capabilities` is the most they can ever
gain; either set defaults to the other. Mesos rejects an effective set that
is not within the bounding set. The launch info carries both sets with the
kernel's names (`CAP_CHOWN`); without any capability information the
launcher's default set applies.
"""

from __future__ import annotations

from typing import Any

from mesilla.containerizer.isolator import SectionIsolator
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import ContainerID, LinuxInfo

# In kernel order: Mesos's enum value is 1000 + the kernel's capability number.
CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
)
MESOS_ENUM_BASE = 1000


class CapabilitiesError(ValueError):
    """Invalid capability information; the message names the capability and the fix."""


def capability_names(info: Any, field: str) -> set[str] | None:
    """The Mesos names in a `CapabilityInfo` JSON object (`{"capabilities": [...]}`)."""
    if info is None:
        return None
    if not isinstance(info, dict) or not isinstance(info.get("capabilities", []), list):
        raise CapabilitiesError(
            f'linux_info.{field} must look like {{"capabilities": ["CHOWN", ...]}}'
        )
    names: set[str] = set()
    for item in info.get("capabilities", []):
        if isinstance(item, int) and 0 <= item - MESOS_ENUM_BASE < len(CAPABILITIES):
            names.add(CAPABILITIES[item - MESOS_ENUM_BASE])
        elif isinstance(item, str) and item in CAPABILITIES:
            names.add(item)
        else:
            raise CapabilitiesError(
                f"Unknown capability {item!r} in linux_info.{field}: use Mesos names such as "
                "CHOWN, NET_ADMIN, SYS_ADMIN (no CAP_ prefix)"
            )
    return names


class LinuxCapabilitiesIsolator(SectionIsolator[LinuxInfo]):
    name = "linux/capabilities"
    supports_nesting = True
    supports_debug = True

    def section(self, config: ContainerConfig) -> LinuxInfo | None:
        return config.info.linux_info

    def prepare_section(self, container_id: ContainerID, linux: LinuxInfo) -> ContainerLaunchInfo | None:
        effective = capability_names(linux.effective_capabilities, "effective_capabilities")
        if effective is None:
            effective = capability_names(linux.capability_info, "capability_info")
        bounding = capability_names(
            linux.bounding_capabilities, "bounding_capabilities"
        )
        if effective is None and bounding is None:
            return None
        if effective is None:
            effective = set(bounding or ())
        if bounding is not None and not effective <= bounding:
            extra = ", ".join(sorted(effective - bounding))
            raise CapabilitiesError(
                f"Effective capabilities {extra} are not in the bounding set: add them to "
                "linux_info.bounding_capabilities or drop them from the effective set"
            )
        return ContainerLaunchInfo(
            capabilities=_spec_names(effective),
            bounding_capabilities=_spec_names(bounding) if bounding is not None else None,
        )


def _spec_names(names: set[str]) -> list[str]:
    """Kernel names (`CAP_CHOWN`) in kernel order."""
    return [f"CAP_{name}" for name in CAPABILITIES if name in names]
