"""network/cni: containers on CNI networks, as Mesos's network/cni isolator.

A container whose `ContainerInfo.network_infos` name networks gets a network
namespace of its own, bound on a file, and one CNI ADD per network (eth0,
eth1, ... in order); the launcher joins the namespace by path. A container
naming none stays on the host network, and a nested one joins its parent's
(a pod's containers share the executor's: one ADD per pod) unless it names
networks itself. Everything lives under the CNI root directory, Mesos's
layout (`<runtime_dir or work_dir>/isolators/network/cni`):

    <container>/ns                          the namespace (bind mount)
    <container>/<network>/network.conf      the configuration ADD used (for DEL)
    <container>/<network>/<ifname>/network.info   the plugin's result
    <container>/<network>/<ifname>/runtime.config the runtimeConfig given (Mesilla's: for DEL)
    <container>/hosts, hostname, resolv.conf      bound into containers with an image

`<container>` is the dot-joined ContainerID path, which is also CNI_CONTAINERID.
DEL runs (in reverse, configuration lists too) on cleanup; recovery re-reads
the directory and DELs whatever belongs to no known container, so neither the
namespace, the veth, the IPAM lease nor a port mapping outlives its container.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import msgspec

from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.isolators.network import netns
from mesilla.containerizer.isolators.network.cni_plugin import Attachment, PluginRunner
from mesilla.containerizer.isolators.network.cni_spec import (
    CniError,
    Json,
    NetworkConfig,
    Result,
    load_configs,
    parse_config,
    parse_result,
    resolv_conf,
    valid_name,
)
from mesilla.containerizer.types import (
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerRuntimeState,
    Mount,
)
from mesilla.v1.mesos import ContainerID, NetworkInfo

log = logging.getLogger(__name__)

CNI_DIR = "isolators/network/cni"
NS_FILE = "ns"
CONF_FILE = "network.conf"
INFO_FILE = "network.info"
RUNTIME_CONFIG_FILE = "runtime.config"
ETC_FILES = ("hosts", "hostname", "resolv.conf")


@dataclass
class _Network:
    name: str
    ifname: str
    requested: NetworkInfo
    result: Result | None = None


@dataclass
class _Info:
    """A container with networks of its own."""

    directory: str
    networks: list[_Network] = field(default_factory=list)

    @property
    def ns(self) -> str:
        return os.path.join(self.directory, NS_FILE)

    def first_ip(self) -> str | None:
        ips = [ip for n in self.networks if n.result for ip in n.result.container_ips()]
        ips.sort(key=lambda ip: ip.version)  # IPv4 first, as Mesos reports one
        return ips[0].ip if ips else None


def cni_id(container_id: ContainerID) -> str:
    return ".".join(container_id.path())



def named_networks(config: ContainerConfig) -> list[NetworkInfo]:
    info = config.container_info
    return [n for n in (info.network_infos if info else []) if n.name]


def default_network(flags: ContainerizerFlags) -> str | None:
    """`--network_cni_default_network`, where network/cni is on."""
    if "network/cni" not in flags.isolation:
        return None
    return flags.network_cni_default_network or None


class NetworkCniIsolator(Isolator):
    name = "network/cni"
    supports_nesting = True

    def __init__(self, flags: ContainerizerFlags) -> None:
        self._config_dir: str | None = flags.network_cni_config_dir
        plugins_dir: str | None = flags.network_cni_plugins_dir
        if bool(self._config_dir) != bool(plugins_dir):
            raise CniError(
                "network/cni needs both --network_cni_config_dir and --network_cni_plugins_dir "
                "(or neither, for host networking only)"
            )
        if flags.launcher == "posix" or os.geteuid() != 0:
            # As Mesos: only the linux launcher puts a container into a namespace by path.
            raise CniError("network/cni needs the linux launcher (root, --launcher=linux)")
        self._plugins = PluginRunner(plugins_dir or "", flags.network_cni_plugin_timeout)
        if flags.network_cni_root_dir_persist:
            if not flags.work_dir:
                raise CniError("--network_cni_root_dir_persist needs the agent's --work_dir")
            base = flags.work_dir
        else:
            base = flags.runtime_dir
        self.root = os.path.join(base, CNI_DIR)
        # Read at start-up, so a broken configuration stops the agent, as Mesos.
        self._networks: dict[str, NetworkConfig] = (
            load_configs(self._config_dir) if self._config_dir else {}
        )
        self._infos: dict[ContainerID, _Info] = {}
        self._default = default_network(flags)
        if self._default is not None and self._default not in self._networks:
            raise CniError(
                f"--network_cni_default_network={self._default} is not a network of "
                f"--network_cni_config_dir (known: {', '.join(sorted(self._networks)) or 'none'})"
            )

    def _requested(self, container_id: ContainerID, config: ContainerConfig) -> list[NetworkInfo]:
        """The networks a container names; a framework's executor container naming none
        joins the default network, if there is one."""
        named = named_networks(config)
        if named or self._default is None:
            return named
        if container_id.parent is not None or config.executor_info is None:
            return []
        return [NetworkInfo(name=self._default)]

    # --- launch ----------------------------------------------------------------------

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo | None:
        requested = self._requested(container_id, config)
        if not requested:
            owner = self._owner(container_id)
            if owner is None:
                return self._host_files(config)
            # A nested container in its parent's network: its address and /etc files.
            return _addressed(ContainerLaunchInfo(), owner, config)

        networks = self._configs(container_id, requested)
        if not valid_name(cni_id(container_id)):
            raise CniError(
                f"Container id {cni_id(container_id)!r} cannot be a CNI container id: use "
                "letters, digits, '_', '.' and '-'"
            )
        info = _Info(os.path.join(self.root, cni_id(container_id)))
        self._infos[container_id] = info
        os.makedirs(info.directory, exist_ok=True)
        netns.create(info.ns)
        for index, (network, network_info) in enumerate(zip(networks, requested, strict=True)):
            attached = _Network(network.name, f"eth{index}", network_info)
            info.networks.append(attached)
            await self._attach(container_id, info, attached, network)
        hostname = config.info.hostname or container_id.value
        _write_etc_files(info, hostname)
        launch = ContainerLaunchInfo(
            enter_namespaces={"network": info.ns},
            # Its own hostname (ContainerInfo.hostname, else its id), as Mesos.
            clone_namespaces={"uts"},
        )
        return _addressed(launch, info, config)

    def _configs(
        self, container_id: ContainerID, requested: list[NetworkInfo]
    ) -> list[NetworkConfig]:
        names = [n.name for n in requested]
        for name in names:
            if names.count(name) > 1:
                raise CniError(f"Container {container_id} joins CNI network '{name}' twice")
        if not self._config_dir:
            raise CniError(
                f"Container {container_id} asks for CNI network(s) {', '.join(map(str, names))} "
                "but the agent has no --network_cni_config_dir"
            )
        if any(name not in self._networks for name in names):
            self._networks = load_configs(self._config_dir)  # added since start-up?
        unknown = [str(name) for name in names if name not in self._networks]
        if unknown:
            raise CniError(
                f"Unknown CNI network(s) {', '.join(unknown)}: no configuration in "
                f"--network_cni_config_dir={self._config_dir} names it "
                f"(known: {', '.join(sorted(self._networks)) or 'none'})"
            )
        return [self._networks[str(name)] for name in names]

    async def _attach(
        self, container_id: ContainerID, info: _Info, attached: _Network, network: NetworkConfig
    ) -> None:
        network_dir = os.path.join(info.directory, attached.name)
        interface_dir = os.path.join(network_dir, attached.ifname)
        os.makedirs(interface_dir, exist_ok=True)
        # Written before ADD: a half-done ADD is DELeted from them like a complete one
        # (portmap, say, removes its rules only when given the same port mappings).
        runtime_config = _runtime_config(attached.requested)
        network = _with_mesos_args(network, attached.requested)
        _write_json(os.path.join(network_dir, CONF_FILE), network.source)
        _write_json(os.path.join(interface_dir, RUNTIME_CONFIG_FILE), runtime_config)
        where = Attachment(cni_id(container_id), info.ns, attached.ifname)
        raw = await self._plugins.add(network, where, runtime_config)
        attached.result = parse_result(raw)
        _write_json(os.path.join(interface_dir, INFO_FILE), raw)

    def _owner(self, container_id: ContainerID) -> _Info | None:
        """The network a container without networks of its own is in: the nearest
        ancestor's that has one (None: the host's)."""
        parent = container_id.parent
        while parent is not None:
            if parent in self._infos:
                return self._infos[parent]
            parent = parent.parent
        return None

    @staticmethod
    def _host_files(config: ContainerConfig) -> ContainerLaunchInfo | None:
        """A container with an image on the host network sees the host's /etc files."""
        if not config.rootfs:
            return None
        mounts = [
            Mount(source=f"/etc/{name}", target=f"/etc/{name}", options=["bind", "ro"])
            for name in ETC_FILES
            if os.path.isfile(f"/etc/{name}")
        ]
        return ContainerLaunchInfo(mounts=mounts)

    # --- status, CHECK --------------------------------------------------------------

    async def status(self, container_id: ContainerID) -> dict[str, Any]:
        info = self._infos.get(container_id) or self._owner(container_id)
        if info is None:
            return {}
        return {"network_infos": [_reported(network) for network in info.networks]}

    async def check(self, container_id: ContainerID) -> list[str]:
        """CHECK of each network where the version allows it; the networks checked."""
        info = self._infos.get(container_id)
        checked: list[str] = []
        if info is None:
            return checked
        for attached in info.networks:
            network = self._checkpointed_config(info, attached.name)
            if attached.result is None:
                continue
            where = Attachment(cni_id(container_id), info.ns, attached.ifname)
            if await self._plugins.check(
                network, where, attached.result.raw, _runtime_config(attached.requested)
            ):
                checked.append(attached.name)
        return checked

    async def _check_recovered(self, container_id: ContainerID) -> None:
        """A recovered container's networks are CHECKed (where their version allows it):
        what changed while the agent was away is logged, the container is left as it is."""
        try:
            checked = await self.check(container_id)
        except (OSError, ValueError, CniError) as exc:
            log.warning("CNI CHECK of recovered container %s failed: %s", container_id, exc)
            return
        if checked:
            log.info(
                "CNI CHECK of recovered container %s passed on %s", container_id, ", ".join(checked)
            )

    # --- cleanup, recovery ----------------------------------------------------------

    async def cleanup(self, container_id: ContainerID) -> None:
        info = self._infos.pop(container_id, None)
        directory = info.directory if info else os.path.join(self.root, cni_id(container_id))
        if os.path.isdir(directory):
            await self._detach(cni_id(container_id), directory)

    async def _detach(self, cni_container_id: str, directory: str) -> None:
        """DEL of every network under `directory`, then the namespace and the directory go;
        both stay when a DEL fails, for the next cleanup (or recovery) to retry."""
        ns = os.path.join(directory, NS_FILE)
        bound = netns.is_bound(ns)
        errors = []
        for name in sorted(os.listdir(directory)):
            network_dir = os.path.join(directory, name)
            conf_path = os.path.join(network_dir, CONF_FILE)
            if not os.path.isfile(conf_path):
                continue
            try:
                network = _read_config(conf_path)
            except (OSError, ValueError, CniError) as exc:
                errors.append(f"{conf_path}: {exc}")
                continue
            for ifname in sorted(os.listdir(network_dir)):
                if not os.path.isdir(os.path.join(network_dir, ifname)):
                    continue
                result = _read_json(os.path.join(network_dir, ifname, INFO_FILE))
                runtime_config = _read_json(os.path.join(network_dir, ifname, RUNTIME_CONFIG_FILE))
                # Without its namespace a plugin still releases what it holds outside.
                where = Attachment(cni_container_id, ns if bound else "", ifname)
                try:
                    await self._plugins.delete(network, where, result, runtime_config)
                except CniError as exc:
                    errors.append(str(exc))
        if errors:
            raise CniError(f"DEL of container {cni_container_id} failed: {'; '.join(errors)}")
        netns.remove(self.root, ns)
        await in_thread(files.remove_tree, self.root, directory)

    def _checkpointed_config(self, info: _Info, name: str) -> NetworkConfig:
        path = os.path.join(info.directory, name, CONF_FILE)
        with open(path) as f:
            return parse_config(json.load(f), path)

    async def recover(
        self, states: list[ContainerRuntimeState], orphans: set[ContainerID]
    ) -> None:
        known = {s.container_id: s for s in states}
        try:
            entries = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return
        for entry in entries:
            directory = os.path.join(self.root, entry)
            container_id = ContainerID.from_path(entry.split("."))
            state = known.get(container_id)
            if state is not None and state.config is not None:
                self._infos[container_id] = _recovered(directory, state.config)
                await self._check_recovered(container_id)
                continue
            if container_id in orphans:
                # DEL once the containerizer has destroyed it (`cleanup`), as Mesos.
                self._infos[container_id] = _Info(directory)
                continue
            log.info("Detaching unknown container %s from its CNI networks", entry)
            try:
                await self._detach(entry, directory)
            except (OSError, CniError) as exc:
                log.error("Cleaning up the networks of container %s failed: %s", entry, exc)


def _recovered(directory: str, config: ContainerConfig) -> _Info:
    info = _Info(directory)
    for index, requested in enumerate(named_networks(config)):
        attached = _Network(str(requested.name), f"eth{index}", requested)
        raw = _read_json(os.path.join(directory, attached.name, attached.ifname, INFO_FILE))
        if raw is not None:
            try:
                attached.result = parse_result(raw)
            except CniError as exc:
                log.warning("Ignoring the checkpointed result in %s: %s", directory, exc)
        info.networks.append(attached)
    return info


def _with_mesos_args(network: NetworkConfig, requested: NetworkInfo) -> NetworkConfig:
    """Each plugin's `args` get `org.apache.mesos: {network_info}`, as Mesos passes the
    NetworkInfo (plugins written for Mesos read port mappings and labels there)."""
    mesos = {"network_info": msgspec.to_builtins(requested)}
    plugins = []
    for plugin in network.plugins:
        args = plugin.get("args") or {}
        if not isinstance(args, dict) or "org.apache.mesos" in args:
            raise CniError(
                f"CNI configuration {network.path}: 'args' must be an object without "
                "'org.apache.mesos', which the agent sets"
            )
        plugins.append({**plugin, "args": {**args, "org.apache.mesos": mesos}})
    source = {**network.source, "plugins": plugins} if "plugins" in network.source else plugins[0]
    return parse_config(source, network.path)


def _runtime_config(requested: NetworkInfo) -> Json:
    """The runtime's values for plugin capabilities (each goes only to plugins declaring it):
    `portMappings` from `port_mappings`, `ips` from the requested `ip_addresses`, and, from
    the NetworkInfo's labels (Mesilla's), `mac` and `bandwidth` (a JSON object)."""
    config: Json = {}
    mappings = [
        {
            "hostPort": int(m["host_port"]),
            "containerPort": int(m["container_port"]),
            "protocol": str(m.get("protocol") or "tcp").lower(),
        }
        for m in requested.port_mappings
    ]
    if mappings:
        config["portMappings"] = mappings
    ips = [str(a["ip_address"]) for a in requested.ip_addresses if a.get("ip_address")]
    if ips:
        config["ips"] = ips
    labels = {
        label.key: label.value or ""
        for label in (requested.labels.labels if requested.labels else [])
    }
    if labels.get("mac"):
        config["mac"] = labels["mac"]
    if labels.get("bandwidth"):
        try:
            config["bandwidth"] = json.loads(labels["bandwidth"])
        except ValueError:
            raise CniError(f"Label 'bandwidth' of network '{requested.name}' is not JSON") from None
    return config


def _reported(network: _Network) -> Json:
    """The NetworkInfo as asked for, with the addresses the plugin gave (Mesos's format)."""
    reported: Json = msgspec.to_builtins(network.requested)
    ips = network.result.container_ips() if network.result else []
    reported["ip_addresses"] = [
        {"protocol": f"IPv{ip.version}", "ip_address": ip.ip} for ip in ips
    ]
    return reported


def _write_etc_files(info: _Info, hostname: str) -> None:
    """hosts, hostname and resolv.conf (the results' DNS, else the agent's), as Mesos."""
    ip = info.first_ip()
    hosts = "127.0.0.1 localhost\n" + (f"{ip} {hostname}\n" if ip else "")
    dns: Json = {}
    for network in info.networks:
        if network.result and network.result.dns.get("nameservers"):
            dns = network.result.dns  # the last network's wins, as Mesos
    resolv = resolv_conf(dns) if dns else _read_text("/etc/resolv.conf")
    for name, text in (("hosts", hosts), ("hostname", hostname + "\n"), ("resolv.conf", resolv)):
        with open(os.path.join(info.directory, name), "w") as f:
            f.write(text)


def _etc_mounts(directory: str) -> list[Mount]:
    return [
        Mount(source=os.path.join(directory, name), target=f"/etc/{name}", options=["bind", "rw"])
        for name in ETC_FILES
    ]


def _write_json(path: str, value: Any) -> None:
    with open(path, "w") as f:
        f.write(json.dumps(value))


def _addressed(launch: ContainerLaunchInfo, info: _Info, config: ContainerConfig) -> ContainerLaunchInfo:
    """`launch` with the address of `info`'s namespace and, in an image's rootfs, its /etc files."""
    ip = info.first_ip()
    if ip is not None:
        launch.environment["MESOS_CONTAINER_IP"] = ip
    if config.rootfs:
        launch.mounts += _etc_mounts(info.directory)
    return launch


def _read_config(path: str) -> NetworkConfig:
    """The network configuration checkpointed at `path`; OSError, ValueError or CniError."""
    with open(path) as f:
        return parse_config(json.load(f), path)


def _read_json(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""
