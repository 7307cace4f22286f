"""`mesilla-nested`: the CNI plugin that gives a pod a subport of its host's trunk.

Its network configuration names the network service's network and the agent
that serves this host's trunk::

    {"cniVersion": "1.0.0", "name": "tenant-a", "type": "mesilla-nested",
     "network_id": "<Neutron network id>", "agent_socket": "/run/mesilla/nested.sock"}

ADD asks the agent (never the service: the plugin holds no credentials) for
a subport for (CNI_CONTAINERID, CNI_IFNAME), plumbs it into CNI_NETNS with
the backend the agent names, and prints a CNI result of the configuration's
version (1.0.0, 0.4.0, 0.3.x; 0.2.0's `ip4`/`ip6` for Mesos) with the port's
MAC, address and gateway. ADD again finds the same subport and leaves a
complete interface as it is. DEL unplugs whatever part of an ADD was done
and has the agent release the subport; DEL of what was never added succeeds.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import urllib.parse
from typing import Any

SUPPORTED_VERSIONS = ["0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"]
AGENT_TIMEOUT = 60.0
# CNI's well-known error codes.
INCOMPATIBLE_VERSION = 1
INVALID_ENVIRONMENT = 4
INVALID_CONFIG = 7
TRY_AGAIN = 11


class CniFailure(Exception):
    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=AGENT_TIMEOUT)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(AGENT_TIMEOUT)
        sock.connect(self._path)
        self.sock = sock


def ask_agent(socket_path: str, method: str, container: str, ifname: str,
              body: Any = None) -> tuple[int, Any]:  # fmt: skip
    path = "/v1/attachments/{}/{}".format(urllib.parse.quote(container, safe=""),
                                          urllib.parse.quote(ifname, safe=""))  # fmt: skip
    connection = _UnixConnection(socket_path)
    try:
        data = json.dumps(body) if body is not None else None
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        raw = response.read()
    except OSError as exc:
        raise CniFailure(TRY_AGAIN, f"The mesilla agent at {socket_path} does not answer: {exc}") from None
    finally:
        connection.close()
    return response.status, json.loads(raw) if raw.strip() else None


def result(version: str, binding: dict[str, Any], ifname: str, netns: str, mac: str) -> dict[str, Any]:
    """The CNI result of `version` for a plumbed binding."""
    from mesilla.network.nested.plumbing import Vif

    vif = Vif.from_json(binding)
    if version == "0.2.0":
        out: dict[str, Any] = {"cniVersion": version, "dns": {}}
        for addr in vif.addresses:
            key = "ip6" if addr.interface.version == 6 else "ip4"
            if key not in out:
                entry: dict[str, Any] = {"ip": addr.address}
                if addr.gateway:
                    entry.update(gateway=addr.gateway,
                                 routes=[{"dst": "::/0" if key == "ip6" else "0.0.0.0/0"}])  # fmt: skip
                out[key] = entry
        return out
    ips = []
    for addr in vif.addresses:
        ip: dict[str, Any] = {"interface": 0, "address": addr.address}
        if addr.gateway:
            ip["gateway"] = addr.gateway
        if version != "1.0.0":
            ip["version"] = str(addr.interface.version)
        ips.append(ip)
    routes = [{"dst": "::/0" if a.interface.version == 6 else "0.0.0.0/0", "gw": a.gateway}
              for a in vif.addresses if a.gateway]  # fmt: skip
    return {"cniVersion": version, "interfaces": [{"name": ifname, "mac": mac, "sandbox": netns}],
            "ips": ips, "routes": routes, "dns": {}}  # fmt: skip


def _config(stdin: str) -> dict[str, Any]:
    try:
        conf = json.loads(stdin)
    except ValueError:
        raise CniFailure(INVALID_CONFIG, "The network configuration is not JSON") from None
    if not isinstance(conf, dict):
        raise CniFailure(INVALID_CONFIG, "The network configuration is not a JSON object")
    for key in ("network_id", "agent_socket"):
        if not isinstance(conf.get(key), str) or not conf[key]:
            raise CniFailure(INVALID_CONFIG, f"mesilla-nested needs '{key}' in network '{conf.get('name')}'")
    if conf.get("cniVersion", "0.2.0") not in SUPPORTED_VERSIONS:
        raise CniFailure(INCOMPATIBLE_VERSION, f"cniVersion {conf.get('cniVersion')} is not supported",
                         f"supported: {', '.join(SUPPORTED_VERSIONS)}")  # fmt: skip
    return conf


def _env(name: str, required: bool = True) -> str:
    value = os.environ.get(name, "")
    if required and not value:
        raise CniFailure(INVALID_ENVIRONMENT, f"{name} is not set")
    return value


def add(conf: dict[str, Any]) -> dict[str, Any]:
    from mesilla.network.nested import plumbing

    container, netns, ifname = _env("CNI_CONTAINERID"), _env("CNI_NETNS"), _env("CNI_IFNAME")
    status, binding = ask_agent(conf["agent_socket"], "PUT", container, ifname,
                                {"network_id": conf["network_id"]})  # fmt: skip
    if status != 200:
        raise CniFailure(TRY_AGAIN if status >= 500 else INVALID_CONFIG,
                         (binding or {}).get("error", f"The agent answered {status}"))  # fmt: skip
    backend = plumbing.from_host(binding["host"])
    vif = plumbing.Vif.from_json(binding)
    try:
        mac = backend.plug(vif, netns, ifname)
    except Exception as exc:  # whatever failed, the half-made interface and the subport go
        backend.unplug(vif.port_id, netns, ifname, vif.mac_address)
        ask_agent(conf["agent_socket"], "DELETE", container, ifname)
        raise CniFailure(TRY_AGAIN, f"Plumbing port {vif.port_id} into {netns} failed: {exc}") from None
    return result(conf.get("cniVersion", "0.2.0"), binding, ifname, netns, mac)


def delete(conf: dict[str, Any]) -> None:
    from mesilla.network.nested import plumbing

    container, ifname = _env("CNI_CONTAINERID"), _env("CNI_IFNAME")
    netns = _env("CNI_NETNS", required=False) or None
    status, binding = ask_agent(conf["agent_socket"], "GET", container, ifname)
    if status == 200:
        backend = plumbing.from_host(binding["host"])
        backend.unplug(binding["port_id"], netns, ifname, binding.get("mac_address"))
    elif status != 404:
        raise CniFailure(TRY_AGAIN, (binding or {}).get("error", f"The agent answered {status}"))
    status, answer = ask_agent(conf["agent_socket"], "DELETE", container, ifname)
    if status >= 300:
        raise CniFailure(TRY_AGAIN, (answer or {}).get("error", f"The agent answered {status}"))


def check(conf: dict[str, Any]) -> None:
    from mesilla.network.nested import plumbing

    container, netns, ifname = _env("CNI_CONTAINERID"), _env("CNI_NETNS"), _env("CNI_IFNAME")
    status, binding = ask_agent(conf["agent_socket"], "GET", container, ifname)
    if status != 200 or binding.get("state") != "attached":
        raise CniFailure(TRY_AGAIN, f"The agent holds no subport for {container}/{ifname}")
    if not plumbing.pod_end_ready(netns, ifname, plumbing.Vif.from_json(binding)):
        raise CniFailure(TRY_AGAIN, f"{ifname} in {netns} lacks port {binding['port_id']}'s MAC or addresses")


def main() -> None:
    command = os.environ.get("CNI_COMMAND", "")
    version = "1.0.0"
    try:
        if command == "VERSION":
            print(json.dumps({"cniVersion": "1.0.0", "supportedVersions": SUPPORTED_VERSIONS}))
            return
        conf = _config(sys.stdin.read())
        version = conf.get("cniVersion", "0.2.0")
        if command == "ADD":
            print(json.dumps(add(conf)))
        elif command == "DEL":
            delete(conf)
        elif command == "CHECK":
            check(conf)
        else:
            raise CniFailure(INVALID_ENVIRONMENT, f"Unknown CNI_COMMAND '{command}'")
    except CniFailure as exc:
        error = {"cniVersion": version, "code": exc.code, "msg": exc.msg}
        if exc.details:
            error["details"] = exc.details
        print(json.dumps(error))
        sys.exit(1)


if __name__ == "__main__":
    main()
