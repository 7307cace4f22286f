"""The agent's process dies (SIGKILL) while it holds containers; a new one recovers them.

The dying "agent" is a real process running a Containerizer; the test process
then recovers from the same runtime directory, as a restarted agent would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import textwrap
from typing import Any

from mesilla.common.flags import parse
from mesilla.containerizer.containerizer import Containerizer
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.isolators.posix.procfs import session_processes
from mesilla.v1.mesos import ContainerID

AGENT = textwrap.dedent(
    """
    import asyncio, sys
    from mesilla.common.flags import parse
    from mesilla.containerizer.containerizer import Containerizer
    from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
    from mesilla.containerizer.types import ContainerConfig
    from mesilla.v1.mesos import CommandInfo, CommandURI, ContainerID, ExecutorID, ExecutorInfo

    async def main(runtime_dir, sandbox, script, uri):
        flags = parse(CONTAINERIZER_FLAGS, [f"--runtime_dir={runtime_dir}", "--launcher=posix"])
        containerizer = await Containerizer.create(flags)
        command = CommandInfo(value=script, uris=[CommandURI(value=uri)] if uri else [])
        config = ContainerConfig(
            command=command, sandbox=sandbox,
            executor_info=ExecutorInfo(executor_id=ExecutorID(value="e")),
        )
        await containerizer.launch(ContainerID(value="c"), config)
        print("launched", flush=True)
        await asyncio.Event().wait()  # until killed

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def start_agent(tmp_path: Any, script: str, uri: str = "") -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", AGENT, str(tmp_path / "runtime"), str(tmp_path / "sandbox"),
        script, uri, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def until(predicate: Any) -> None:
    for _ in range(3000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


def kill_leftovers(agent: asyncio.subprocess.Process, pid: int | None) -> None:
    """Whatever a failing test left: the agent process and the container's session."""
    if agent.returncode is None:
        agent.kill()
    if pid is not None:
        for process in session_processes(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)


async def recover(tmp_path: Any) -> Containerizer:
    flags = parse(
        CONTAINERIZER_FLAGS, [f"--runtime_dir={tmp_path}/runtime", "--launcher=posix"], environ={}
    )
    containerizer = await Containerizer.create(flags)
    await containerizer.recover({ContainerID(value="c")})
    return containerizer


async def test_running_container_survives_the_agent(tmp_path: Any) -> None:
    agent = await start_agent(tmp_path, "exec sleep 1000")
    pid = None
    try:
        assert agent.stdout is not None
        assert await asyncio.wait_for(agent.stdout.readline(), 30) == b"launched\n"
        pid = int((tmp_path / "runtime/containers/c/pid").read_text())
        agent.kill()
        await agent.wait()
        await check_recovered_running(tmp_path, pid)
    finally:
        kill_leftovers(agent, pid)
        await agent.wait()


async def check_recovered_running(tmp_path: Any, pid: int) -> None:
    containerizer = await recover(tmp_path)
    try:
        cid = ContainerID(value="c")
        assert containerizer.containers() == [cid]
        assert (await containerizer.status(cid)).executor_pid == pid  # the same process
        await containerizer.kill(cid, signal.SIGTERM)
        termination = await containerizer.wait(cid)
        assert termination is not None and termination.status is not None
        assert os.WTERMSIG(termination.status) == signal.SIGTERM
    finally:
        for cid in containerizer.containers():
            await containerizer.destroy(cid)
        await containerizer.close()
    assert session_processes(pid) == []


async def test_agent_dying_mid_launch_leaves_nothing_running(
    tmp_path: Any, unused_port: int
) -> None:
    requested = asyncio.Event()

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requested.set()  # the launch is now FETCHING: forked, held, not started
        await reader.read()
        writer.close()

    server = await asyncio.start_server(hang, "127.0.0.1", unused_port)
    agent = await start_agent(tmp_path, "touch ran", f"http://127.0.0.1:{unused_port}/artifact")
    pid = None
    try:
        await asyncio.wait_for(requested.wait(), 30)
        pid = int((tmp_path / "runtime/containers/c/pid").read_text())
        agent.kill()
        await agent.wait()
        await check_recovered_aborted(tmp_path, pid)
    finally:
        kill_leftovers(agent, pid)
        await agent.wait()
        server.close()
        await server.wait_closed()


async def check_recovered_aborted(tmp_path: Any, pid: int) -> None:
    containerizer = await recover(tmp_path)
    try:
        termination = await containerizer.wait(ContainerID(value="c"))
        assert termination is not None and termination.status is not None
        # The held process saw its start gate close and exited without running.
        assert os.WIFEXITED(termination.status) and os.WEXITSTATUS(termination.status) == 1
        assert not (tmp_path / "sandbox" / "ran").exists()
        assert session_processes(pid) == []
        assert containerizer.containers() == []
    finally:
        await containerizer.close()
