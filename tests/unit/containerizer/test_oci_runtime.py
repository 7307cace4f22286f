"""What the linux launcher reads of the OCI runtime's state directory without running it,
and how it runs the runtime's commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mesilla.common import procfs
from mesilla.containerizer.launcher.runtime import OciRuntime, communicate


def test_ids_are_the_runtimes_container_directories(tmp_path: Path) -> None:
    root = tmp_path / "runc"
    for rid in ("exec-1", "exec-1.task-a"):
        (root / rid).mkdir(parents=True)
        (root / rid / "state.json").write_text("{}")
    (root / "a-file").write_text("")  # not a container
    (root / "a-link").symlink_to(root / "exec-1")  # neither
    runtime = OciRuntime("/usr/bin/runc", str(root))
    assert sorted(runtime.ids()) == ["exec-1", "exec-1.task-a"]
    assert all(runtime.knows(rid) for rid in runtime.ids())


def test_no_state_directory_is_no_container(tmp_path: Path) -> None:
    assert OciRuntime("/usr/bin/runc", str(tmp_path / "absent")).ids() == []


async def test_a_command_that_fills_its_pipes_is_read_to_its_end() -> None:
    # More than a pipe holds on each stream: read while it runs, or it would never end.
    script = "import sys; sys.stdout.write('o' * 200000); sys.stderr.write('e' * 200000); sys.exit(3)"
    code, out, err = await communicate([sys.executable, "-c", script])
    assert (code, out, err) == (3, b"o" * 200000, b"e" * 200000)


def _start_time(pid: int) -> int:
    found = procfs.start_time(pid)
    assert found is not None
    return found


def _ended_process() -> tuple[int, int]:
    """(pid, start time) of a process that has ended and been reaped."""
    child = subprocess.Popen(["sleep", "60"])
    start_time = _start_time(child.pid)
    child.kill()
    child.wait()
    return child.pid, start_time


def _runc_container(root: Path, cgroups: Path, rid: str, **changes: Any) -> dict[str, str]:
    """A runc state directory for `rid` as runc writes it, with `changes` to its state
    (`pid_path`, `hooks`, `init` as (pid, start time), `cgroup_paths`); its cgroups
    (plain directories under `cgroups`, one with a child) made."""
    pid, start_time = changes.get("init") or _ended_process()
    paths = changes.get("cgroup_paths") or {
        name: str(cgroups / name / "mesilla" / rid) for name in ("memory", "cpu", "cpuacct", "")
    }
    for path in paths.values():
        os.makedirs(path, exist_ok=True)
    os.makedirs(os.path.join(paths["memory"], "child"), exist_ok=True)
    namespaces = [{"type": "NEWNS", "path": ""}, {"type": "NEWPID", "path": changes.get("pid_path", "")}]
    state = {
        "id": rid, "init_process_pid": pid, "init_process_start": start_time, "rootless": False,
        "cgroup_paths": paths, "intel_rdt_path": "",
        "config": {
            "namespaces": namespaces,
            "cgroups": {"path": f"/mesilla/{rid}", "Systemd": False, "Rootless": False},
            "Hooks": changes.get("hooks", {"createRuntime": None, "poststart": None, "poststop": None}),
        },
    }  # fmt: skip
    (root / rid).mkdir(parents=True)
    (root / rid / "state.json").write_text(json.dumps(state))
    return paths


def _recording_runtime(tmp_path: Path, name: str = "runc") -> tuple[OciRuntime, Path]:
    """A runtime binary that only records its arguments, one line a call."""
    calls = tmp_path / "calls"
    binary = tmp_path / "bin" / name
    binary.parent.mkdir()
    binary.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    binary.chmod(0o755)
    return OciRuntime(str(binary), str(tmp_path / "state")), calls


@pytest.mark.parametrize("init", ["ended", "its pid reused"])
async def test_a_stopped_runc_container_goes_as_runc_deletes_it_without_runc(
    tmp_path: Path, init: str
) -> None:
    # Its init ended and was the init of its own pid namespace: nothing of it runs on.
    runtime, calls = _recording_runtime(tmp_path)
    cgroups = tmp_path / "cgroup"
    reused = (os.getpid(), _start_time(os.getpid()) - 1)  # this pid, an earlier process's start
    paths = _runc_container(Path(runtime.root), cgroups, "exec-1", init=reused if init != "ended" else None)
    (Path(runtime.root) / "exec-1" / "exec.fifo").write_text("")  # created, never started

    await runtime.delete("exec-1", str(cgroups))

    assert not calls.exists()
    assert not any(os.path.exists(path) for path in paths.values())
    assert not runtime.knows("exec-1") and os.path.isdir(runtime.root)
    assert os.path.isdir(cgroups / "memory" / "mesilla")  # the parent is not the container's


@pytest.mark.parametrize(
    "case",
    [
        "shares a pid namespace",
        "init still runs",
        "a hook",
        "unknown state file",
        "cgroup outside the root",
        "crun",
    ],
)
async def test_runc_deletes_a_container_unless_its_removal_is_all_there_is_to_do(
    tmp_path: Path, case: str
) -> None:
    runtime, calls = _recording_runtime(tmp_path, "crun" if case == "crun" else "runc")
    cgroups = tmp_path / "cgroup"
    changes: dict[str, Any] = {
        "shares a pid namespace": {"pid_path": "/proc/1/ns/pid"},
        "init still runs": {"init": (os.getpid(), _start_time(os.getpid()))},
        "a hook": {"hooks": {"poststop": [{"path": "/bin/true"}]}},
        "cgroup outside the root": {"cgroup_paths": {"memory": str(tmp_path / "elsewhere" / "exec-1")}},
    }.get(case, {})
    paths = _runc_container(Path(runtime.root), cgroups, "exec-1", **changes)
    if case == "unknown state file":
        (Path(runtime.root) / "exec-1" / "checkpoint").mkdir()

    await runtime.delete("exec-1", str(cgroups))

    assert calls.read_text().split("\n")[0].split() == ["--root", runtime.root, "delete", "--force", "exec-1"]
    assert all(os.path.isdir(path) for path in paths.values())  # left to the runtime


async def test_without_a_cgroups_root_runc_deletes_even_a_stopped_container(tmp_path: Path) -> None:
    runtime, calls = _recording_runtime(tmp_path)
    _runc_container(Path(runtime.root), tmp_path / "cgroup", "exec-1")
    await runtime.delete("exec-1")
    assert calls.read_text().split()[-3:] == ["delete", "--force", "exec-1"]
