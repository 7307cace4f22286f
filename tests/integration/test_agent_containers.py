"""The container calls of the agent API, against real containers."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from tests.conftest import free_port
from tests.integration.agent_fake_master import AgentProcess, FakeMaster

from mesilla.common.recordio import Decoder
from mesilla.v1.internal import AgentEvent, AgentEventType, RunTask
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    ContainerID,
    ContainerInfo,
    FrameworkID,
    FrameworkInfo,
    LinuxInfo,
    TaskID,
    TaskInfo,
)

pytestmark = [pytest.mark.integration]

FRAMEWORK = FrameworkInfo(user="root", name="c", id=FrameworkID(value="fw-c"), checkpoint=True)


@pytest.fixture
async def parent(tmp_path: Any) -> AsyncIterator[tuple[AgentProcess, dict[str, Any]]]:
    """A running agent and the container id (JSON) of a running executor."""
    async for running in _running_parent(tmp_path):
        yield running


@pytest.fixture(params=["posix", "linux"])
async def any_parent(
    request: pytest.FixtureRequest, tmp_path: Any
) -> AsyncIterator[tuple[AgentProcess, dict[str, Any]]]:
    """The same under each launcher (under linux, sessions are DEBUG containers on runc)."""
    if request.param == "linux" and os.geteuid() != 0:
        pytest.skip("the linux launcher needs root")
    async for running in _running_parent(tmp_path, f"--launcher={request.param}"):
        yield running


async def _running_parent(
    tmp_path: Any, *extra: str, container: ContainerInfo | None = None
) -> AsyncIterator[tuple[AgentProcess, dict[str, Any]]]:
    master = FakeMaster()
    await master.start()
    proc = AgentProcess(master, str(tmp_path / "work"), str(tmp_path / "run"), *extra)
    try:
        agent = await proc.start()
        await master.wait_for(lambda: master.registers)
        task = TaskInfo(
            name="p",
            task_id=TaskID(value="t-parent"),
            agent_id=AgentID(value=master.agent_id or ""),
            command=CommandInfo(value="sleep 1000"),
            container=container,
        )
        await master.send(
            AgentEvent(
                type=AgentEventType.RUN_TASK, run_task=RunTask(framework_info=FRAMEWORK, task=task)
            )
        )
        await master.wait_update("t-parent", "TASK_RUNNING")
        executor = agent.frameworks["fw-c"].executors["t-parent"]
        yield proc, {"value": executor.container_id.value}
    finally:
        await proc.stop()
        await master.stop()


async def _call(
    s: aiohttp.ClientSession, proc: AgentProcess, body: dict[str, Any]
) -> tuple[int, Any]:
    async with s.post(proc.url + "/api/v1", json=body) as r:
        text = await r.text()
        return r.status, (await r.json() if r.content_type == "application/json" else text)


async def test_nested_container_lifecycle(parent: tuple[AgentProcess, dict[str, Any]]) -> None:
    proc, parent_id = parent
    child = {"value": "child-1", "parent": parent_id}
    async with aiohttp.ClientSession() as s:
        launch = {
            "type": "LAUNCH_CONTAINER",
            "launch_container": {
                "container_id": child,
                "command": {"value": "echo nested-out; exit 7"},
            },
        }
        status, _ = await _call(s, proc, launch)
        assert status == 200
        status, body = await _call(
            s, proc, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": child}}
        )
        assert status == 200
        assert os.WEXITSTATUS(body["wait_container"]["exit_status"]) == 7
        # The sandbox nests under the parent's, as Mesos lays it out.
        sandbox = os.path.join(
            proc.agent.containerizer.config(
                proc.agent.frameworks["fw-c"].executors["t-parent"].container_id
            ).sandbox,  # type: ignore[union-attr]
            "containers",
            "child-1",
        )
        with open(os.path.join(sandbox, "stdout")) as f:
            assert "nested-out" in f.read()
        status, _ = await _call(
            s, proc, {"type": "REMOVE_CONTAINER", "remove_container": {"container_id": child}}
        )
        assert status == 200
        assert not os.path.exists(sandbox)


async def test_kill_and_codes(parent: tuple[AgentProcess, dict[str, Any]]) -> None:
    proc, parent_id = parent
    child = {"value": "sleeper", "parent": parent_id}
    async with aiohttp.ClientSession() as s:
        launch = {
            "type": "LAUNCH_NESTED_CONTAINER",
            "launch_nested_container": {"container_id": child, "command": {"value": "sleep 1000"}},
        }
        assert (await _call(s, proc, launch))[0] == 200
        assert (await _call(s, proc, launch))[0] == 202  # the id is in use
        remove = {
            "type": "REMOVE_NESTED_CONTAINER",
            "remove_nested_container": {"container_id": child},
        }
        assert (await _call(s, proc, remove))[0] == 500  # still running
        kill = {
            "type": "KILL_CONTAINER",
            "kill_container": {"container_id": child, "signal": signal.SIGTERM},
        }
        assert (await _call(s, proc, kill))[0] == 200
        status, body = await _call(
            s,
            proc,
            {"type": "WAIT_NESTED_CONTAINER", "wait_nested_container": {"container_id": child}},
        )
        assert os.WTERMSIG(body["wait_nested_container"]["exit_status"]) == signal.SIGTERM
        containers = (
            await _call(
                s, proc, {"type": "GET_CONTAINERS", "get_containers": {"show_nested": True}}
            )
        )[1]
        assert parent_id in [c["container_id"] for c in containers["get_containers"]["containers"]]

        unknown = {"value": "ghost", "parent": parent_id}
        assert (
            await _call(
                s, proc, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": unknown}}
            )
        )[0] == 404
        assert (
            await _call(
                s, proc, {"type": "KILL_CONTAINER", "kill_container": {"container_id": unknown}}
            )
        )[0] == 404
        for bad in (
            {
                "type": "LAUNCH_CONTAINER",
                "launch_container": {
                    "container_id": {"value": "a.b", "parent": parent_id},
                    "command": {"value": "true"},
                },
            },
            {
                "type": "LAUNCH_CONTAINER",
                "launch_container": {
                    "container_id": {"value": "x", "parent": {"value": "no-parent"}},
                    "command": {"value": "true"},
                },
            },
            {
                "type": "LAUNCH_NESTED_CONTAINER",
                "launch_nested_container": {
                    "container_id": {"value": "top"},
                    "command": {"value": "true"},
                },
            },
            {
                "type": "LAUNCH_CONTAINER",
                "launch_container": {
                    "container_id": {"value": "top"},
                    "command": {"value": "true"},
                },
            },
            {"type": "KILL_CONTAINER", "kill_container": {"container_id": child, "signal": 999}},
            *(
                {"type": f"{verb}_NESTED_CONTAINER", part: {"container_id": {"value": "top"}}}
                for verb, part in (
                    ("WAIT", "wait_nested_container"),
                    ("KILL", "kill_nested_container"),
                    ("REMOVE", "remove_nested_container"),
                )
            ),
        ):
            status, text = await _call(s, proc, bad)
            assert status == 400, (bad, text)


async def test_standalone_container(parent: tuple[AgentProcess, dict[str, Any]]) -> None:
    proc, _ = parent
    container = {"value": "standalone-1"}
    async with aiohttp.ClientSession() as s:
        launch = {
            "type": "LAUNCH_CONTAINER",
            "launch_container": {
                "container_id": container,
                "command": {"value": "sleep 1; exit 3"},
                "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}}],
            },
        }
        assert (await _call(s, proc, launch))[0] == 200
        sandbox = os.path.join(proc.agent.flags.work_dir, "containers", "standalone-1")  # type: ignore[union-attr]
        assert os.path.isdir(sandbox)
        status, body = await _call(
            s, proc, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": container}}
        )
        assert status == 200
        assert os.WEXITSTATUS(body["wait_container"]["exit_status"]) == 3
        assert (
            await _call(
                s,
                proc,
                {"type": "REMOVE_CONTAINER", "remove_container": {"container_id": container}},
            )
        )[0] == 200
        assert not os.path.exists(sandbox)


def _process_io(body: bytes, decoder: Decoder | None = None) -> list[tuple[str, bytes]]:
    out = []
    for record in (decoder or Decoder()).feed(body):
        message = json.loads(record)
        if message["type"] == "DATA":
            out.append((message["data"]["type"], base64.b64decode(message["data"]["data"])))
    return out


STREAMING = {"Accept": "application/recordio", "Message-Accept": "application/json"}


def _session(container_id: dict[str, Any], shell: str, **launch: Any) -> dict[str, Any]:
    """A LAUNCH_NESTED_CONTAINER_SESSION call running the `shell` command."""
    return {
        "type": "LAUNCH_NESTED_CONTAINER_SESSION",
        "launch_nested_container_session": {
            "container_id": container_id,
            "command": {"value": shell},
            **launch,
        },
    }


async def test_session_streams_output_and_keeps_the_exit_status(
    parent: tuple[AgentProcess, dict[str, Any]],
) -> None:
    proc, parent_id = parent
    child = {"value": "session-1", "parent": parent_id}
    call = _session(child, "sleep 0.3; echo to-out; echo to-err >&2; exit 4")
    async with aiohttp.ClientSession() as s:
        async with s.post(
            proc.url + "/api/v1", json=call, headers={"Accept": "application/json"}
        ) as r:
            assert r.status == 406  # a session streams RecordIO
        attached: list[tuple[str, bytes]] = []

        async def attach() -> None:
            body = {
                "type": "ATTACH_CONTAINER_OUTPUT",
                "attach_container_output": {"container_id": child},
            }
            async with s.post(proc.url + "/api/v1", json=body, headers=STREAMING) as r:
                assert r.status == 200
                attached.extend(_process_io(await r.read()))

        async with s.post(proc.url + "/api/v1", json=call, headers=STREAMING) as r:
            assert r.status == 200
            assert r.headers["Content-Type"] == "application/recordio"
            assert r.headers["Message-Content-Type"] == "application/json"
            attacher = asyncio.create_task(attach())
            records = _process_io(await r.read())
        await attacher
        assert (
            b"".join(d for k, d in records if k == "STDOUT"),
            b"".join(d for k, d in records if k == "STDERR"),
        ) == (b"to-out\n", b"to-err\n")
        assert ("STDOUT", b"to-out\n") in attached
        status, body = await _call(
            s, proc, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": child}}
        )
        assert status == 200 and os.WEXITSTATUS(body["wait_container"]["exit_status"]) == 4
        assert (
            await _call(
                s, proc, {"type": "REMOVE_CONTAINER", "remove_container": {"container_id": child}}
            )
        )[0] == 200


async def test_session_container_dies_with_its_connection(
    parent: tuple[AgentProcess, dict[str, Any]],
) -> None:
    proc, parent_id = parent
    child = {"value": "session-2", "parent": parent_id}
    call = _session(child, "sleep 1000")
    async with aiohttp.ClientSession() as s:
        async with s.post(proc.url + "/api/v1", json=call, headers=STREAMING) as r:
            assert r.status == 200
        # The response was closed unread: the agent destroys the container.
        status, body = await _call(
            s, proc, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": child}}
        )
        assert status == 200
        assert os.WIFSIGNALED(body["wait_container"]["exit_status"])


def _input_record(part: dict[str, Any]) -> bytes:
    body = json.dumps({"type": "ATTACH_CONTAINER_INPUT", "attach_container_input": part}).encode()
    return b"%d\n%s" % (len(body), body)


async def _output_until(
    session: aiohttp.ClientResponse, decoder: Decoder, marker: bytes
) -> bytes:
    """The session's output (of every stream) read until it holds `marker`."""
    output = b""
    while marker not in output:
        chunk = await session.content.readany()
        assert chunk, f"the session ended before {marker!r}: {output!r}"
        output += b"".join(d for _, d in _process_io(chunk, decoder))
    return output


async def _second_attacher(
    s: aiohttp.ClientSession,
    url: str,
    child: dict[str, Any],
    attach: Callable[[], Awaitable[int]],
    release: asyncio.Event,
) -> tuple[asyncio.Task[int], int]:
    """Attaches input with `attach` (held open until `release`), then a second attacher
    until it is refused while the first holds on; returns the first and that status."""
    first = asyncio.create_task(attach())
    try:
        second = _input_record({"type": "CONTAINER_ID", "container_id": child})
        for _ in range(100):
            async with s.post(url, data=second, headers=INPUT) as r:
                if r.status == 409 and not first.done():
                    break
            if first.done():  # the second came first: the first was refused
                assert first.result() == 409
                first = asyncio.create_task(attach())
            await asyncio.sleep(0.05)
        return first, r.status
    finally:
        release.set()


def _stdin(data: bytes) -> bytes:
    return _input_record(
        {
            "type": "PROCESS_IO",
            "process_io": {
                "type": "DATA",
                "data": {"type": "STDIN", "data": base64.b64encode(data).decode()},
            },
        }
    )


INPUT = {"Content-Type": "application/recordio", "Message-Content-Type": "application/json"}


@pytest.mark.root
async def test_debug_session_keeps_no_more_capabilities_than_its_task(tmp_path: Any) -> None:
    """An exec session into a task that dropped capabilities holds only the task's,
    less what the session itself did not ask for; a non-root session holds none."""
    dropped = ContainerInfo(
        type="MESOS",
        linux_info=LinuxInfo(effective_capabilities={"capabilities": ["CHOWN", "NET_RAW"]}),
    )
    running = _running_parent(
        tmp_path,
        "--launcher=linux",
        "--isolation=linux/capabilities",
        container=dropped,
    )
    proc, parent_id = await anext(running)
    try:
        show = "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status"
        sessions = {
            "as-task": {},
            "asks-less": {
                "container": {
                    "type": "MESOS",
                    "linux_info": {"effective_capabilities": {"capabilities": ["CHOWN"]}},
                }
            },
            "non-root": {"command": {"value": show, "user": "nobody"}},
        }
        seen = {}
        async with aiohttp.ClientSession() as s:
            for name, extra in sessions.items():
                call = _session({"value": name, "parent": parent_id}, show, **extra)
                async with s.post(proc.url + "/api/v1", json=call, headers=STREAMING) as r:
                    assert r.status == 200, await r.text()
                    out = b"".join(d for k, d in _process_io(await r.read()) if k == "STDOUT")
                seen[name] = dict(line.split(":\t") for line in out.decode().splitlines())
    finally:
        await running.aclose()
    chown_net_raw, chown = f"{1 << 0 | 1 << 13:016x}", f"{1 << 0:016x}"
    assert seen["as-task"] == {
        "CapInh": chown_net_raw, "CapPrm": chown_net_raw, "CapEff": chown_net_raw,
        "CapBnd": chown_net_raw, "CapAmb": f"{0:016x}",
    }  # fmt: skip
    assert seen["asks-less"]["CapEff"] == chown and seen["asks-less"]["CapBnd"] == chown
    assert seen["non-root"]["CapEff"] == f"{0:016x}"
    assert seen["non-root"]["CapBnd"] == chown_net_raw


async def test_tty_session_is_resized_and_typed_into(
    any_parent: tuple[AgentProcess, dict[str, Any]],
) -> None:
    """CONTROL(TTY_INFO) resizes the session's terminal; STDIN is typed into it."""
    proc, parent_id = any_parent
    child = {"value": "session-resize", "parent": parent_id}
    tty = {"type": "MESOS", "tty_info": {"window_size": {"rows": 10, "columns": 20}}}
    call = _session(child, "stty size; read line; echo got $line; stty size", container=tty)
    resize = _input_record(
        {
            "type": "PROCESS_IO",
            "process_io": {
                "type": "CONTROL",
                "control": {
                    "type": "TTY_INFO",
                    "tty_info": {"window_size": {"rows": 40, "columns": 120}},
                },
            },
        }
    )
    async with aiohttp.ClientSession() as s:
        url = proc.url + "/api/v1"
        async with s.post(url, json=call, headers=STREAMING) as session:
            assert session.status == 200
            decoder = Decoder()
            output = await _output_until(session, decoder, b"10 20")
            attach = b"".join(
                [_input_record({"type": "CONTAINER_ID", "container_id": child}), resize]
            )
            async with s.post(url, data=attach + _stdin(b"hello\n"), headers=INPUT) as r:
                assert r.status == 200
            output += b"".join(d for _, d in _process_io(await session.read(), decoder))
    lines = output.decode().split("\r\n")
    # The terminal echoes what is typed, as a terminal does.
    assert lines[:4] == ["10 20", "hello", "got hello", "40 120"], lines


async def test_tty_session_interrupt(any_parent: tuple[AgentProcess, dict[str, Any]]) -> None:
    """^C typed on the session's terminal interrupts its foreground process, so the
    terminal is the controlling one of the session's command."""
    proc, parent_id = any_parent
    child = {"value": "session-ctrl-c", "parent": parent_id}
    tty = {"type": "MESOS", "tty_info": {}}
    call = _session(child, "echo ready; exec sleep 100", container=tty)
    async with aiohttp.ClientSession() as s:
        url = proc.url + "/api/v1"
        async with s.post(url, json=call, headers=STREAMING) as session:
            assert session.status == 200
            await _output_until(session, Decoder(), b"ready")
            # `sleep` may not have replaced the shell yet; ^C until the session ends.
            async def interrupts() -> AsyncIterator[bytes]:
                yield _input_record({"type": "CONTAINER_ID", "container_id": child})
                for _ in range(50):
                    yield _stdin(b"\x03")
                    await asyncio.sleep(0.2)

            async with s.post(url, data=interrupts(), headers=INPUT):
                await session.read()
        status, result = await _call(
            s, proc, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": child}}
        )
        assert status == 200
        exit_status = result["wait_container"]["exit_status"]
        assert os.WIFSIGNALED(exit_status) and os.WTERMSIG(exit_status) == signal.SIGINT


async def test_session_reads_stdin_from_attach_container_input(
    any_parent: tuple[AgentProcess, dict[str, Any]],
) -> None:
    proc, parent_id = any_parent
    child = {"value": "session-in", "parent": parent_id}
    call = _session(child, "cat; echo done >&2; exit 3")
    release = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield _input_record({"type": "CONTAINER_ID", "container_id": child})
        yield _stdin(b"hello\n")
        await release.wait()  # held open: a second attacher meanwhile is refused
        yield _stdin(b"world\n")
        yield _stdin(b"")  # end-of-file

    async with aiohttp.ClientSession() as s:
        async with s.post(proc.url + "/api/v1", json=call, headers=STREAMING) as session:
            assert session.status == 200
            url = proc.url + "/api/v1"

            async def attach() -> int:
                async with s.post(url, data=body(), headers=INPUT) as r:
                    return r.status

            first, status = await _second_attacher(s, url, child, attach, release)
            assert status == 409
            assert await first == 200
            records = _process_io(await session.read())
        assert b"".join(d for k, d in records if k == "STDOUT") == b"hello\nworld\n"
        assert b"".join(d for k, d in records if k == "STDERR") == b"done\n"
        status, result = await _call(
            s, proc, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": child}}
        )
        assert status == 200 and os.WEXITSTATUS(result["wait_container"]["exit_status"]) == 3


async def test_attach_container_input_codes(parent: tuple[AgentProcess, dict[str, Any]]) -> None:
    proc, parent_id = parent
    url = proc.url + "/api/v1"
    async with aiohttp.ClientSession() as s:
        unknown = _input_record({"type": "CONTAINER_ID", "container_id": {"value": "nope"}})
        async with s.post(url, data=unknown, headers=INPUT) as r:
            assert r.status == 404
        # The executor's container has no switchboard to attach to.
        executor = _input_record({"type": "CONTAINER_ID", "container_id": parent_id})
        async with s.post(url, data=executor, headers=INPUT) as r:
            assert r.status == 400
        async with s.post(url, data=_stdin(b"x"), headers=INPUT) as r:
            assert r.status == 400  # the first record must name the container
        as_json = {
            "type": "ATTACH_CONTAINER_INPUT",
            "attach_container_input": {"type": "CONTAINER_ID", "container_id": parent_id},
        }
        async with s.post(url, json=as_json) as r:
            assert r.status == 415
        streamed_get = json.dumps({"type": "GET_HEALTH"}).encode()
        async with s.post(
            url, data=b"%d\n%s" % (len(streamed_get), streamed_get), headers=INPUT
        ) as r:
            assert r.status == 415


async def test_tty_session(any_parent: tuple[AgentProcess, dict[str, Any]]) -> None:
    proc, parent_id = any_parent
    child = {"value": "session-tty", "parent": parent_id}
    call = _session(
        child,
        "test -t 0 && test -t 1 && echo tty; stty size; echo to-err >&2; tty",
        container={"type": "MESOS", "tty_info": {"window_size": {"rows": 31, "columns": 97}}},
    )
    async with aiohttp.ClientSession() as s:
        async with s.post(proc.url + "/api/v1", json=call, headers=STREAMING) as r:
            assert r.status == 200
            records = _process_io(await r.read())
        assert {k for k, _ in records} == {"STDOUT"}  # a terminal merges stderr
        lines = b"".join(d for _, d in records).decode().split("\r\n")
        assert lines[0:3] == ["tty", "31 97", "to-err"]
        # The terminal is one of the filesystem the session runs in: `tty` names it.
        assert lines[3].startswith("/dev/pts/"), lines
        status, result = await _call(
            s, proc, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": child}}
        )
        assert status == 200 and result["wait_container"]["exit_status"] == 0


def _resize(rows: int, columns: int) -> bytes:
    return _input_record(
        {
            "type": "PROCESS_IO",
            "process_io": {
                "type": "CONTROL",
                "control": {
                    "type": "TTY_INFO",
                    "tty_info": {"window_size": {"rows": rows, "columns": columns}},
                },
            },
        }
    )


async def _until_in_file(path: str, wanted: bytes) -> bytes:
    for _ in range(200):
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
            data = f.read()
            if wanted in data:
                return data
        await asyncio.sleep(0.05)
    raise AssertionError(f"{wanted!r} never reached {path}")


async def _switchboards_gone(proc: AgentProcess) -> None:
    """Every I/O switchboard server of the agent has exited and left no directory."""
    assert proc.agent is not None
    root = os.path.join(proc.agent.flags.runtime_dir, "io_switchboards")
    for _ in range(300):
        if not os.path.exists(root) or not os.listdir(root):
            break
        await asyncio.sleep(0.05)
    assert not os.path.exists(root) or not os.listdir(root)
    for pid in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            assert not any(root.encode() in arg for arg in argv), argv


async def _attach_output(s: aiohttp.ClientSession, url: str, container_id: Any) -> Any:
    body = {
        "type": "ATTACH_CONTAINER_OUTPUT",
        "attach_container_output": {"container_id": container_id},
    }
    r = await s.post(url, json=body, headers=STREAMING)
    assert r.status == 200, await r.text()
    assert r.headers["Content-Type"] == "application/recordio"
    return r


async def test_tty_container_logs_is_attached_typed_into_and_resized(
    any_parent: tuple[AgentProcess, dict[str, Any]],
) -> None:
    """A nested container with tty_info (not a session) gets a switchboard server: its
    terminal's output goes to its sandbox's stdout and to ATTACH_CONTAINER_OUTPUT, and
    ATTACH_CONTAINER_INPUT types into it and resizes it, one attacher at a time."""
    proc, parent_id = any_parent
    assert proc.agent is not None
    child = {"value": "tty-nested", "parent": parent_id}
    launch = {
        "type": "LAUNCH_NESTED_CONTAINER",
        "launch_nested_container": {
            "container_id": child,
            "command": {"value": "stty size; read line; echo got $line; stty size"},
            "container": {
                "type": "MESOS",
                "tty_info": {"window_size": {"rows": 10, "columns": 20}},
            },
        },
    }
    url = proc.url + "/api/v1"
    parent_config = proc.agent.containerizer.config(ContainerID(value=parent_id["value"]))
    assert parent_config is not None
    stdout = os.path.join(parent_config.sandbox, "containers", "tty-nested", "stdout")
    release = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield _input_record({"type": "CONTAINER_ID", "container_id": child})
        yield _resize(40, 120)
        await release.wait()  # held open: a second attacher meanwhile is refused
        yield _stdin(b"hello\n")

    async with aiohttp.ClientSession() as s:
        status, _ = await _call(s, proc, launch)
        assert status == 200
        status, _ = await _call(s, proc, launch)
        assert status == 202  # the id is in use, its switchboard too
        # Output is streamed from the moment of attaching: wait for the first line.
        await _until_in_file(stdout, b"10 20")
        output = await _attach_output(s, url, child)

        async def attach() -> int:
            async with s.post(url, data=body(), headers=INPUT) as r:
                return r.status

        first, status = await _second_attacher(s, url, child, attach, release)
        assert status == 409
        assert await first == 200
        records = _process_io(await output.read())
        output.release()
        assert {k for k, _ in records} == {"STDOUT"}
        attached = b"".join(d for _, d in records).decode()
        assert attached.split("\r\n")[-4:] == ["hello", "got hello", "40 120", ""], attached
        status, result = await _call(
            s, proc, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": child}}
        )
        assert status == 200 and result["wait_container"]["exit_status"] == 0
        logged = (await _until_in_file(stdout, b"40 120")).decode()
        assert logged.split("\r\n") == ["10 20", "hello", "got hello", "40 120", ""], logged
        # Once ended, nothing is left to attach to (as for an ended session).
        await _switchboards_gone(proc)
        status, _ = await _call(
            s,
            proc,
            {"type": "ATTACH_CONTAINER_OUTPUT", "attach_container_output": {"container_id": child}},
        )
        assert status == 404
        remove = {"type": "REMOVE_CONTAINER", "remove_container": {"container_id": child}}
        assert (await _call(s, proc, remove))[0] == 200


@pytest.mark.parametrize("launcher", ["posix", "linux"])
async def test_tty_container_survives_an_agent_restart(tmp_path: Any, launcher: str) -> None:
    """The switchboard server outlives its agent: the next one attaches to it again."""
    if launcher == "linux" and os.geteuid() != 0:
        pytest.skip("the linux launcher needs root")
    master = FakeMaster()
    await master.start()
    port = free_port()
    first, second = (
        AgentProcess(
            master,
            str(tmp_path / "work"),
            str(tmp_path / "run"),
            f"--launcher={launcher}",
            f"--port={port}",
        )
        for _ in range(2)
    )
    container = {"value": "tty-standalone"}
    launch = {
        "type": "LAUNCH_CONTAINER",
        "launch_container": {
            "container_id": container,
            "command": {"value": "echo before; read line; echo got $line"},
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}}],
            "container": {"type": "MESOS", "tty_info": {}},
        },
    }
    stdout = str(tmp_path / "work" / "containers" / "tty-standalone" / "stdout")
    try:
        await first.start()
        async with aiohttp.ClientSession() as s:
            assert (await _call(s, first, launch))[0] == 200
            await _until_in_file(stdout, b"before")
        await first.stop(destroy=False)
        master.drop_stream()

        await second.start()
        url = second.url + "/api/v1"
        async with aiohttp.ClientSession() as s:
            output = await _attach_output(s, url, container)
            typed = _input_record({"type": "CONTAINER_ID", "container_id": container})
            async with s.post(url, data=typed + _stdin(b"hello\n"), headers=INPUT) as r:
                assert r.status == 200
            attached = b"".join(d for _, d in _process_io(await output.read()))
            output.release()
            assert b"got hello\r\n" in attached, attached
            status, result = await _call(
                s, second, {"type": "WAIT_CONTAINER", "wait_container": {"container_id": container}}
            )
            assert status == 200 and result["wait_container"]["exit_status"] == 0
            assert (await _until_in_file(stdout, b"got hello")).split(b"\r\n") == [
                b"before", b"hello", b"got hello", b""
            ]  # fmt: skip
            await _switchboards_gone(second)
            remove = {"type": "REMOVE_CONTAINER", "remove_container": {"container_id": container}}
            assert (await _call(s, second, remove))[0] == 200
    finally:
        await second.stop()
        await first.stop()
        await master.stop()
