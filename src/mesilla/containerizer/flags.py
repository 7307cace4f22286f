"""The agent flags that configure the containerizer (Mesos's names and defaults).

`CONTAINERIZER_FLAGS` are their specs, parsed with the agent's; `ContainerizerFlags`
is what the containerizer's parts (launchers, isolators, provisioner) read: one
frozen, typed value built once by `ContainerizerFlags.of` from the parsed command
line, so a misspelt or mistyped flag is mypy's error, not a silent None.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from mesilla.common.flags import Flag, Flags

CONTAINERIZER_FLAGS = [
    Flag("launcher", "The launcher: 'linux' (OCI runtime; default when root with a working "
         "runtime) or 'posix' (plain processes)."),
    Flag("oci_runtime", "The OCI runtime binary for the linux launcher (default: the first of "
         "crun, runc that actually runs a container on this host)."),
    Flag("fork_default_executors", "linux launcher: fork default executors without an image, "
         "network namespace or TTY from a pre-imported zygote into their cgroups and namespaces, "
         "instead of starting each in an OCI container (Mesilla's: ~220 ms less per pod).",
         True, "bool"),
    Flag("isolation", "Comma-separated isolators, by Mesos name.", "posix/cpu,posix/mem"),
    Flag("runtime_dir", "Where the containerizer keeps its runtime checkpoints (cleared on reboot).",
         "/var/run/mesilla"),
    Flag("sandbox_directory", "Where a container with an image sees its sandbox.",
         "/mnt/mesos/sandbox"),
    Flag("image_providers", "Comma-separated image providers ('docker').", None, "list"),
    Flag("docker_store_dir", "Directory of the docker image store.", "/tmp/mesilla/store/docker"),
    Flag("docker_registry", "Default registry: an http(s) URL of a Docker Registry API v2, or a "
         "local directory of `docker save` tarballs and OCI layouts.", "https://registry-1.docker.io"),
    Flag("image_provisioner_backend", "Rootfs backend: overlay, copy or bind (default: overlay "
         "if the store's filesystem supports it, else copy)."),
    Flag("container_disk_watch_interval", "How often disk/du measures sandboxes.", 15.0, "duration"),
    Flag("enforce_container_disk_quota", "Kill containers over their disk quota (disk/du).",
         False, "bool"),
    Flag("cgroups_root", "Name of the root cgroup under which containers' cgroups go.", "mesilla"),
    Flag("cgroups_hierarchy", "Mount point of the cgroup hierarchies.", "/sys/fs/cgroup"),
    Flag("cgroups_enable_cfs", "Cap CPU with CFS quota, not only shares.", False, "bool"),
    Flag("cgroups_max_pids", "cgroups/pids: the most tasks (processes and threads) a container "
         "with its own cgroups may have (unset: no limit, as Mesos has no pids resource).",
         None, "int"),
    Flag("network_cni_config_dir", "network/cni: the directory of CNI network configurations, "
         "one .conf or .conflist per network (its 'name' is what NetworkInfo.name refers to)."),
    Flag("network_cni_plugins_dir", "network/cni: search path (':'-separated) of CNI plugin "
         "binaries (Debian's containernetworking-plugins: /usr/lib/cni)."),
    Flag("network_cni_root_dir_persist", "network/cni: keep the CNI root directory under "
         "--work_dir (survives a reboot) instead of --runtime_dir.", False, "bool"),
    Flag("network_cni_default_network", "network/cni: the network a framework's executor "
         "container (a pod, a command task) joins when its ContainerInfo names none, so that "
         "unmodified frameworks' pods get an address of their own (Mesilla's; Mesos keeps them "
         "on the host network)."),
    Flag("network_cni_plugin_timeout", "network/cni: how long a CNI plugin may take to answer "
         "before it is killed (Mesilla's; Mesos waits forever).", 60.0, "duration"),
    Flag("container_ports_watch_interval", "network/ports: how often containers' listening "
         "ports are checked against their resources.", 30.0, "duration"),
    Flag("enforce_container_ports", "network/ports: limit (kill) a container listening on a "
         "port it was not given; else only log it.", False, "bool"),
    Flag("check_agent_port_range_only", "network/ports: check only ports inside the agent's own "
         "'ports' resources.", False, "bool"),
    Flag("container_ports_isolated_range", "network/ports: check only ports in this range, "
         "e.g. [0-35000]."),
    Flag("disallow_sharing_agent_ipc_namespace", "namespaces/ipc: refuse a top-level container "
         "that asks to share the agent's IPC namespace.", False, "bool"),
    Flag("disallow_sharing_agent_pid_namespace", "namespaces/pid: refuse a top-level container "
         "that asks to share the agent's pid namespace.", False, "bool"),
]


@dataclass(frozen=True)
class ContainerizerFlags:
    """The flags above, typed, with the few agent flags the containerizer reads too
    (`work_dir`, `resources`, `default_role`). The defaults are the specs'."""

    launcher: str | None = None
    oci_runtime: str | None = None
    fork_default_executors: bool = True
    isolation: str = "posix/cpu,posix/mem"
    runtime_dir: str = "/var/run/mesilla"
    sandbox_directory: str = "/mnt/mesos/sandbox"
    image_providers: tuple[str, ...] = ()
    docker_store_dir: str = "/tmp/mesilla/store/docker"
    docker_registry: str = "https://registry-1.docker.io"
    image_provisioner_backend: str | None = None
    container_disk_watch_interval: float = 15.0
    enforce_container_disk_quota: bool = False
    cgroups_root: str = "mesilla"
    cgroups_hierarchy: str = "/sys/fs/cgroup"
    cgroups_enable_cfs: bool = False
    cgroups_max_pids: int | None = None
    network_cni_config_dir: str | None = None
    network_cni_plugins_dir: str | None = None
    network_cni_root_dir_persist: bool = False
    network_cni_default_network: str | None = None
    network_cni_plugin_timeout: float = 60.0
    container_ports_watch_interval: float = 30.0
    enforce_container_ports: bool = False
    check_agent_port_range_only: bool = False
    container_ports_isolated_range: str | None = None
    disallow_sharing_agent_ipc_namespace: bool = False
    disallow_sharing_agent_pid_namespace: bool = False
    # The agent's own, when the containerizer runs in one.
    work_dir: str | None = None
    resources: str | None = None
    default_role: str = "*"

    @classmethod
    def of(cls, flags: Flags | ContainerizerFlags) -> ContainerizerFlags:
        """From a parsed command line (the agent's, or `CONTAINERIZER_FLAGS` alone): a flag
        it lacks or leaves unset keeps its default here."""
        if isinstance(flags, ContainerizerFlags):
            return flags
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = flags.get(f.name)
            if value is not None:
                values[f.name] = tuple(value) if f.name == "image_providers" else value
        return cls(**values)

