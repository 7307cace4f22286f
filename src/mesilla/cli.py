"""The `mesilla` command: `master`, `agent`, `network` and `local` (a whole cluster on 127.0.0.1).

`mesilla local` runs one master and `--num_agents` agents as child processes of
its own, handing each flag to the side(s) that know it, so that a crash or a
`kill -9` of one daemon behaves exactly as it would on a real cluster.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence

from mesilla.common import mesos_flags
from mesilla.common.errors import ConfigurationError
from mesilla.common.flags import Flag, FlagError, Flags, parse, usage
from mesilla.common.log_file import LOG_FORMAT

USAGE = """Usage: mesilla <command> [--flag=value ...]

Commands:
  master   run a master (scheduler, operator and agent-facing APIs)
  agent    run an agent (executor and agent APIs, containerizer)
  network  run the network service (a Neutron v2.0 subset) alone
  local    run a master and --num_agents agents on 127.0.0.1

`mesilla <command> --help` lists the command's flags. Every flag can also come
from the environment as MESILLA_<FLAG> or, as in Mesos, MESOS_<FLAG>. Mesos's
flags that Mesilla does not implement are accepted with a warning.
"""

LOCAL_FLAGS = [
    Flag("num_agents", "How many agents to run.", 1, "int"),
    Flag("work_dir", "Parent of the master's and each agent's work_dir.", "/tmp/mesilla-local"),
    Flag("ip", "Address every daemon listens on.", "127.0.0.1"),
    Flag("port", "The master's port; agents take the following ones from 5051.", 5050, "int"),
    Flag("agent_port", "The first agent's port.", 5051, "int"),
]


def _setup_logging(level: str | None) -> None:
    logging.basicConfig(
        level=getattr(logging, (level or "INFO").upper(), logging.INFO),
        format=LOG_FORMAT,
        stream=sys.stderr,
    )


def _daemon_flags(kind: str) -> tuple[list[Flag], frozenset[str]]:
    """(the daemon's flags, Mesos's names for it that Mesilla accepts without effect)."""
    if kind == "master":
        from mesilla.master.main import MASTER_FLAGS as specs
    elif kind == "network":
        from mesilla.network.main import NETWORK_FLAGS as specs

        return specs, frozenset()  # Neutron's, not Mesos's
    else:
        from mesilla.agent.main import AGENT_FLAGS as specs
    mesos = mesos_flags.MASTER if kind == "master" else mesos_flags.AGENT
    return specs, mesos - {spec.name for spec in specs}


def _refuse_unsafe_to_ignore(flags: Flags) -> None:
    unsafe = [
        name
        for name, text in flags.without_effect.items()
        if name in mesos_flags.UNSAFE_TO_IGNORE and text.strip().lower() not in ("false", "0", "no")
    ]
    if unsafe:
        raise FlagError(
            "Not implemented in Mesilla yet, and ignoring them would leave the daemon open: "
            + ", ".join(f"--{name}" for name in unsafe)
        )


def _daemon_run(kind: str) -> Callable[[Flags], Awaitable[object]]:
    """The daemon's `run` (imported only for the daemon chosen), with the garbage collector
    off meanwhile and what the imports made frozen after: importing a daemon makes objects
    that live as long as it, so collecting them is work lost (a fifth of the agent's import,
    which a restarted agent pays before it recovers), and so is every later full collection
    walking them again."""
    gc.disable()
    try:
        return _import_daemon(kind)
    finally:
        gc.freeze()
        gc.enable()


def _import_daemon(kind: str) -> Callable[[Flags], Awaitable[object]]:
    if kind == "master":
        from mesilla.master.main import run as master
        return master
    if kind == "network":
        from mesilla.network.main import run as network
        return network
    from mesilla.agent.main import run as agent
    return agent


def _run_daemon(kind: str, argv: Sequence[str]) -> int:
    run = _daemon_run(kind)
    specs, accepted = _daemon_flags(kind)
    if "--help" in argv:
        print(usage(f"mesilla {kind}", specs))
        return 0
    try:
        flags = parse(specs, argv, accepted=accepted, aliases=mesos_flags.DEPRECATED)
        _refuse_unsafe_to_ignore(flags)
    except FlagError as exc:
        print(f"mesilla {kind}: {exc}\n\nSee 'mesilla {kind} --help'.", file=sys.stderr)
        return 1
    _setup_logging(flags.get("logging_level"))
    if flags.without_effect:
        logging.getLogger(f"mesilla.{kind}").warning(
            "Mesos flags without effect in Mesilla (accepted, ignored): %s",
            ", ".join(f"--{name}" for name in flags.without_effect),
        )
    try:
        asyncio.run(_serve(run, flags))
    except ConfigurationError as exc:
        # Found while starting (an unknown isolator, an unusable backend): the
        # message is all the operator needs, as for a malformed flag.
        print(f"mesilla {kind}: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(run: Callable[[Flags], Awaitable[object]], flags: Flags) -> None:
    """Runs a daemon until SIGINT or SIGTERM cancels it, which makes it shut down cleanly."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, task.cancel)
    try:
        await run(flags)
    except asyncio.CancelledError:
        pass


def _split_local_flags(argv: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """Sorts `mesilla local`'s arguments into (local, master, agent) flags."""
    local_names = {f.name for f in LOCAL_FLAGS}
    master_specs, master_accepted = _daemon_flags("master")
    agent_specs, agent_accepted = _daemon_flags("agent")
    master_names = {f.name for f in master_specs} | master_accepted
    agent_names = {f.name for f in agent_specs} | agent_accepted
    local, master, agent = [], [], []
    for arg in argv:
        name = arg[2:].partition("=")[0].replace("-", "_") if arg.startswith("--") else ""
        bare = name[3:] if name.startswith("no_") else name
        bare = mesos_flags.DEPRECATED.get(bare, bare)
        if bare in local_names:
            local.append(arg)
            continue
        known = False
        if bare in master_names:
            master.append(arg)
            known = True
        if bare in agent_names:
            agent.append(arg)
            known = True
        if not known:
            raise FlagError(f"Unknown flag '{arg}': neither the master nor the agent knows it")
    return local, master, agent


def _run_local(argv: Sequence[str]) -> int:
    if "--help" in argv:
        print(usage("mesilla local", LOCAL_FLAGS))
        print("\nplus every flag of `mesilla master --help` and `mesilla agent --help`.")
        return 0
    try:
        local_argv, master_argv, agent_argv = _split_local_flags(argv)
        flags = parse(LOCAL_FLAGS, local_argv)
    except FlagError as exc:
        print(f"mesilla local: {exc}", file=sys.stderr)
        return 1
    _setup_logging(None)
    log = logging.getLogger("mesilla.local")
    work_dir = os.path.abspath(flags.work_dir)
    master_addr = f"{flags.ip}:{flags.port}"
    given = {a[2:].partition("=")[0] for a in agent_argv}
    cmd = [sys.executable, "-m", "mesilla"]
    # Own process groups: a terminal's Ctrl-C reaches only us, and we stop the
    # cluster in order (an agent that saw SIGINT itself would leave its executors).
    master = subprocess.Popen(
        [*cmd, "master", f"--ip={flags.ip}", f"--port={flags.port}",
         f"--work_dir={work_dir}/master", *master_argv],
        process_group=0,
    )
    agents: list[subprocess.Popen[bytes]] = []
    for i in range(flags.num_agents):
        agent_dir = f"{work_dir}/agent-{i}"
        extra = [] if "runtime_dir" in given else [f"--runtime_dir={agent_dir}/run"]
        agents.append(
            subprocess.Popen(
                [*cmd, "agent", f"--ip={flags.ip}", f"--port={flags.agent_port + i}",
                 f"--master={master_addr}", f"--work_dir={agent_dir}", *extra, *agent_argv],
                process_group=0,
            )
        )
    log.info("master on http://%s, %d agent(s) from port %d; Ctrl-C stops all",
             master_addr, flags.num_agents, flags.agent_port)
    return _supervise(master, agents, log)


def _supervise(
    master: subprocess.Popen[bytes], agents: list[subprocess.Popen[bytes]], log: logging.Logger
) -> int:
    """Runs the cluster until a signal (or a failed daemon) stops it, in this order:

    the agents get SIGUSR1, which (as Mesos's) shuts their executors down and
    unregisters them, so that nothing of the cluster outlives it; the master
    gets SIGTERM once they are gone. A second signal stops everything at once
    with SIGTERM (the agents' executors then keep running, as on an agent restart).
    """
    signals = 0

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal signals
        signals += 1

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    children = [master, *agents]
    code = 0
    handled = 0  # signals acted upon
    master_stopped = False
    while any(child.poll() is None for child in children):
        if signals > handled:
            handled = signals
            doomed, sig = (agents, signal.SIGUSR1) if handled == 1 else (children, signal.SIGTERM)
            for child in doomed:
                if child.poll() is None:
                    child.send_signal(sig)
            master_stopped = master_stopped or handled > 1
        if (
            handled
            and not master_stopped
            and all(a.poll() is not None for a in agents)
            and master.poll() is None
        ):
            master.send_signal(signal.SIGTERM)
            master_stopped = True
        for child in children:
            try:
                rc = child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                continue
            if rc not in (0, -signal.SIGTERM) and code == 0:
                code = rc if rc > 0 else 1
                name = "the master" if child is master else f"agent {agents.index(child)}"
                log.error("%s exited with %s; stopping the cluster", name, rc)
                signals = max(signals, 1)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 1
    command, rest = args[0], args[1:]
    if command in ("master", "agent", "network"):
        return _run_daemon(command, rest)
    if command == "local":
        return _run_local(rest)
    print(f"mesilla: unknown command '{command}'\n\n{USAGE}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
