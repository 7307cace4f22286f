"""The Containerizer driving the posix launcher: real processes, real runtime dir."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from mesilla.common.flags import parse
from mesilla.containerizer import containerizer as containerizer_module
from mesilla.containerizer.containerizer import (
    MAX_NESTING_DEPTH,
    Containerizer,
    ContainerLaunchError,
    ContainerNotRemovable,
    LaunchResult,
)
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.isolators.posix.procfs import session_processes
from mesilla.containerizer.launcher.posix import PosixLauncher
from mesilla.containerizer.types import (
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerLimitation,
    ContainerState,
)
from mesilla.v1.mesos import (
    CommandInfo,
    CommandURI,
    ContainerID,
    ExecutorID,
    ExecutorInfo,
    Reason,
)


def make_flags(tmp_path: Any, *extra: str) -> Any:
    return parse(
        CONTAINERIZER_FLAGS,
        [f"--runtime_dir={tmp_path}/runtime", "--launcher=posix", *extra],
        environ={},
    )


EXECUTOR = ExecutorInfo(executor_id=ExecutorID(value="executor"))


def shell(tmp_path: Any, script: str, name: str = "sandbox", **kwargs: Any) -> ContainerConfig:
    """An executor's container (a standalone one has no `executor_info`)."""
    return ContainerConfig(
        command=CommandInfo(value=script, **kwargs),
        sandbox=str(tmp_path / name),
        executor_info=EXECUTOR,
    )


async def until(predicate: Any) -> None:
    """Polls a condition that the test's own actions make true (bounded, no timing claim)."""
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


@pytest.fixture
def leftovers(tmp_path: Any) -> Iterator[None]:
    """Safety net for tests that drop a Containerizer: kills every checkpointed
    container's session at teardown, even if the test failed half-way."""
    yield
    for pid_file in (tmp_path / "runtime").rglob("pid"):
        for process in session_processes(int(pid_file.read_text())):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)


@pytest.fixture
async def containerizer(tmp_path: Any) -> AsyncIterator[Containerizer]:
    c = await Containerizer.create(make_flags(tmp_path))
    yield c
    for container_id in c.containers():
        if container_id.parent is None:
            await c.destroy(container_id)
    await c.close()


async def test_create_picks_posix_launcher_and_default_filesystem(tmp_path: Any) -> None:
    c = await Containerizer.create(make_flags(tmp_path, "--isolation=posix/mem"))
    assert isinstance(c.launcher, PosixLauncher)
    assert [i.name for i in c._isolators] == ["filesystem/posix", "posix/mem", "environment_secret"]


async def test_exit_code_output_and_environment(
    containerizer: Containerizer, tmp_path: Any
) -> None:
    cid = ContainerID(value="exit")
    config = shell(tmp_path, 'echo "$MESOS_SANDBOX:$GREETING"; echo oops >&2; exit 3')
    config.environment = {"GREETING": "hello"}
    assert await containerizer.launch(cid, config) == LaunchResult.SUCCESS
    assert containerizer.state(cid) == ContainerState.RUNNING
    termination = await containerizer.wait(cid)
    assert termination is not None and termination.status is not None
    assert os.WIFEXITED(termination.status) and os.WEXITSTATUS(termination.status) == 3
    assert termination.reason is None
    sandbox = tmp_path / "sandbox"
    assert (sandbox / "stdout").read_text() == f"{sandbox}:hello\n"
    assert (sandbox / "stderr").read_text() == "oops\n"
    assert cid not in containerizer.containers()
    assert not (tmp_path / "runtime" / "containers" / "exit").exists()
    assert await containerizer.wait(cid) == termination  # a late wait still learns the end


async def test_non_shell_command_uses_value_and_arguments(
    containerizer: Containerizer, tmp_path: Any
) -> None:
    cid = ContainerID(value="argv")
    config = shell(tmp_path, "/bin/sh", shell=False, arguments=["sh", "-c", "echo $0-$1", "x", "y"])
    await containerizer.launch(cid, config)
    termination = await containerizer.wait(cid)
    assert termination is not None and termination.status == 0
    assert (tmp_path / "sandbox" / "stdout").read_text() == "x-y\n"


async def test_signal_ends_container(containerizer: Containerizer, tmp_path: Any) -> None:
    cid = ContainerID(value="selfkill")
    await containerizer.launch(cid, shell(tmp_path, "kill -USR1 $$"))
    termination = await containerizer.wait(cid)
    assert termination is not None and termination.status is not None
    assert os.WIFSIGNALED(termination.status)
    assert os.WTERMSIG(termination.status) == signal.SIGUSR1


async def test_kill_signals_the_process_group(containerizer: Containerizer, tmp_path: Any) -> None:
    cid = ContainerID(value="kill")
    await containerizer.launch(
        cid,
        shell(
            tmp_path,
            "trap 'echo got TERM; exit 9' TERM; echo ready; while true; do sleep 0.05; done",
        ),
    )
    await until(lambda: (tmp_path / "sandbox" / "stdout").read_text() == "ready\n")
    assert await containerizer.kill(cid, signal.SIGTERM)
    termination = await containerizer.wait(cid)
    assert termination is not None and termination.status is not None
    assert os.WEXITSTATUS(termination.status) == 9
    assert await containerizer.kill(ContainerID(value="unknown"), signal.SIGTERM) is False


async def test_destroy_kills_the_whole_process_tree(
    containerizer: Containerizer, tmp_path: Any
) -> None:
    cid = ContainerID(value="tree")
    # A second process group inside the session must die too.
    script = "sleep 1000 & (set -m; sleep 1001 & wait) & wait"
    await containerizer.launch(cid, shell(tmp_path, script))
    status = await containerizer.status(cid)
    leader = status.executor_pid
    await until(lambda: len(session_processes(leader)) >= 3)
    pids = [p.pid for p in session_processes(leader)]
    termination = await containerizer.destroy(cid)
    assert termination is not None and termination.status is not None
    assert os.WIFSIGNALED(termination.status) and os.WTERMSIG(termination.status) == signal.SIGKILL
    assert session_processes(leader) == []
    assert len(pids) >= 3
    assert await containerizer.destroy(cid) is None


async def test_already_launched(containerizer: Containerizer, tmp_path: Any) -> None:
    cid = ContainerID(value="twice")
    await containerizer.launch(cid, shell(tmp_path, "sleep 1000"))
    assert await containerizer.launch(cid, shell(tmp_path, "true")) == LaunchResult.ALREADY_LAUNCHED


async def test_nested_containers_are_destroyed_children_first(
    containerizer: Containerizer, tmp_path: Any
) -> None:
    parent = ContainerID(value="parent")
    child = ContainerID(value="child", parent=parent)
    grandchild = ContainerID(value="grandchild", parent=child)
    await containerizer.launch(parent, shell(tmp_path, "sleep 1000"))
    await containerizer.launch(child, shell(tmp_path, "sleep 1000", "sandbox/containers/child"))
    await containerizer.launch(
        grandchild, shell(tmp_path, "sleep 1000", "sandbox/containers/child/containers/grandchild")
    )
    order: list[str] = []
    waits = []
    for cid in (parent, child, grandchild):
        task = asyncio.create_task(containerizer.wait(cid))
        task.add_done_callback(lambda _, name=cid.value: order.append(name))
        waits.append(task)
    await asyncio.sleep(0)  # let the waits register before the destroy resolves them
    await containerizer.destroy(parent)
    await asyncio.gather(*waits)
    assert order == ["grandchild", "child", "parent"]
    assert containerizer.containers() == []
    assert not (tmp_path / "runtime" / "containers" / "parent").exists()


async def test_ended_nested_container_keeps_its_termination_until_removed(
    containerizer: Containerizer, tmp_path: Any
) -> None:
    parent = ContainerID(value="p")
    child = ContainerID(value="c", parent=parent)
    await containerizer.launch(parent, shell(tmp_path, "sleep 1000"))
    await containerizer.launch(child, shell(tmp_path, "exit 4", "sandbox/containers/c"))
    first = await containerizer.wait(child)
    assert first is not None and first.status is not None and os.WEXITSTATUS(first.status) == 4
    assert await containerizer.wait(child) == first
    assert (tmp_path / "runtime/containers/p/containers/c/termination").exists()
    assert (
        await containerizer.launch(child, shell(tmp_path, "true")) == LaunchResult.ALREADY_LAUNCHED
    )
    await containerizer.remove(child)
    assert await containerizer.wait(child) is None
    assert not (tmp_path / "runtime/containers/p/containers/c").exists()
    with pytest.raises(ContainerNotRemovable):
        await containerizer.remove(parent)


async def test_nested_launch_needs_a_live_parent(
    containerizer: Containerizer, tmp_path: Any
) -> None:
    orphan = ContainerID(value="c", parent=ContainerID(value="missing"))
    with pytest.raises(ContainerLaunchError) as raised:
        await containerizer.launch(orphan, shell(tmp_path, "true"))
    assert raised.value.step == "STARTING"
    assert "missing" in raised.value.cause


async def test_nesting_depth_is_bounded(containerizer: Containerizer, tmp_path: Any) -> None:
    cid = ContainerID(value="root")
    for depth in range(MAX_NESTING_DEPTH + 1):
        cid = ContainerID(value=f"n{depth}", parent=cid)
    with pytest.raises(ContainerLaunchError, match="nesting depth"):
        await containerizer.launch(cid, shell(tmp_path, "true"))


async def test_failed_fetch_destroys_what_was_built(
    containerizer: Containerizer, tmp_path: Any
) -> None:
    cid = ContainerID(value="badfetch")
    config = shell(tmp_path, "touch ran")
    config.command.uris.append(CommandURI(value=str(tmp_path / "no-such-file")))
    with pytest.raises(ContainerLaunchError) as raised:
        await containerizer.launch(cid, config)
    assert raised.value.step == "FETCHING"
    assert raised.value.reason == Reason.REASON_CONTAINER_LAUNCH_FAILED
    assert "no-such-file" in raised.value.cause
    assert containerizer.containers() == []
    assert not (tmp_path / "runtime" / "containers" / "badfetch").exists()
    assert not (tmp_path / "sandbox" / "ran").exists()


class RecordingIsolator(Isolator):
    """A plug-in isolator (the interface under test is the containerizer's use of it)."""

    name = "test/recording"
    supports_nesting = True

    def __init__(self, fail_in: str | None = None) -> None:
        self.calls: list[str] = []
        self.fail_in = fail_in
        self.limit = asyncio.Event()

    async def prepare(
        self, container_id: ContainerID, config: ContainerConfig
    ) -> ContainerLaunchInfo:
        self.calls.append("prepare")
        if self.fail_in == "prepare":
            raise RuntimeError("prepare refused")
        return ContainerLaunchInfo(environment={"FROM_ISOLATOR": "yes"})

    async def isolate(self, container_id: ContainerID, pid: int) -> None:
        self.calls.append("isolate")
        if self.fail_in == "isolate":
            raise RuntimeError("isolate refused")

    async def watch(self, container_id: ContainerID) -> ContainerLimitation:
        await self.limit.wait()
        return ContainerLimitation(
            Reason.REASON_CONTAINER_LIMITATION_MEMORY, "Memory limit exceeded"
        )

    async def cleanup(self, container_id: ContainerID) -> None:
        self.calls.append("cleanup")


@pytest.mark.parametrize("step,expected", [("prepare", "PREPARING"), ("isolate", "ISOLATING")])
async def test_isolator_failure_cleans_up(
    containerizer: Containerizer, tmp_path: Any, step: str, expected: str
) -> None:
    isolator = RecordingIsolator(fail_in=step)
    containerizer._isolators.append(isolator)
    cid = ContainerID(value="isofail")
    with pytest.raises(ContainerLaunchError) as raised:
        await containerizer.launch(cid, shell(tmp_path, "touch ran"))
    assert raised.value.step == expected
    assert "refused" in raised.value.cause
    assert isolator.calls[-1] == "cleanup"
    assert containerizer.containers() == []
    assert not (tmp_path / "sandbox" / "ran").exists()


async def test_limitation_destroys_with_its_reason(
    containerizer: Containerizer, tmp_path: Any
) -> None:
    isolator = RecordingIsolator()
    containerizer._isolators.append(isolator)
    cid = ContainerID(value="limited")
    await containerizer.launch(cid, shell(tmp_path, 'echo "$FROM_ISOLATOR"; sleep 1000'))
    await until(lambda: (tmp_path / "sandbox" / "stdout").read_text() == "yes\n")
    isolator.limit.set()
    termination = await containerizer.wait(cid)
    assert termination is not None
    assert termination.reason == Reason.REASON_CONTAINER_LIMITATION_MEMORY
    assert termination.message == "Memory limit exceeded"
    assert termination.state == "TASK_FAILED"
    assert isolator.calls == ["prepare", "isolate", "cleanup"]


async def test_usage_and_status(containerizer: Containerizer, tmp_path: Any) -> None:
    cid = ContainerID(value="usage")
    await containerizer.launch(cid, shell(tmp_path, "sleep 1000"))
    usage = (await containerizer.usage(cid)).to_json()
    assert usage["mem_rss_bytes"] > 0
    assert "cpus_user_time_secs" in usage and "timestamp" in usage
    status = await containerizer.status(cid)
    assert os.getsid(status.executor_pid) == status.executor_pid


def disk_du_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("disk/du")]


@pytest.mark.usefixtures("leftovers")
async def test_close_stops_disk_measuring_and_keeps_the_container(tmp_path: Any) -> None:
    flags = make_flags(tmp_path, "--isolation=disk/du", "--container_disk_watch_interval=10ms")
    c = await Containerizer.create(flags)
    cid = ContainerID(value="measured")
    await c.launch(cid, shell(tmp_path, "sleep 1000"))
    pid = (await c.status(cid)).executor_pid
    for _ in range(1000):  # until du has measured once: the collector is under way
        if "disk_used_bytes" in (await c.usage(cid)).to_json():
            break
        await asyncio.sleep(0.01)
    assert len(disk_du_tasks()) == 1

    await c.close()

    assert disk_du_tasks() == []
    assert session_processes(pid) != []  # close is not destroy: the container lives on


@pytest.mark.usefixtures("leftovers")
async def test_recover_reattaches_and_reads_status_of_ended(tmp_path: Any) -> None:
    flags = make_flags(tmp_path)
    first = await Containerizer.create(flags)
    ended = ContainerID(value="ended")
    live = ContainerID(value="live")
    orphan = ContainerID(value="orphan")
    nested = ContainerID(value="nested", parent=live)
    await first.launch(
        ended, shell(tmp_path, "while [ ! -e go ]; do sleep 0.02; done; exit 7", "a")
    )
    await first.launch(live, shell(tmp_path, "sleep 1000", "b"))
    await first.launch(nested, shell(tmp_path, "sleep 1000", "b/containers/nested"))
    await first.launch(orphan, shell(tmp_path, "sleep 1000", "c"))
    orphan_pid = (await first.status(orphan)).executor_pid
    await first.close()
    del first

    (tmp_path / "a" / "go").touch()
    await until(lambda: (tmp_path / "runtime/containers/ended/status").exists())

    second = await Containerizer.create(flags)
    try:
        await second.recover({ended, live})
        # Recovery finds it ended and destroys it; the agent's wait may come after that.
        await until(lambda: ended not in second.containers())
        termination = await second.wait(ended)
        assert termination is not None and termination.status is not None
        assert os.WEXITSTATUS(termination.status) == 7
        assert session_processes(orphan_pid) == []
        assert not (tmp_path / "runtime/containers/orphan").exists()
        assert set(second.containers()) == {live, nested}
        assert await second.kill(live, signal.SIGTERM)
        # Destroying the parent takes the recovered nested container down first.
        live_termination = await second.wait(live)
        assert live_termination is not None and live_termination.status is not None
        assert os.WTERMSIG(live_termination.status) == signal.SIGTERM
        assert second.containers() == []
    finally:
        for cid in second.containers():
            await second.destroy(cid)
        await second.close()


async def test_destroy_during_fetch_aborts_the_launch(
    containerizer: Containerizer, tmp_path: Any, unused_port: int
) -> None:
    requested = asyncio.Event()

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requested.set()
        await reader.read()  # never answers
        writer.close()

    server = await asyncio.start_server(hang, "127.0.0.1", unused_port)
    try:
        cid = ContainerID(value="slowfetch")
        config = shell(tmp_path, "touch ran")
        config.command.uris.append(CommandURI(value=f"http://127.0.0.1:{unused_port}/big"))
        launch = asyncio.create_task(containerizer.launch(cid, config))
        await asyncio.wait_for(requested.wait(), 30)
        assert containerizer.state(cid) == ContainerState.FETCHING
        pid = (await containerizer.status(cid)).executor_pid
        termination = await containerizer.destroy(cid)
        assert termination is not None
        assert termination.reason == Reason.REASON_CONTAINER_LAUNCH_FAILED
        with pytest.raises(ContainerLaunchError, match="destroyed during launch"):
            await launch
        assert session_processes(pid) == []
        assert not (tmp_path / "sandbox" / "ran").exists()
        assert containerizer.containers() == []
    finally:
        server.close()
        await server.wait_closed()


class HeldIsolator(Isolator):
    """Holds every launch in `prepare` until released."""

    name = "test/held"

    def __init__(self) -> None:
        self.preparing = asyncio.Event()
        self.release = asyncio.Event()
        self.cleaned: list[ContainerID] = []

    async def prepare(self, container_id: ContainerID, config: ContainerConfig) -> None:
        self.preparing.set()
        await self.release.wait()

    async def cleanup(self, container_id: ContainerID) -> None:
        self.cleaned.append(container_id)


async def held_launch(
    tmp_path: Any, value: str, script: str
) -> tuple[Containerizer, HeldIsolator, ContainerID, asyncio.Task[LaunchResult]]:
    """A fresh containerizer with one launch held in `prepare`."""
    c = await Containerizer.create(make_flags(tmp_path))
    held = HeldIsolator()
    c._isolators.append(held)
    cid = ContainerID(value=value)
    launch = asyncio.create_task(c.launch(cid, shell(tmp_path, script)))
    await held.preparing.wait()
    return c, held, cid, launch


@pytest.mark.usefixtures("leftovers")
async def test_close_lets_a_launch_in_flight_finish_and_leaves_the_container_running(
    tmp_path: Any,
) -> None:
    c, held, _cid, launch = await held_launch(tmp_path, "inflight", "sleep 1000")
    closing = asyncio.create_task(c.close())
    await asyncio.sleep(0)
    with pytest.raises(ContainerLaunchError, match="closing"):
        await c.launch(ContainerID(value="late"), shell(tmp_path, "true", name="late"))
    held.release.set()
    assert await launch == LaunchResult.SUCCESS
    await closing
    pid = int((tmp_path / "runtime" / "containers" / "inflight" / "pid").read_text())
    assert session_processes(pid) != []  # a restarted agent recovers it
    assert held.cleaned == []
    # A destroy still works after close (owned until the next close).
    assert await c.destroy(ContainerID(value="inflight")) is not None
    assert session_processes(pid) == [] and held.cleaned == [ContainerID(value="inflight")]
    await c.close()


async def test_close_cancels_a_launch_past_its_grace_and_rolls_it_back(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(containerizer_module, "CLOSE_GRACE", 0.01)
    c, held, cid, launch = await held_launch(tmp_path, "stuck", "touch ran")
    await c.close()
    with pytest.raises(ContainerLaunchError, match="destroyed during launch"):
        await launch
    assert held.cleaned == [cid]
    assert c.containers() == []
    assert not (tmp_path / "sandbox" / "ran").exists()


@pytest.mark.usefixtures("leftovers")
async def test_recover_keeps_ended_nested_terminations(tmp_path: Any) -> None:
    flags = make_flags(tmp_path)
    first = await Containerizer.create(flags)
    parent = ContainerID(value="parent")
    child = ContainerID(value="child", parent=parent)
    await first.launch(parent, shell(tmp_path, "sleep 1000"))
    await first.launch(child, shell(tmp_path, "exit 5", "sandbox/containers/child"))
    await first.wait(child)
    await first.close()

    second = await Containerizer.create(flags)
    try:
        await second.recover({parent})
        assert second.containers() == [parent]
        termination = await second.wait(child)
        assert termination is not None and termination.status is not None
        assert os.WEXITSTATUS(termination.status) == 5
    finally:
        await second.destroy(parent)
        await second.close()


@pytest.mark.root
async def test_runs_as_the_configured_user(containerizer: Containerizer, tmp_path: Any) -> None:
    cid = ContainerID(value="user")
    config = shell(tmp_path, "id -u > whoami; touch mine")
    config.user = "nobody"
    tmp_path.chmod(0o755)  # let nobody reach the sandbox
    await containerizer.launch(cid, config)
    termination = await containerizer.wait(cid)
    assert termination is not None and termination.status == 0
    sandbox = tmp_path / "sandbox"
    nobody = pwd.getpwnam("nobody").pw_uid
    assert (sandbox / "whoami").read_text() == f"{nobody}\n"
    assert sandbox.stat().st_uid == nobody
    assert (sandbox / "stdout").stat().st_uid == nobody


@pytest.mark.usefixtures("leftovers")
async def test_standalone_container_keeps_its_termination_until_removed(tmp_path: Any) -> None:
    flags = make_flags(tmp_path)
    first = await Containerizer.create(flags)
    cid = ContainerID(value="standalone")
    config = shell(tmp_path, "exit 6")
    config.executor_info = None  # launched through the agent API, not for an executor
    await first.launch(cid, config)
    termination = await first.wait(cid)
    assert termination is not None and termination.status is not None
    assert os.WEXITSTATUS(termination.status) == 6
    assert await first.wait(cid) == termination
    await first.close()

    # Not among the agent's executors, yet not an orphan: still there after recovery.
    second = await Containerizer.create(flags)
    await second.recover(set())
    assert await second.wait(cid) == termination
    await second.remove(cid)
    assert await second.wait(cid) is None
    assert not (tmp_path / "runtime" / "containers" / "standalone").exists()
    await second.close()
