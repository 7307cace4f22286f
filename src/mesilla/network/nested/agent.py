"""The host side of nested networking in the agent: subports of the host's trunk for its pods.

The seed's Kuryr agent in its "secondary" mode: it holds no credentials of
the network service, only a token scoped to its own trunk
(``--network_trunk_token``, a file). The `mesilla-nested` CNI plugin
forwards each CNI request to it over a unix socket
(``--network_nested_socket``, default ``<runtime_dir>/nested.sock``;
``POST /v1/cni``, `mesilla.network.nested.cni`), and the agent, which has
pyroute2 loaded and its pools' subports plumbed ahead, does the work:

* ADD creates a port (``device_owner: trunk:subport``) on the network through
  the service and adds it to the trunk as a subport, the service picking the
  lowest VLAN ID free on this trunk, then plumbs it into the pod's namespace
  (`plumbing`). ADD again finds the same binding and keeps a complete
  interface; a failed ADD leaves nothing.
* DEL unplugs whatever part of an ADD was done, removes the subport and
  deletes the port; DEL of what was never added succeeds.
* CHECK compares the pod's interface with the binding.

With ``--network_nested_pool_size=N``, every network this host has
attached a pod to keeps N ready subports (created in one bulk call, added
to the trunk in one atomic call, plumbed ahead, refilled in the background
after each attach), and an attach takes one of them without a call to the
service; the port is then renamed for its pod in the background. Pooled
ports are named ``available-port`` (Kuryr's convention), which lets the
embedded service delete them with their network; the agent checks its
pools against its trunk every `POOL_CHECK_INTERVAL` seconds and releases
(and unplugs) pooled subports that are gone from it. Pooled subports are bindings
too (``pool/<network>/<id>``, ``pooled``), so pools survive restarts; a
restart with a smaller size releases the excess.

Bindings are durable under ``<work_dir>/network/nested/``: one file per
attachment, written (``pending``) as soon as the port exists and again
(``attached``) before the plumbing, so that an agent killed at any point
finds on its next start every port it may have made. On start it releases
the pending ones (their ADD never got an answer: the isolator DELs or
retries) and any subport of its trunk that no binding names.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import urllib.parse
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from mesilla.common import files
from mesilla.common.blocking import in_thread
from mesilla.common.flags import Flag, FlagError, Flags
from mesilla.common.tasks import TaskOwner
from mesilla.containerizer.isolators.network.cni import CNI_DIR, NS_FILE
from mesilla.network.ovs import OvsError
from mesilla.network.store import POOLED_PORT_NAME

if TYPE_CHECKING:
    from mesilla.network.nested.plumbing import Plumbing

log = logging.getLogger(__name__)

SUBPORT_OWNER = "trunk:subport"
PENDING = "pending"
ATTACHED = "attached"
POOLED = "pooled"
POOL = "pool"  # the key of a pooled subport: pool/<network>/<id>
UNCLAIMED = "unclaimed"  # taken from a pool, the port not yet renamed for its pod
SOCKET_FILE = "nested.sock"
BINDINGS_DIR = "network/nested"
OVS_DIR = "network/ovs"
SERVICE_TIMEOUT = 30.0
POOL_CHECK_INTERVAL = 5.0

NESTED_FLAGS: list[Flag] = [
    Flag("network_service_url",
         "The network service (Neutron v2.0 API) this host's pods get subports from, e.g. "
         "http://master:5050/network/; with --network_trunk_id and --network_trunk_token it "
         "turns on the `mesilla-nested` CNI plugin's agent side."),
    Flag("network_trunk_id", "The trunk of this host's trunk NIC in the network service."),
    Flag("network_trunk_token",
         "A file holding the token scoped to that trunk (POST /v2.0/mesilla/trunk_tokens)."),
    Flag("network_trunk_nic", "The host's trunk NIC.", "eth0"),
    Flag("network_nested_backend",
         "How pods' subports are plumbed: 'vlan' (802.1Q sub-interfaces), 'ovs' (an Open "
         "vSwitch bridge over the trunk NIC) or 'auto' (vlan where the kernel has 802.1Q).",
         "auto"),
    Flag("network_nested_bridge", "The Open vSwitch bridge of the ovs backend.", "br-trunk"),
    Flag("network_nested_pool_size",
         "Ready subports kept per network this host has attached a pod to (0: none), so that a "
         "pod's network attaches without a call to the network service; refilled in the background.",
         0, "int"),
    Flag("network_nested_socket",
         "Where the agent answers the mesilla-nested plugin (default: <runtime_dir>/nested.sock)."),
]  # fmt: skip


class ServiceError(RuntimeError):
    """The network service refused or failed a call; `status` 4xx is the plugin's fault (a
    wrong network id), anything else the service's or the agent's."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


def enabled(flags: Flags) -> bool:
    given = [flags.get(n) for n in ("network_service_url", "network_trunk_id", "network_trunk_token")]
    if any(given) and not all(given):
        raise FlagError(
            "Nested networking needs --network_service_url, --network_trunk_id and "
            "--network_trunk_token together"
        )
    return all(given)


def socket_path(flags: Flags) -> str:
    return flags.get("network_nested_socket") or os.path.join(flags.runtime_dir, SOCKET_FILE)


class Service:
    """The network service as the trunk's token may use it."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/") + "/"
        self._token = token
        self._session: aiohttp.ClientSession | None = None

    async def call(self, method: str, path: str, body: Any = None, missing_ok: bool = False) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers={"X-Auth-Token": self._token, "Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=SERVICE_TIMEOUT),
            )
        try:
            async with self._session.request(method, self.url + path, json=body) as response:
                raw = await response.read()
                doc = json.loads(raw) if raw.strip() else None
                if response.status == 404 and missing_ok:
                    return None
                if response.status >= 400:
                    error = (doc or {}).get("NeutronError", {}) if isinstance(doc, dict) else {}
                    reason = error.get("message") or raw.decode(errors="replace")[:300]
                    # The service's 4xx is the plugin's too (a wrong network id); the rest is ours.
                    status = response.status if response.status in (400, 404, 409) else 502
                    raise ServiceError(f"The network service answered {method} /{path} with "
                                       f"{response.status}: {reason}", status)  # fmt: skip
                return doc
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ServiceError(f"The network service at {self.url} cannot be reached: {exc!r}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class NestedAgent:
    """The bindings of this host's pods, their plumbing, and the socket the plugin asks on."""

    def __init__(self, flags: Flags) -> None:
        self.trunk_id: str = flags.network_trunk_id
        try:
            with open(flags.network_trunk_token) as f:
                token = f.read().strip()
        except OSError as exc:
            raise FlagError(f"Cannot read --network_trunk_token={flags.network_trunk_token}: {exc}") from None
        self.service = Service(flags.network_service_url, token)
        self.directory = os.path.join(flags.work_dir, BINDINGS_DIR)
        self.socket = socket_path(flags)
        self.trunk_nic: str = flags.network_trunk_nic
        self.bridge: str = flags.network_nested_bridge
        self.ovs_dir = os.path.join(flags.runtime_dir, OVS_DIR)
        self.cni_roots = [os.path.join(base, CNI_DIR) for base in (flags.runtime_dir, flags.work_dir)]
        self.backend_flag: str = flags.network_nested_backend
        self.backend = ""
        self._plumbing: Plumbing | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._subnets: dict[str, dict[str, Any]] = {}
        self._mtus: dict[str, int] = {}
        self._runner: web.AppRunner | None = None
        self.pool_size: int = flags.network_nested_pool_size
        self._fillers: dict[str, asyncio.Task[None]] = {}
        self._tasks = TaskOwner("nested networking")

    # --- life cycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Sets the host up (the backend, its bridge), reconciles, then serves the socket."""
        # pyroute2 takes 0.3 s to import: not for every agent.
        from mesilla.network.nested import cni, plumbing

        os.makedirs(self.directory, exist_ok=True)
        try:
            vlan = await in_thread(plumbing.probe_vlan, self.trunk_nic)
            self.backend = plumbing.choose(self.backend_flag, vlan)
            self._plumbing = plumbing.backend(self.backend, self.trunk_nic, self.ovs_dir, self.bridge,
                                              self.pod_namespaces)  # fmt: skip
            await in_thread(self._plumbing.setup_host, self.trunk_nic)
        except (ValueError, plumbing.PlumbingError, OvsError) as exc:
            raise FlagError(f"Nested networking cannot start on --network_trunk_nic={self.trunk_nic} "
                            f"(--network_nested_backend={self.backend_flag}): {exc}") from None  # fmt: skip
        log.info("Nested networking on trunk %s through %s (%s backend)", self.trunk_id,
                 self.trunk_nic, self.backend)  # fmt: skip
        try:
            await self.reconcile()
        except ServiceError as exc:
            # Pods then fail to attach until the service answers; the agent serves the rest.
            log.warning("Cannot reconcile trunk %s with the network service: %s", self.trunk_id, exc)
        for key, binding in self.bindings().items():
            if binding["state"] == POOLED:  # plumbed ahead again where a switch restart lost it
                await self._prepare(key, binding)
        for network_id in self.pools():
            self._refill(network_id)  # pools recovered from the bindings, topped up
        if self.pool_size > 0:
            self._tasks.spawn(self._watch_pools(), "pool check")
        app = web.Application()
        app.router.add_post(cni.ROUTE, cni.handler(self))
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        os.makedirs(os.path.dirname(self.socket), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            files.remove_file(os.path.dirname(self.socket), self.socket)  # an earlier agent's
        await web.UnixSite(self._runner, self.socket).start()
        os.chmod(self.socket, 0o600)  # the plugin runs as the agent's user (root)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self._tasks.close()
        await self.service.close()

    @property
    def plumbing(self) -> Plumbing:
        assert self._plumbing is not None, "start() chooses the backend"
        return self._plumbing

    def pod_namespaces(self) -> list[str]:
        """Where a sub-interface holding a VLAN ID may outlive its pod: the pods' namespaces."""
        return sorted(str(p) for root in self.cni_roots for p in Path(root).glob(f"*/{NS_FILE}"))

    async def reconcile(self) -> None:
        """Releases what a crash left (pending bindings, subports no binding names), pooled
        subports beyond --network_nested_pool_size (0 drains the pools) and pooled ones no
        longer on the trunk (deleted with their network meanwhile); renames ports taken from
        a pool whose renaming was cut short."""
        bindings = self.bindings()
        kept: dict[str, int] = {}
        for key, binding in bindings.items():
            if binding.get(UNCLAIMED):
                self._tasks.spawn(self._claim(key, binding["port_id"]), f"claim {key}")
            if binding["state"] == POOLED:
                kept[binding["network_id"]] = kept.get(binding["network_id"], 0) + 1
                if kept[binding["network_id"]] <= self.pool_size:
                    continue
            elif binding["state"] != PENDING:
                continue
            log.info("Releasing port %s (%s, %s)", binding["port_id"], key, binding["state"])
            if await self._release_logged(binding):
                self._forget(key)
        subs = await self._check_pools()
        known = {b["port_id"] for b in self.bindings().values()}
        for sub in subs:
            if sub["port_id"] not in known:
                log.info("Releasing subport %s (VLAN %s) that no binding names",
                         sub["port_id"], sub["segmentation_id"])  # fmt: skip
                await self._release_logged({"port_id": sub["port_id"], "state": ATTACHED})

    async def _check_pools(self) -> list[dict[str, Any]]:
        """Releases (and unplugs) the pooled subports no longer on the trunk, deleted with their
        network or taken off by an admin; answers the trunk's subports."""
        subs: list[dict[str, Any]] = (
            await self.service.call("GET", f"v2.0/trunks/{self.trunk_id}/get_subports")
        ).get("sub_ports", [])
        on_trunk = {sub["port_id"] for sub in subs}
        for key, binding in self.bindings().items():
            if binding["state"] == POOLED and binding["port_id"] not in on_trunk:
                async with self._lock(key):
                    if self._binding(key) is None:
                        continue  # taken by an attach meanwhile
                    log.info("Pooled port %s of network %s is off the trunk (its network deleted?)",
                             binding["port_id"], binding["network_id"])  # fmt: skip
                    if await self._release_logged(binding):
                        self._forget(key)
        return subs

    async def _watch_pools(self) -> None:
        while True:
            await asyncio.sleep(POOL_CHECK_INTERVAL)
            if self.pools():
                try:
                    await self._check_pools()
                except ServiceError as exc:
                    log.warning("Cannot check the pools of trunk %s: %s", self.trunk_id, exc)

    async def _release_logged(self, binding: dict[str, Any]) -> bool:
        """`_release`, a refusal logged rather than raised (the next start tries again)."""
        try:
            await self._release(binding)
        except ServiceError as exc:
            log.warning("Cannot release port %s: %s", binding["port_id"], exc)
            return False
        return True

    # --- the bindings --------------------------------------------------------------------

    def _file(self, key: str) -> str:
        return os.path.join(self.directory, urllib.parse.quote(key, safe="") + ".json")

    def bindings(self) -> dict[str, dict[str, Any]]:
        found = {}
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(".json"):
                with contextlib.suppress(OSError, ValueError):
                    with open(os.path.join(self.directory, name)) as f:
                        doc = json.load(f)
                    found[urllib.parse.unquote(name[: -len(".json")])] = doc
        return found

    async def _record(self, key: str, binding: dict[str, Any]) -> None:
        await in_thread(files.write_atomically, self._file(key), json.dumps(binding).encode())

    def _forget(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            files.remove_file(self.directory, self._file(key))

    def _binding(self, key: str) -> dict[str, Any] | None:
        try:
            with open(self._file(key)) as f:
                doc: dict[str, Any] = json.load(f)
                return doc
        except (OSError, ValueError):
            return None

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    # --- the CNI verbs -------------------------------------------------------------------

    async def add(
        self, container: str, ifname: str, netns: str, network_id: str
    ) -> tuple[dict[str, Any], str]:
        """The pod's binding, plumbed into `netns`, and the interface's MAC."""
        from mesilla.network.nested.plumbing import PlumbingError, Vif

        key = f"{container}/{ifname}"
        async with self._lock(key):
            binding = await self._attach(key, container, ifname, network_id)
            vif = Vif.from_json(binding)
            try:
                mac = await in_thread(self.plumbing.plug, vif, netns, ifname)
            except Exception as exc:  # whatever failed, the half-made interface and the subport go
                await self._unplug_and_release(key, binding, netns, ifname)
                raise PlumbingError(f"Plumbing port {vif.port_id} into {netns} failed: {exc}") from None
            finally:
                self._refill(network_id)  # after the plumbing, which it would only slow down
        return binding, mac

    async def delete(self, container: str, ifname: str, netns: str | None) -> None:
        key = f"{container}/{ifname}"
        async with self._lock(key):
            binding = self._binding(key)
            if binding is not None:
                await self._unplug_and_release(key, binding, netns, ifname)
                log.info("Released port %s of %s", binding["port_id"], key)
        self._locks.pop(key, None)

    async def check(self, container: str, ifname: str, netns: str) -> str | None:
        """What is wrong with the pod's interface, None if nothing."""
        from mesilla.network.nested.plumbing import Vif, pod_end_ready

        binding = self._binding(f"{container}/{ifname}")
        if binding is None or binding["state"] != ATTACHED:
            return f"The agent holds no subport for {container}/{ifname}"
        if not await in_thread(pod_end_ready, netns, ifname, Vif.from_json(binding)):
            return f"{ifname} in {netns} lacks port {binding['port_id']}'s MAC or addresses"
        return None

    async def _unplug_and_release(
        self, key: str, binding: dict[str, Any], netns: str | None, ifname: str
    ) -> None:
        if "segmentation_id" in binding:  # else never plumbed: a pending binding
            await in_thread(self.plumbing.unplug, binding["port_id"], netns, ifname,
                                    binding.get("mac_address"))  # fmt: skip
        await self._release(binding)
        self._forget(key)

    # --- attach and release --------------------------------------------------------------

    async def _attach(self, key: str, container: str, ifname: str, network_id: str) -> dict[str, Any]:
        binding = self._binding(key)
        if binding is not None and binding["state"] == ATTACHED:
            if binding["network_id"] != network_id:
                raise ServiceError(f"{key} is attached to network {binding['network_id']} already", 409)
            return binding
        if binding is not None:
            await self._release(binding)
        binding = await self._take_pooled(network_id, key, container, ifname)
        if binding is None:
            [binding] = await self._make_subports(
                network_id, [(key, {"container": container, "ifname": ifname})], ATTACHED
            )
        log.info("Attached port %s (VLAN %d, %s) for %s", binding["port_id"], binding["segmentation_id"],
                 ", ".join(a["address"] for a in binding["addresses"]), key)  # fmt: skip
        return binding

    async def _make_subports(
        self, network_id: str, wanted: list[tuple[str, dict[str, Any]]], state: str
    ) -> list[dict[str, Any]]:
        """Ports on `network_id` (one bulk create), one atomic add to the trunk, a binding
        recorded under each key: pending as soon as the ports exist, then `state`."""
        created = await self.service.call("POST", "v2.0/ports", {"ports": [
            {"network_id": network_id, "device_owner": SUBPORT_OWNER,
             "name": POOLED_PORT_NAME if state == POOLED else f"mesilla-nested:{key}"}
            for key, _ in wanted
        ]})  # fmt: skip
        ports = created["ports"]
        bindings = []
        for (key, extra), port in zip(wanted, ports, strict=True):
            binding = {"state": PENDING, **extra, "network_id": network_id, "port_id": port["id"]}
            await self._record(key, binding)
            bindings.append((key, binding, port))
        try:
            trunk = await self.service.call("PUT", f"v2.0/trunks/{self.trunk_id}/add_subports", {
                "sub_ports": [{"port_id": port["id"], "segmentation_type": "vlan"} for port in ports],
            })  # fmt: skip
            vlans = {s["port_id"]: s["segmentation_id"] for s in trunk["sub_ports"]}
            mtu = await self._mtu(network_id)
            for _, binding, port in bindings:
                binding.update(
                    state=state, segmentation_id=vlans[port["id"]], mac_address=port["mac_address"],
                    mtu=mtu, addresses=[await self._address(f) for f in port["fixed_ips"]],
                )  # fmt: skip
        except BaseException:
            for key, binding, _ in bindings:
                await asyncio.shield(self._release(binding))
                self._forget(key)
            raise
        for key, binding, _ in bindings:
            await self._record(key, binding)
        return [binding for _, binding, _ in bindings]

    async def _release(self, binding: dict[str, Any]) -> None:
        port_id = binding["port_id"]
        with contextlib.suppress(ServiceError):
            # 404: not (or no longer) a subport of this trunk.
            await self.service.call("PUT", f"v2.0/trunks/{self.trunk_id}/remove_subports",
                                    {"sub_ports": [{"port_id": port_id}]}, missing_ok=True)  # fmt: skip
        await self.service.call("DELETE", f"v2.0/ports/{port_id}", missing_ok=True)
        if binding["state"] == POOLED:
            await in_thread(self.plumbing.unplug, port_id, None, "", None)

    async def _mtu(self, network_id: str) -> int:
        if network_id not in self._mtus:
            network = await self.service.call("GET", f"v2.0/networks/{network_id}")
            self._mtus[network_id] = int(network["network"]["mtu"])
        return self._mtus[network_id]

    async def _address(self, fixed: dict[str, str]) -> dict[str, Any]:
        subnet_id = fixed["subnet_id"]
        if subnet_id not in self._subnets:
            self._subnets[subnet_id] = (await self.service.call("GET", f"v2.0/subnets/{subnet_id}"))["subnet"]
        subnet = self._subnets[subnet_id]
        prefix = subnet["cidr"].split("/")[1]
        return {"address": f"{fixed['ip_address']}/{prefix}", "gateway": subnet.get("gateway_ip")}

    # --- port pools ------------------------------------------------------------------------

    def _pooled(self, network_id: str) -> list[str]:
        prefix = f"{POOL}/{network_id}/"
        return [k for k, b in self.bindings().items() if k.startswith(prefix) and b["state"] == POOLED]

    async def _take_pooled(
        self, network_id: str, key: str, container: str, ifname: str
    ) -> dict[str, Any] | None:
        """A ready subport of the network's pool handed to `key`, with no call to the service
        (the port is renamed for its pod in the background)."""
        for pool_key in self._pooled(network_id):
            lock = self._lock(pool_key)
            if lock.locked():
                continue  # being prepared, checked or taken
            async with lock:
                pooled = self._binding(pool_key)
                if pooled is None:
                    continue
                binding = {**pooled, "state": ATTACHED, "container": container, "ifname": ifname,
                           UNCLAIMED: True}  # fmt: skip
                await self._record(key, binding)  # the new owner first: a crash in between leaves it named
                self._forget(pool_key)
            self._locks.pop(pool_key, None)
            self._tasks.spawn(self._claim(key, binding["port_id"]), f"claim {key}")
            return binding
        return None

    async def _claim(self, key: str, port_id: str) -> None:
        """Renames a port taken from a pool, so that its network's deletion no longer takes it
        (the binding says so until done: a restarted agent claims it again)."""
        try:
            await self.service.call("PUT", f"v2.0/ports/{port_id}",
                                    {"port": {"name": f"mesilla-nested:{key}"}})  # fmt: skip
        except ServiceError as exc:
            log.warning("Cannot rename port %s for %s: %s", port_id, key, exc)
            return
        async with self._lock(key):
            binding = self._binding(key)
            if binding is not None and binding["port_id"] == port_id:
                binding.pop(UNCLAIMED, None)
                await self._record(key, binding)

    def _refill(self, network_id: str) -> None:
        """Tops the network's pool up to --network_nested_pool_size, in the background."""
        running = self._fillers.get(network_id)
        if self.pool_size <= 0 or (running is not None and not running.done()):
            return
        self._fillers[network_id] = self._tasks.spawn(self._fill(network_id), f"pool {network_id}")

    async def _fill(self, network_id: str) -> None:
        # Until full: attaches that come while it prepares ports take from the pool too.
        while (missing := self.pool_size - len(self._pooled(network_id))) > 0:
            wanted: list[tuple[str, dict[str, Any]]] = [
                (f"{POOL}/{network_id}/{uuid.uuid4().hex}", {}) for _ in range(missing)
            ]
            try:
                made = await self._make_subports(network_id, wanted, POOLED)
            except ServiceError as exc:
                log.warning("Cannot fill the pool of network %s: %s", network_id, exc)
                return
            for (key, _), binding in zip(wanted, made, strict=True):
                await self._prepare(key, binding)

    async def _prepare(self, key: str, binding: dict[str, Any]) -> None:
        """Plumbs a pooled subport ahead; an attach plumbs it in full if this fails."""
        from mesilla.network.nested.plumbing import PlumbingError, Vif

        async with self._lock(key):
            if self._binding(key) is None:
                return  # taken meanwhile
            try:
                await in_thread(self.plumbing.prepare, Vif.from_json(binding))
            except (PlumbingError, OvsError, OSError) as exc:
                log.warning("Cannot plumb pooled port %s ahead: %s", binding["port_id"], exc)

    def pools(self) -> dict[str, int]:
        """Ready subports per network."""
        counts: dict[str, int] = {}
        for key, binding in self.bindings().items():
            if key.startswith(f"{POOL}/") and binding["state"] == POOLED:
                counts[binding["network_id"]] = counts.get(binding["network_id"], 0) + 1
        return counts
