"""A container's OCI bundle under the linux launcher: the namespaces it creates or
enters, its mounts, and its `config.json` (rewritten without secrets once read)."""

from __future__ import annotations

import json
import os
from typing import Any

from mesilla.common import syscalls
from mesilla.containerizer.types import ContainerLaunchInfo, Mount
from mesilla.v1.mesos import LinuxInfo


def namespaces(
    parent_pid: int | None,
    launch_info: ContainerLaunchInfo,
    linux_info: LinuxInfo | None,
    debug: bool,
) -> tuple[set[str], dict[str, str]]:
    """(the namespaces to create, those to enter by path): a nested container enters its
    parent's network, UTS and IPC (and pid, when shared or a debug container's) unless an
    isolator clones its own."""
    enter: dict[str, str] = {}
    if parent_pid is not None:
        kinds = {"network": "net", "uts": "uts", "ipc": "ipc"}
        if debug or (linux_info is not None and linux_info.share_pid_namespace):
            kinds["pid"] = "pid"
        enter = {
            kind: f"/proc/{parent_pid}/ns/{name}"
            for kind, name in kinds.items()
            if kind not in launch_info.clone_namespaces
        }
    enter.update(launch_info.enter_namespaces)
    create = ({"mount", "pid"} | launch_info.clone_namespaces) - set(enter)
    return create, enter


def forget_secrets(paths: list[str], names: set[str]) -> None:
    """Rewrites the copies of the config that exist without the secret variables,
    once the runtime has created the container (and so read them)."""
    for path in paths:
        try:
            with open(path) as f:
                spec = json.load(f)
        except FileNotFoundError:
            continue
        process = spec["process"]
        process["env"] = [e for e in process["env"] if e.partition("=")[0] not in names]
        with open(path, "w") as f:
            f.write(json.dumps(spec))


def oci_mount(mount: Mount) -> dict[str, Any]:
    return {
        "destination": mount.target,
        "type": mount.type,
        "source": mount.source,
        "options": list(mount.options),
    }


def mount_tmpfs(path: str, size_mb: int | None) -> None:
    options = "mode=1777" + (f",size={size_mb}m" if size_mb is not None else "")
    syscalls.mount("tmpfs", path, "tmpfs", syscalls.MS_NOSUID | syscalls.MS_NODEV, options)


def write_spec(bundle: str, spec: dict[str, Any]) -> None:
    """The bundle's config.json: input of one `create`, not state, so no fsync (recovery
    reads the runtime's state). dumps, not dump: json.dump encodes in pure Python, piece by piece."""
    with open(os.path.join(bundle, "config.json"), "w") as f:
        f.write(json.dumps(spec))
