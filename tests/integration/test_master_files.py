"""The master's files, as Mesos's master serves them: with `--log_dir` its log is
`<log_dir>/mesos-master.INFO`, attached as `/master/log` for `/files/*` and the
LIST_FILES and READ_FILE operator calls (JSON and protobuf)."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.master_harness import base_url, running_master
from tests.integration.test_protobuf_api import PROTOBUF, pb, unpb

from mesilla.master.main import MasterServer
from mesilla.v1 import master as m

pytestmark = [pytest.mark.integration]

MARKER = "a line the test logs into the master's log"


@pytest.fixture
async def logged(tmp_path: Path) -> AsyncIterator[tuple[MasterServer, aiohttp.ClientSession, Path]]:
    log_dir = tmp_path / "logs"
    async with running_master(tmp_path / "m", "--registry=in_memory", f"--log_dir={log_dir}") as server:
        # Whatever the root logger's level under pytest, a warning reaches every handler.
        logging.getLogger("mesilla.test").warning(MARKER)
        async with aiohttp.ClientSession() as session:
            yield server, session, log_dir / "mesos-master.INFO"


async def _get(session: aiohttp.ClientSession, server: MasterServer, endpoint: str, **params: str) -> Any:
    async with session.get(base_url(server) + endpoint, params=params) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def _status(session: aiohttp.ClientSession, server: MasterServer, endpoint: str, **params: str) -> int:
    async with session.get(base_url(server) + endpoint, params=params) as r:
        return r.status


async def test_log_dir_writes_the_log_and_serves_it_as_master_log(
    logged: tuple[MasterServer, aiohttp.ClientSession, Path],
) -> None:
    server, session, log = logged
    assert MARKER in log.read_text()

    assert await _get(session, server, "/files/debug") == {"/master/log": str(log)}
    assert await _get(session, server, "/files/debug.json") == {"/master/log": str(log)}
    state = await _get(session, server, "/state")
    assert state["log_dir"] == str(log.parent) and state["flags"]["log_dir"] == str(log.parent)
    # A file lists nothing, as Mesos's browse of a file.
    assert await _get(session, server, "/files/browse", path="/master/log") == []
    read = await _get(session, server, "/files/read", path="/master/log", offset="0")
    assert read["offset"] == 0 and MARKER in read["data"]
    end = await _get(session, server, "/files/read", path="/master/log", offset="-1")
    assert end["data"] == "" and end["offset"] >= len(MARKER)
    async with session.get(base_url(server) + "/files/download", params={"path": "/master/log"}) as r:
        assert r.status == 200
        assert r.headers["Content-Disposition"] == 'attachment; filename="mesos-master.INFO"'
        assert MARKER in (await r.read()).decode()
    # The master answers under its libprocess id too.
    assert await _get(session, server, "/master/files/debug") == {"/master/log": str(log)}


@pytest.mark.parametrize(
    "endpoint, params, status",
    [
        ("/files/read", {"path": "/master/log/below", "offset": "0"}, 404),  # nothing below a file
        ("/files/read", {"path": "/nothing", "offset": "0"}, 404),
        ("/files/browse", {"path": "/master"}, 404),
        ("/files/download", {"path": "/master/logs"}, 404),
        ("/files/read", {"offset": "0"}, 400),
        ("/files/browse", {"path": ""}, 400),
        ("/files/read", {"path": "/master/log", "offset": "x"}, 400),
        ("/files/read", {"path": "/master/log", "offset": "-2"}, 400),
        ("/files/read", {"path": "/master/log", "length": "-2"}, 400),
        ("/files/read", {"path": "/master/log/../log", "offset": "0"}, 403),
    ],
)
async def test_bad_paths_and_parameters_are_answered_as_mesos(
    logged: tuple[MasterServer, aiohttp.ClientSession, Path],
    endpoint: str,
    params: dict[str, str],
    status: int,
) -> None:
    server, session, _log = logged
    assert await _status(session, server, endpoint, **params) == status


async def _v1(session: aiohttp.ClientSession, server: MasterServer, call: dict[str, Any]) -> tuple[int, Any]:
    async with session.post(base_url(server) + "/api/v1", json=call) as r:
        return r.status, await r.json() if r.status == 200 else await r.text()


async def test_list_files_and_read_file_in_json(
    logged: tuple[MasterServer, aiohttp.ClientSession, Path],
) -> None:
    server, session, log = logged
    call: dict[str, Any] = {"type": "LIST_FILES", "list_files": {"path": "/master/log"}}
    status, listing = await _v1(session, server, call)
    # Empty repeated fields are left out, as Mesos writes JSON.
    assert status == 200 and listing == {"type": "LIST_FILES", "list_files": {}}

    call = {"type": "READ_FILE", "read_file": {"path": "/master/log", "offset": 0}}
    status, read = await _v1(session, server, call)
    assert status == 200 and read["type"] == "READ_FILE"
    assert MARKER in base64.b64decode(read["read_file"]["data"]).decode()
    assert read["read_file"]["size"] >= len(MARKER)

    call = {"type": "READ_FILE", "read_file": {"path": "/master/log", "offset": 0, "length": 3}}
    status, read = await _v1(session, server, call)
    assert base64.b64decode(read["read_file"]["data"]) == log.read_bytes()[:3]

    for call, expected, reason in [
        ({"type": "LIST_FILES", "list_files": {"path": "/nothing"}}, 404, "/nothing"),
        ({"type": "READ_FILE", "read_file": {"path": "/master/log/x", "offset": 0}}, 404, "/master/log/x"),
        ({"type": "LIST_FILES"}, 400, "list_files"),
        ({"type": "READ_FILE"}, 400, "read_file"),
        ({"type": "READ_FILE", "read_file": {"path": "/master/log", "offset": -1}}, 400, "offset"),
    ]:
        status, text = await _v1(session, server, call)
        assert (status, reason in text) == (expected, True), (call, status, text)


async def test_list_files_and_read_file_in_protobuf(
    logged: tuple[MasterServer, aiohttp.ClientSession, Path],
) -> None:
    server, session, _log = logged
    headers = {"Content-Type": PROTOBUF, "Accept": PROTOBUF}
    for call in (
        {"type": "READ_FILE", "read_file": {"path": "/master/log", "offset": 0}},
        {"type": "LIST_FILES", "list_files": {"path": "/master/log"}},
    ):
        async with session.post(base_url(server) + "/api/v1", data=pb(m.Call, call), headers=headers) as r:
            assert r.status == 200, await r.text()
            assert r.content_type == PROTOBUF
            answer = unpb(m.Response, await r.read())
        assert answer["type"] == call["type"]
        if call["type"] == "READ_FILE":
            assert MARKER in base64.b64decode(answer["read_file"]["data"]).decode()


async def test_without_log_dir_nothing_is_attached(tmp_path: Path) -> None:
    async with (
        running_master(tmp_path / "m", "--registry=in_memory") as server,
        aiohttp.ClientSession() as session,
    ):
        assert await _get(session, server, "/files/debug") == {}
        assert await _status(session, server, "/files/read", path="/master/log", offset="0") == 404
        assert "log_dir" not in await _get(session, server, "/state")
        status, _ = await _v1(session, server, {"type": "LIST_FILES", "list_files": {"path": "/master/log"}})
        assert status == 404


async def test_an_unusable_log_dir_stops_the_master_at_start(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(Exception, match="log_dir"):
        async with running_master(tmp_path / "m", "--registry=in_memory", f"--log_dir={tmp_path}/file/logs"):
            pass
