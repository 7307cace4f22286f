"""`mesilla master`: flags and the daemon (Mesos's `src/master/main.cpp` and `flags.cpp`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web

from mesilla.common import attached_files, authentication, authorization, log_file, tls
from mesilla.common.flags import Flag, FlagError, Flags
from mesilla.common.http import Router, listen, make_app
from mesilla.master import agent_api, endpoints, operator_api, scheduler_api, v0_scheduler
from mesilla.master.master import Master, parse_weights
from mesilla.master.registry import (
    InMemoryRegistry,
    Registry,
    RegistryError,
    SqliteRegistry,
)
from mesilla.network.fabric import FABRIC_FLAGS, start_fabric
from mesilla.network.ovs import OvsError
from mesilla.network.service import NetworkService
from mesilla.network.store import BookError

log = logging.getLogger(__name__)

MASTER_FLAGS: list[Flag] = [
    Flag("ip", "IP address to listen on.", "127.0.0.1"),
    Flag("port", "Port to listen on.", 5050, "int"),
    Flag("hostname", "Hostname the master advertises (default: the --ip)."),
    Flag("advertise_ip", "IP address advertised to frameworks and agents."),
    Flag("work_dir", "Where the registry (registry.db) lives.", required=True),
    Flag(
        "registry",
        "Registry store: 'sqlite' (under --work_dir) or 'in_memory'.",
        "sqlite",
    ),
    Flag(
        "heartbeat_interval",
        "Interval of HEARTBEAT events to schedulers.",
        15.0,
        "duration",
    ),
    Flag("allocation_interval", "Interval between allocation cycles.", 1.0, "duration"),
    Flag(
        "offer_timeout",
        "Offers not accepted or declined within this are rescinded (default: never).",
        None,
        "duration",
    ),
    Flag(
        "agent_ping_timeout",
        "How long an agent has to answer each of the master's pings (its health check).",
        15.0,
        "duration",
    ),
    Flag(
        "max_agent_ping_timeouts",
        "Pings in a row an agent may leave unanswered before it is marked unreachable.",
        5,
        "int",
    ),
    Flag(
        "agent_reregister_timeout",
        "How long agents have to re-register after a master failover.",
        600.0,
        "duration",
    ),
    Flag(
        "roles",
        "Deprecated in Mesos: a comma-separated list of allowed roles (unset: any).",
    ),
    Flag("weights", "Role weights, e.g. 'role1=2.0,role2=1.5'."),
    Flag("max_completed_frameworks", "Completed frameworks to remember.", 50, "int"),
    Flag(
        "max_completed_tasks_per_framework",
        "Completed tasks to remember per framework.",
        1000,
        "int",
    ),
    Flag("cluster", "Human readable name of the cluster."),
    Flag(
        "network_service",
        "Serve the network service (a Neutron v2.0 subset) at /network/, its book in --work_dir.",
        False,
        "bool",
    ),
    *FABRIC_FLAGS,
    *authentication.MASTER_FLAGS,
    *authorization.MASTER_FLAGS,
    *tls.FLAGS,
    Flag("quiet", "Disable logging to stderr.", False, "bool"),
    Flag("logging_level", "Log level: INFO, WARNING or ERROR.", "INFO"),
    log_file.FLAG,
]


def validate_ping_flags(flags: Flags) -> None:
    """As Mesos, except that sub-second pings are allowed (quick tests)."""
    if not 0 < flags.agent_ping_timeout <= 15 * 60:
        raise FlagError("Expected '--agent_ping_timeout' to be above 0 and at most 15mins")
    if flags.max_agent_ping_timeouts < 1:
        raise FlagError("Expected '--max_agent_ping_timeouts' to be at least 1")


def make_registry(flags: Flags) -> Registry:
    # Mesos's default, the replicated log, maps to SQLite: both are durable in the work_dir.
    if flags.registry in ("sqlite", "replicated_log"):
        return SqliteRegistry.in_work_dir(flags.work_dir)
    if flags.registry == "in_memory":
        return InMemoryRegistry()
    raise FlagError(
        f"Unknown --registry '{flags.registry}': use 'sqlite' or 'in_memory'"
    )


class MasterStartError(RuntimeError):
    """The master cannot start (e.g. its port is taken); the message says what to change."""


@dataclass
class MasterServer:
    master: Master
    runner: web.AppRunner
    port: int
    router: Router

    @property
    def address(self) -> str:
        return f"{self.master.flags.ip}:{self.port}"


@asynccontextmanager
async def serve(flags: Flags) -> AsyncIterator[MasterServer]:
    """Runs a master on ``--ip``/``--port`` (0 picks a free port) until the block exits."""
    try:
        parse_weights(flags.get("weights"))
    except ValueError as exc:
        raise FlagError(f"Invalid --weights '{flags.weights}': {exc}") from None
    validate_ping_flags(flags)
    authenticate = authentication.master_authentication(flags)
    authorizer = authorization.from_flags(flags)
    tls_config = tls.from_flags(flags)
    try:
        network = await NetworkService.in_work_dir(flags.work_dir) if flags.get("network_service") else None
    except BookError as exc:
        raise MasterStartError(str(exc)) from None
    # Off the loop: a registry in the work_dir may create its directory.
    master = Master(flags, await asyncio.to_thread(make_registry, flags), authorizer)
    files = attached_files.Files()
    router = Router("master")
    scheduler_api.install(router, master)
    v0_scheduler.install(router, master)
    agent_api.install(router, master)
    operator_api.install(router, master, files)
    endpoints.install(router, master)
    attached_files.install(router, files, endpoints.READONLY, authorizer)
    if network is not None:
        network.install(router)
    runner = web.AppRunner(make_app(router, authenticate), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    fabric = None
    logs = contextlib.ExitStack()
    try:
        log_path = logs.enter_context(
            log_file.logging_to_file(flags.get("log_dir"), "mesos-master", flags.get("logging_level"))
        )
        if log_path is not None:
            files.attach_log(log_path, "/master/log", authorizer)
        if network is not None:
            try:
                fabric = await start_fabric(flags, network.book)
            except OvsError as exc:
                raise MasterStartError(f"The fabric cannot start: {exc}") from None
        ssl_context = tls_config.server_context() if tls_config is not None else None
        port = await listen(runner, flags.ip, flags.port, MasterStartError, ssl_context)
        advertised = flags.get("advertise_ip") or flags.ip
        if advertised == "0.0.0.0":
            # A name lookup may block: off the loop.
            advertised = await asyncio.to_thread(socket.gethostbyname, socket.gethostname())
        master.set_address(advertised, port, flags.get("hostname"))
        try:
            await master.start()
        except RegistryError as exc:
            raise MasterStartError(str(exc)) from None
        log.info("master %s listening on %s:%d", master.id, flags.ip, port)
        yield MasterServer(master, runner, port, router)
    finally:
        await master.stop()
        await runner.cleanup()
        if fabric is not None:
            await fabric.close()
        if network is not None:
            await network.close()
        logs.close()


async def run(flags: Flags) -> None:
    """The daemon: serves until cancelled, then closes every stream and stops cleanly."""
    try:
        async with serve(flags):
            await asyncio.Event().wait()
    except (MasterStartError, FlagError) as exc:
        log.error("%s", exc)
        raise SystemExit(1) from None
