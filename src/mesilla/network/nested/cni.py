"""The CNI verbs of `mesilla-nested`, done by the agent: the plugin forwards them here.

The plugin (`mesilla.network.nested.plugin`) sends what the runtime gave it
to ``POST /v1/cni`` on the agent's nested socket::

    {"command": "ADD" | "DEL" | "CHECK", "container_id": CNI_CONTAINERID,
     "netns": CNI_NETNS, "ifname": CNI_IFNAME, "config": <the network configuration>}

and prints the answer's body: on 200 the result of ADD in the
configuration's version (1.0.0, 0.4.0, 0.3.x; 0.2.0's `ip4`/`ip6` for
Mesos), nothing for DEL and CHECK; on 400 a CNI error object (it then exits
1). The agent opens the pod's namespace by path: the plugin is its child,
in its mount namespace.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from mesilla.network.nested.plugin import (
    INCOMPATIBLE_VERSION,
    INVALID_CONFIG,
    INVALID_ENVIRONMENT,
    SUPPORTED_VERSIONS,
    TRY_AGAIN,
    CniFailure,
)
from mesilla.network.nested.plumbing import PlumbingError, Vif
from mesilla.network.ovs import OvsError

if TYPE_CHECKING:
    from mesilla.network.nested.agent import NestedAgent

log = logging.getLogger(__name__)

ROUTE = "/v1/cni"
# What Mesos's isolator assumes when a configuration names no version.
DEFAULT_VERSION = "0.2.0"


def config(doc: Any) -> dict[str, Any]:
    """The network configuration, checked: a JSON object naming a network, of a known version."""
    if not isinstance(doc, dict):
        raise CniFailure(INVALID_CONFIG, "The network configuration is not a JSON object")
    if not isinstance(doc.get("network_id"), str) or not doc["network_id"]:
        raise CniFailure(INVALID_CONFIG, f"mesilla-nested needs 'network_id' in network '{doc.get('name')}'")
    if doc.get("cniVersion", DEFAULT_VERSION) not in SUPPORTED_VERSIONS:
        raise CniFailure(INCOMPATIBLE_VERSION, f"cniVersion {doc.get('cniVersion')} is not supported",
                         f"supported: {', '.join(SUPPORTED_VERSIONS)}")  # fmt: skip
    return doc


def result(version: str, binding: dict[str, Any], ifname: str, netns: str, mac: str) -> dict[str, Any]:
    """The CNI result of `version` for a plumbed binding."""
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


def _parameter(request: dict[str, Any], name: str, env: str, required: bool = True) -> str:
    value = request.get(name)
    if not isinstance(value, str) or (required and not value):
        raise CniFailure(INVALID_ENVIRONMENT, f"{env} is not set")
    return value


async def run(agent: NestedAgent, request: Any) -> dict[str, Any] | None:
    """One forwarded CNI request: the result of ADD, None for DEL and CHECK."""
    from mesilla.network.nested.agent import ServiceError

    if not isinstance(request, dict):
        raise CniFailure(INVALID_CONFIG, "Expecting the plugin's request, a JSON object")
    conf = config(request.get("config"))
    command = request.get("command")
    container = _parameter(request, "container_id", "CNI_CONTAINERID")
    ifname = _parameter(request, "ifname", "CNI_IFNAME")
    try:
        if command == "ADD":
            netns = _parameter(request, "netns", "CNI_NETNS")
            binding, mac = await agent.add(container, ifname, netns, conf["network_id"])
            return result(conf.get("cniVersion", DEFAULT_VERSION), binding, ifname, netns, mac)
        if command == "DEL":
            netns = _parameter(request, "netns", "CNI_NETNS", required=False)
            await agent.delete(container, ifname, netns or None)
            return None
        if command == "CHECK":
            wrong = await agent.check(container, ifname, _parameter(request, "netns", "CNI_NETNS"))
            if wrong is not None:
                raise CniFailure(TRY_AGAIN, wrong)
            return None
    except ServiceError as exc:
        # The service's 4xx (a wrong network id) is the configuration's fault; the rest may pass.
        raise CniFailure(INVALID_CONFIG if 400 <= exc.status < 500 else TRY_AGAIN, str(exc)) from None
    except (PlumbingError, OvsError) as exc:
        raise CniFailure(TRY_AGAIN, str(exc)) from None
    raise CniFailure(INVALID_ENVIRONMENT, f"Unknown CNI_COMMAND '{command}'")


def handler(agent: NestedAgent) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        try:
            doc = await request.json()
        except ValueError:
            doc = None
        given: dict[str, Any] = doc if isinstance(doc, dict) else {}
        conf: dict[str, Any] = given["config"] if isinstance(given.get("config"), dict) else {}
        try:
            try:
                answer = await run(agent, doc)
            except CniFailure:
                raise
            except Exception as exc:  # the plugin gets an error object, never a bare 500
                log.exception("CNI %s of %s failed", given.get("command"), given.get("container_id"))
                raise CniFailure(TRY_AGAIN, f"The agent failed: {exc!r}") from None
        except CniFailure as exc:
            error: dict[str, Any] = {"cniVersion": str(conf.get("cniVersion", DEFAULT_VERSION)),
                                     "code": exc.code, "msg": exc.msg}  # fmt: skip
            if exc.details:
                error["details"] = exc.details
            log.warning("CNI %s of %s failed: %s", given.get("command"), given.get("container_id"), exc.msg)
            return web.Response(status=400, text=json.dumps(error), content_type="application/json")
        text = json.dumps(answer) if answer is not None else ""
        return web.Response(text=text, content_type="application/json")

    return handle
