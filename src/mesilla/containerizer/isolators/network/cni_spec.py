"""The CNI specification's data: network configurations and plugin results.

Pure functions, no I/O but reading configuration files. A network is one
`.conf` (a single plugin) or `.conflist` (plugins chained, each getting the
previous one's result as `prevResult`) in `--network_cni_config_dir`, named by
its `name`. Results come in two shapes: 0.1.0/0.2.0 (`ip4`, `ip6`) and 0.3.0
on (`interfaces`, `ips`, the latter with `version` up to 0.4.0 and without from
1.0.0); `parse_result` reads both into one `Result`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

# What the spec allows as a network name (it also names a directory of ours).
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")
# The versions whose configurations may be CHECKed (the verb came with 0.4.0).
_CHECK_SINCE = (0, 4, 0)


class CniError(Exception):
    """A network cannot be used or set up; the message says why and what to do."""


def valid_name(name: str) -> bool:
    """A network name or container id as the spec allows them."""
    return _NAME.fullmatch(name) is not None


def version_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        raise CniError(f"Invalid cniVersion '{version}': expected e.g. 1.0.0") from None


def supports_check(cni_version: str) -> bool:
    return version_tuple(cni_version) >= _CHECK_SINCE


@dataclass
class NetworkConfig:
    """One network: its plugins' configurations as the spec hands them to each plugin."""

    name: str
    cni_version: str
    plugins: list[Json]
    path: str
    # The file's content as read, checkpointed as `network.conf` for DEL after a restart.
    source: Json = field(default_factory=dict)

    def plugin_config(
        self, index: int, *, prev_result: Json | None = None, runtime_config: Json | None = None
    ) -> Json:
        """What plugin `index` reads on stdin: its entry plus the network's name and
        version, the runtime's values for the capabilities it declares, the previous result."""
        conf = dict(self.plugins[index])
        conf["name"] = self.name
        conf["cniVersion"] = self.cni_version
        capabilities = conf.get("capabilities") or {}
        wanted = {k: v for k, v in (runtime_config or {}).items() if capabilities.get(k)}
        if wanted:
            conf["runtimeConfig"] = wanted
        if prev_result is not None:
            conf["prevResult"] = prev_result
        return conf


def parse_config(source: Json, path: str) -> NetworkConfig:
    """A `.conf` or `.conflist` document as a NetworkConfig; CniError says what is wrong."""
    if not isinstance(source, dict):
        raise CniError(f"CNI configuration {path} is not a JSON object")
    name = source.get("name")
    if not isinstance(name, str) or not valid_name(name):
        raise CniError(
            f"CNI configuration {path} needs a 'name' of letters, digits, '_', '.' and '-' "
            f"(starting with a letter or digit), got {name!r}"
        )
    version = source.get("cniVersion", "0.1.0")
    if not isinstance(version, str):
        raise CniError(f"CNI configuration {path}: 'cniVersion' must be a string")
    try:
        version_tuple(version)
    except CniError as exc:
        raise CniError(f"CNI configuration {path}: {exc}") from None
    if "plugins" in source:
        plugins = source["plugins"]
        if not isinstance(plugins, list) or not plugins:
            raise CniError(f"CNI configuration list {path} needs a non-empty 'plugins' list")
    else:
        plugins = [source]
    for plugin in plugins:
        if not isinstance(plugin, dict) or not isinstance(plugin.get("type"), str):
            raise CniError(f"CNI configuration {path}: every plugin needs a 'type' (its binary)")
    return NetworkConfig(name, version, [dict(p) for p in plugins], path, source)


def load_configs(config_dir: str) -> dict[str, NetworkConfig]:
    """The networks of a configuration directory by name (`.conf`, `.conflist`, `.json`)."""
    networks: dict[str, NetworkConfig] = {}
    try:
        entries = sorted(os.listdir(config_dir))
    except OSError as exc:
        raise CniError(f"Cannot read --network_cni_config_dir={config_dir}: {exc}") from None
    for entry in entries:
        if not entry.endswith((".conf", ".conflist", ".json")):
            continue
        path = os.path.join(config_dir, entry)
        try:
            with open(path) as f:
                source = json.load(f)
        except (OSError, ValueError) as exc:
            raise CniError(f"Cannot read CNI configuration {path}: {exc}") from None
        network = parse_config(source, path)
        if network.name in networks:
            raise CniError(
                f"CNI network '{network.name}' is configured twice, in "
                f"{networks[network.name].path} and {path}: keep one"
            )
        networks[network.name] = network
    return networks


@dataclass
class IPConfig:
    address: str  # CIDR, as plugins report it: 10.99.0.2/24
    gateway: str | None
    version: int  # 4 or 6
    interface: int | None = None  # index into Result.interfaces (0.3.0 on)

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_interface(self.address).ip)


@dataclass
class Result:
    cni_version: str
    ips: list[IPConfig]
    interfaces: list[Json]
    routes: list[Json]
    dns: Json
    raw: Json

    def container_ips(self) -> list[IPConfig]:
        """The addresses inside the container: those on an interface with a
        `sandbox` (the container's netns), or on none named (0.2.0, IPAM-only)."""
        inside = []
        for ip in self.ips:
            if ip.interface is None or not (0 <= ip.interface < len(self.interfaces)):
                inside.append(ip)
            elif self.interfaces[ip.interface].get("sandbox"):
                inside.append(ip)
        return inside


def parse_result(raw: Any) -> Result:
    """A plugin's ADD output in any version the reference plugins emit."""
    if not isinstance(raw, dict):
        raise CniError(f"CNI plugin result is not a JSON object: {raw!r:.200}")
    version = str(raw.get("cniVersion", "0.1.0"))
    try:
        if version_tuple(version) < (0, 3, 0):
            return _parse_020(raw, version)
        return _parse_current(raw, version)
    except (KeyError, TypeError, ValueError) as exc:
        raise CniError(f"Malformed CNI {version} result ({exc}): {json.dumps(raw)[:300]}") from None


def _parse_020(raw: Json, version: str) -> Result:
    ips: list[IPConfig] = []
    routes: list[Json] = []
    for key, ip_version in (("ip4", 4), ("ip6", 6)):
        section = raw.get(key)
        if section is None:
            continue
        _check_address(section["ip"], ip_version)
        ips.append(IPConfig(section["ip"], section.get("gateway"), ip_version))
        routes += section.get("routes") or []
    return Result(version, ips, [], routes, raw.get("dns") or {}, raw)


def _parse_current(raw: Json, version: str) -> Result:
    ips = []
    for entry in raw.get("ips") or []:
        address = entry["address"]
        actual = ipaddress.ip_interface(address).version
        declared = entry.get("version")  # 0.3.x and 0.4.0 only
        if declared is not None and str(declared) != str(actual):
            raise ValueError(f"address {address} is not IPv{declared}")
        interface = entry.get("interface")
        ips.append(
            IPConfig(address, entry.get("gateway"), actual, int(interface) if interface is not None else None)
        )
    interfaces = list(raw.get("interfaces") or [])
    return Result(version, ips, interfaces, list(raw.get("routes") or []), raw.get("dns") or {}, raw)


def _check_address(address: str, version: int) -> None:
    if ipaddress.ip_interface(address).version != version:
        raise ValueError(f"address {address} is not IPv{version}")


def resolv_conf(dns: Json) -> str:
    """A resolv.conf for a result's `dns` (nameservers, domain, search, options)."""
    lines = [f"nameserver {server}" for server in dns.get("nameservers") or []]
    if dns.get("domain"):
        lines.append(f"domain {dns['domain']}")
    if dns.get("search"):
        lines.append("search " + " ".join(dns["search"]))
    if dns.get("options"):
        lines.append("options " + " ".join(dns["options"]))
    return "".join(line + "\n" for line in lines)
