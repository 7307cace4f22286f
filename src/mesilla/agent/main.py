"""The agent daemon: its flags and `run`.

`run` serves the agent's HTTP endpoints (process id ``slave(1)``), recovers
checkpointed state, then keeps registered with the master until cancelled or
told to shut down. Shutting down stops the agent only: executors and their
containers keep running, so that a restarted agent can recover them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket

from aiohttp import web

from mesilla.agent import agent_api, container_api, endpoints, executor_api, terminations, v0_executor
from mesilla.agent.agent import Agent, Security
from mesilla.agent.executor_auth import ExecutorTokens
from mesilla.agent.flags import AgentFlags
from mesilla.agent.host import detect_resources, parse_attributes
from mesilla.agent.io_switchboard import Servers
from mesilla.agent.master_events import MasterEvents
from mesilla.agent.master_link import MasterLink
from mesilla.agent.recovery import recover
from mesilla.agent.status_update_manager import RETRY_INTERVAL_MIN
from mesilla.common import authentication, authorization, files, log_file, tls
from mesilla.common.flags import Flag, FlagError, Flags
from mesilla.common.http import Router, make_app
from mesilla.containerizer.containerizer import Containerizer
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.network.nested.agent import NESTED_FLAGS, NestedAgent, enabled
from mesilla.v1.mesos import AgentInfo

log = logging.getLogger(__name__)

AGENT_FLAGS: list[Flag] = [
    Flag("ip", "IP address to listen on.", "127.0.0.1"),
    Flag("port", "Port to listen on (0 picks a free one).", 5051, "int"),
    Flag("hostname", "The hostname the agent reports to the master (default: the host's name)."),
    Flag("master", "The master as host:port.", required=True),
    Flag("work_dir", "Where sandboxes and checkpoints live.", required=True),
    Flag(
        "resources",
        "Total resources: 'cpus:2;mem:1024;ports:[31000-32000]' or a JSON "
        "list; what is left out is detected.",
    ),
    Flag("attributes", "Attributes of the agent: 'rack:a;zone:b'."),
    Flag("default_role", "Role of resources given without one.", "*"),
    Flag(
        "executor_registration_timeout",
        "How long an executor may take to subscribe.",
        60.0,
        "duration",
    ),
    Flag(
        "executor_shutdown_grace_period",
        "How long an executor gets to exit after SHUTDOWN.",
        5.0,
        "duration",
    ),
    Flag(
        "executor_reregistration_timeout",
        "How long recovered executors get to re-subscribe.",
        2.0,
        "duration",
    ),
    Flag(
        "recover",
        "'reconnect' to live executors after a restart, or 'cleanup' to kill them and exit.",
        "reconnect",
    ),
    Flag("strict", "Make any recovery error fatal.", True, "bool"),
    Flag(
        "switch_user",
        "Run executors and their tasks as the user their command or framework names "
        "(which must exist here); when false, as the agent's own user.",
        True,
        "bool",
    ),
    Flag(
        "recovery_timeout",
        "How long executors wait for a restarted agent before exiting.",
        15 * 60.0,
        "duration",
    ),
    Flag(
        "registration_backoff_factor",
        "Initial (randomized) backoff of (re-)registration.",
        1.0,
        "duration",
    ),
    Flag(
        "executor_environment_variables",
        "JSON object of the environment executors get instead of the agent's own, "
        'e.g. {"PATH": "/bin:/usr/bin"}.',
    ),
    Flag(
        "http_executor_domain_sockets",
        "Serve executors (the executor and agent APIs) on a unix domain socket too and tell "
        "them to use it (MESOS_DOMAIN_SOCKET); implied for executors on a CNI network.",
        False,
        "bool",
    ),
    Flag(
        "domain_socket_location",
        "Where that socket is (default: <runtime_dir>/agent.sock); at most 107 characters.",
    ),
    Flag("gc_delay", "How long sandboxes of ended executors are kept.", 7 * 86400.0, "duration"),
    Flag("logging_level", "INFO, WARNING, ERROR or DEBUG.", "INFO"),
    log_file.FLAG,
    *authentication.AGENT_FLAGS,
    *authorization.AGENT_FLAGS,
    *tls.FLAGS,
    *CONTAINERIZER_FLAGS,
    *NESTED_FLAGS,
]


def agent_info(flags: Flags) -> AgentInfo:
    if flags.recover not in ("reconnect", "cleanup"):
        raise FlagError(f"Invalid --recover={flags.recover}: expecting 'reconnect' or 'cleanup'")
    try:
        resources = detect_resources(flags.resources, flags.work_dir, flags.default_role)
        attributes = parse_attributes(flags.attributes)
    except ValueError as exc:
        raise FlagError(str(exc)) from None
    return AgentInfo(
        hostname=flags.hostname or socket.gethostname(),
        port=flags.port,
        resources=resources.to_list(),
        attributes=attributes,
    )


def routes(agent: Agent) -> tuple[Router, Servers]:
    """Every endpoint of the agent, as `start_server` serves them, and the I/O
    switchboards of its container calls (built, not yet recovered)."""
    router = Router("slave(1)")
    executor_api.install(router, agent)
    v0_executor.install(router, agent)
    api = agent_api.install(router, agent, agent.files)
    endpoints.install(router, agent)
    return router, container_api.install(api, agent)


async def start_server(agent: Agent, authenticate: authentication.Authentication) -> web.AppRunner:
    """Serves the agent's endpoints; with --port=0 records the port actually bound."""
    router, switchboards = routes(agent)
    agent.spawn(switchboards.recover(), "recovery of the I/O switchboards")
    # Stopping waits at most a second for requests still open (a held executor
    # SUBSCRIBE, a long WAIT): aiohttp's default of 60 s kept a stopped agent alive.
    runner = web.AppRunner(make_app(router, authenticate), handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    ssl_context = agent.tls.server_context() if agent.tls is not None else None
    site = web.TCPSite(runner, agent.flags.ip, agent.flags.port, ssl_context=ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    agent.info.port = port
    agent.endpoint = f"{agent.flags.ip}:{port}"
    socket_path = agent.flags.domain_socket
    if socket_path is not None:
        await _serve_unix(runner, socket_path)
    return runner


async def _serve_unix(runner: web.AppRunner, path: str) -> None:
    """The same endpoints on a unix socket, for executors without the agent's network."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        # An earlier agent's (a socket cannot be bound twice).
        files.remove_file(os.path.dirname(path), path)
    await web.UnixSite(runner, path).start()
    os.chmod(path, 0o666)  # as Mesos: executors run as any user


def _handle_sigusr1(agent: Agent) -> bool:
    """SIGUSR1 shuts the agent down for good, as Mesos: its executors are shut down
    and it unregisters from the master (SIGINT and SIGTERM stop only the agent,
    whose executors keep running for its next start to recover)."""

    def shutdown() -> None:
        log.info("Received SIGUSR1: shutting down every executor and unregistering")
        terminations.shutdown(agent, unregister=True)

    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, shutdown)
    except (ValueError, RuntimeError):  # not the main thread (an embedded agent)
        return False
    return True


async def run(
    flags: Flags,
    *,
    status_update_interval: float = RETRY_INTERVAL_MIN,
    ready: asyncio.Future[Agent] | None = None,
) -> Agent:
    """Runs the agent until cancelled or shut down by the master; returns the agent.

    `ready` (for embedding and tests) gets the agent once it has recovered and
    started talking to the master.
    """
    with contextlib.ExitStack() as logs:
        try:
            log_path = logs.enter_context(
                log_file.logging_to_file(flags.get("log_dir"), "mesos-agent", flags.get("logging_level"))
            )
        except FlagError as exc:
            raise SystemExit(f"mesilla agent: {exc}") from None
        return await _run(flags, log_path, status_update_interval, ready)


async def _run(
    flags: Flags, log_path: str | None, status_update_interval: float, ready: asyncio.Future[Agent] | None
) -> Agent:
    try:
        info = agent_info(flags)
        agent_flags = AgentFlags.from_flags(flags)  # checks them: a bad one is a start-up error
        nested = NestedAgent(flags) if enabled(flags) else None
        tokens = ExecutorTokens.from_flags(flags)
        authenticate = authentication.agent_authentication(flags, [tokens] if tokens else None)
        credential = authentication.agent_credential(flags)
        http_credentials = authentication.agent_http_credentials(flags)
        authorizer = authorization.from_flags(flags)
        tls_config = tls.from_flags(flags)
    except FlagError as exc:
        # A start-up error, not a crash: the message is all the operator needs.
        raise SystemExit(f"mesilla agent: {exc}") from None
    containerizer = await Containerizer.create(agent_flags.containerizer)
    link = MasterLink(
        flags.master, float(flags.registration_backoff_factor), credential,
        tls_config.client_context() if tls_config is not None else None,
    )  # fmt: skip
    security = Security(tokens, http_credentials, authorizer, tls_config)
    agent = Agent(
        agent_flags, containerizer, info,
        master=link, security=security, status_update_interval=status_update_interval,
    )  # fmt: skip
    if tokens is not None:
        tokens.live = agent.executor_alive
    if log_path is not None:
        agent.files.attach_log(log_path, "/slave/log", authorizer)
    runner = await start_server(agent, authenticate)
    link_task: asyncio.Task[None] | None = None
    shutdown_on_signal = False
    try:
        if nested is not None:
            # Before recovery: the network/cni isolator DELs the orphans it finds through it.
            try:
                await nested.start()
            except FlagError as exc:
                raise SystemExit(f"mesilla agent: {exc}") from None
        await recover(agent)
        if flags.recover == "cleanup":
            log.info("Cleanup done; exiting")
            return agent
        link_task = asyncio.create_task(link.run(MasterEvents(agent)), name="master link")
        if ready is not None and not ready.done():
            ready.set_result(agent)
        shutdown_on_signal = _handle_sigusr1(agent)
        shutdown = asyncio.create_task(agent.shutdown_requested.wait())
        try:
            await asyncio.wait({link_task, shutdown}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            shutdown.cancel()
        if link_task.done():
            link_task.result()
        return agent
    finally:
        if shutdown_on_signal:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)
        if link_task is not None:
            link_task.cancel()
            await asyncio.gather(link_task, return_exceptions=True)
        await agent.close()
        await containerizer.close()
        await runner.cleanup()
        if nested is not None:
            await nested.close()
