"""The linux launcher against real runc, conmon and cgroups (root only)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from tests.fixtures.linux_launcher import LinuxEnv

from mesilla.common import procfs
from mesilla.containerizer.launcher import monitor
from mesilla.containerizer.launcher.base import LaunchError
from mesilla.containerizer.launcher.linux import LinuxLauncher
from mesilla.containerizer.launcher.runtime import NoOciRuntime
from mesilla.containerizer.types import ContainerRuntimeState, ForkRequest
from mesilla.v1.mesos import ContainerID, ContainerInfo, LinuxInfo

pytestmark = pytest.mark.root


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    process = procfs.stat(pid)
    return process is not None and process.state != "Z"


async def _await_file(path: str) -> None:
    """Waits for a container to signal a point in its script by creating `path`."""
    for _ in range(3000):
        if os.path.exists(path):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def _ns(pid: int, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


async def test_exit_code_is_the_raw_wait_status(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="exits")
    await linux_env.run(launcher, cid, "echo out; echo err >&2; exit 7")
    status = await launcher.wait(cid)
    assert status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7
    sandbox = linux_env.sandbox("exits")
    with open(os.path.join(sandbox, "stdout")) as out, open(os.path.join(sandbox, "stderr")) as err:
        assert (out.read(), err.read()) == ("out\n", "err\n")
    await launcher.destroy(cid)


async def test_killed_by_a_signal(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="killed")
    await linux_env.run(launcher, cid, "sleep 1000")
    await launcher.kill(cid, signal.SIGKILL)
    status = await launcher.wait(cid)
    assert status is not None and os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGKILL
    await launcher.destroy(cid)


async def fork_held(launcher: LinuxLauncher, linux_env: LinuxEnv, name: str) -> tuple[ContainerID, str, int]:
    """A container forked and held before exec, whose command would create `marker`."""
    cid = ContainerID(value=name)
    config = linux_env.config(name)
    marker = os.path.join(config.sandbox, "ran")
    pid = await launcher.fork(ForkRequest(
        cid, ["/bin/sh", "-c", f"touch {marker}"], config, linux_env.launch_info(config)
    ))
    return cid, marker, pid


async def test_first_process_is_held_before_exec_until_start(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    cid, marker, pid = await fork_held(launcher, linux_env, "held")
    # Still the runtime's init waiting to exec, not the command.
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert f.read().split(b"\0")[:2] == [b"/usr/sbin/runc", b"init"]
    state = await launcher.runtime.state("held")
    assert state is not None and state["status"] == "created"
    assert not os.path.exists(marker)
    await launcher.start(cid)
    assert await launcher.wait(cid) == 0
    assert os.path.exists(marker)
    await launcher.destroy(cid)


async def test_a_started_container_runs_its_command_and_the_runtime_says_so(
    linux_env: LinuxEnv,
) -> None:
    # start takes runc's exec FIFO itself: runc must see what its own start leaves.
    launcher = linux_env.launcher()
    cid = ContainerID(value="started")
    pid = await linux_env.run(launcher, cid, "exec sleep 1000")
    state = await launcher.runtime.state("started")
    assert state is not None and state["status"] == "running"
    # Returned once the init has exec'd, as `runc start` does.
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert f.read().split(b"\0")[0] != b"/usr/sbin/runc"
    await launcher.destroy(cid)
    assert linux_env.runtime_ids() == []


async def test_starting_a_container_whose_init_was_killed_fails(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    cid, marker, pid = await fork_held(launcher, linux_env, "gone")
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(LaunchError, match="already dead"):
        await launcher.start(cid)
    await launcher.destroy(cid)
    assert not os.path.exists(marker)
    assert linux_env.runtime_ids() == [] and linux_env.monitors() == []


def _descendants(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = [int(p) for p in f.read().split()]
    return [p for child in children for p in (child, *_descendants(child))]


async def test_destroy_leaves_no_process_mount_bundle_or_runtime_container(
    linux_env: LinuxEnv,
) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="doomed")
    ready = os.path.join(linux_env.sandbox("doomed"), "ready")
    pid = await linux_env.run(launcher, cid, f"sleep 1000 & sleep 1000 & touch {ready}; wait")
    await _await_file(ready)
    directory = launcher.directory(cid)
    children = _descendants(pid)
    assert len(children) >= 3  # the shell (under the init) and its two sleeps
    assert linux_env.monitors() and linux_env.runtime_ids() == ["doomed"]

    await launcher.destroy(cid)

    status = await launcher.wait(cid)
    assert status is not None and os.WTERMSIG(status) == signal.SIGKILL
    assert not any(_alive(p) for p in [pid, *children])
    assert linux_env.monitors() == []
    assert linux_env.runtime_ids() == []
    assert not os.path.exists(os.path.join(directory, "bundle"))
    assert not os.path.exists(os.path.join(directory, "monitor"))
    assert linux_env.mounts_under_root() == []
    leaf = [d for d in linux_env.cgroups() if d.endswith("/doomed")]
    assert leaf == []


def _runc_cgroups(linux_env: LinuxEnv, rid: str) -> list[str]:
    """The cgroup directories runc made for a container, in every hierarchy (its state)."""
    with open(os.path.join(linux_env.runtime_root, rid, "state.json")) as f:
        paths: dict[str, str] = json.load(f)["cgroup_paths"]
    assert all(os.path.isdir(path) for path in paths.values())
    return list(paths.values())


async def test_destroy_leaves_no_cgroup_in_any_hierarchy_nor_runtime_state(linux_env: LinuxEnv) -> None:
    # The parent goes without runc once its init is dead (its own pid namespace); the
    # child shares that namespace, so runc deletes it: a process it left runs on.
    launcher = linux_env.launcher()
    parent, child = ContainerID(value="p"), ContainerID(value="c", parent=ContainerID(value="p"))
    await linux_env.run(launcher, parent, "sleep 1000")
    ready = os.path.join(linux_env.sandbox("c"), "ready")
    shared = linux_env.config(
        "c", container_info=ContainerInfo(linux_info=LinuxInfo(share_pid_namespace=True))
    )
    child_pid = await linux_env.run(launcher, child, f"sleep 1000 & touch {ready}; wait", shared)
    await _await_file(ready)
    left_behind = _descendants(child_pid)
    cgroups = {rid: _runc_cgroups(linux_env, rid) for rid in ("p", "p.c")}
    os.kill(child_pid, signal.SIGKILL)
    await launcher.wait(child)

    await launcher.destroy(child)
    assert not any(_alive(pid) for pid in left_behind)
    await launcher.destroy(parent)

    assert [path for paths in cgroups.values() for path in paths if os.path.exists(path)] == []
    assert linux_env.runtime_ids() == [] and os.listdir(linux_env.runtime_root) == []
    tops = [d for d in linux_env.cgroups() if os.path.basename(d) == linux_env.flags.cgroups_root]
    assert linux_env.cgroups() == tops and linux_env.monitors() == []  # the root is not theirs


async def test_container_without_image_sees_the_host_and_its_sandbox(
    linux_env: LinuxEnv,
) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="hostview")
    fd, marker = tempfile.mkstemp(prefix="mesilla-hostview-", dir="/tmp")
    os.write(fd, b"from the host")
    os.close(fd)
    script = (
        f'cd "$MESOS_SANDBOX" && echo $$ > pid && cat /proc/1/comm > init && cat {marker} > tmp_marker && '
        "readlink /proc/self/ns/pid > pidns && "
        "(touch /usr/mesilla-test 2>/dev/null && echo writable || echo readonly) > usr && "
        "(touch /mesilla-test 2>/dev/null && echo writable || echo readonly) > top && "
        "/usr/bin/env true"
    )
    try:
        await linux_env.run(launcher, cid, script)
        assert await launcher.wait(cid) == 0
    finally:
        os.unlink(marker)
    sandbox = linux_env.sandbox("hostview")

    def read(name: str) -> str:
        with open(os.path.join(sandbox, name)) as f:
            return f.read().strip()

    # Its own pid namespace, whose pid 1 is the init that forwards signals.
    assert int(read("pid")) > 1
    assert read("init") == ".mesilla-init"
    assert read("pidns") != _ns(os.getpid(), "pid")
    assert read("tmp_marker") == "from the host"  # /tmp is the host's, as in Mesos
    assert read("usr") == "readonly"  # the host is shared read-only
    assert not os.path.exists("/usr/mesilla-test")
    # Its top level is the host view every container without an image shares.
    assert read("top") == "readonly"
    await launcher.destroy(cid)


async def test_nested_container_joins_parent_network_uts_ipc(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    parent = ContainerID(value="parent")
    child = ContainerID(value="child", parent=parent)
    parent_config = linux_env.config("parent")
    parent_pid = await linux_env.run(
        launcher, parent, "sleep 1000", parent_config,
        linux_env.launch_info(parent_config, clone_namespaces={"network", "uts", "ipc"}),
    )  # fmt: skip
    child_pid = await linux_env.run(launcher, child, "sleep 1000")

    for kind in ("net", "uts", "ipc"):
        assert _ns(child_pid, kind) == _ns(parent_pid, kind) != _ns(os.getpid(), kind)
    for kind in ("mnt", "pid"):
        assert _ns(child_pid, kind) != _ns(parent_pid, kind)
    # The child's cgroup is a child of its parent's.
    with open(f"/proc/{child_pid}/cgroup") as f:
        memory = next(line for line in f if ":memory:" in line)
    assert memory.strip().endswith(f"/{linux_env.flags.cgroups_root}/parent/child")

    await launcher.destroy(child)
    assert _alive(parent_pid) and not _alive(child_pid)
    await launcher.destroy(parent)
    assert linux_env.runtime_ids() == []


async def test_monitor_survives_the_launcher_and_recovery_reads_the_exit(
    linux_env: LinuxEnv,
) -> None:
    first = linux_env.launcher()
    ended = ContainerID(value="ended")
    alive = ContainerID(value="alive")
    orphan = ContainerID(value="orphan")
    gate = os.path.join(linux_env.sandbox("ended"), "go")
    await linux_env.run(first, ended, f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 3")
    alive_pid = await linux_env.run(first, alive, "sleep 1000")
    await linux_env.run(first, orphan, "sleep 1000")
    ended_monitor = monitor.read_pid(os.path.join(first.directory(ended), "monitor"), "pid")
    assert ended_monitor is not None
    del first  # the agent goes away; its monitors stay

    open(gate, "w").close()
    await monitor.wait_exit(ended_monitor)  # the container ended while no launcher watched

    second = linux_env.launcher()
    states = [
        ContainerRuntimeState(ended, None, linux_env.sandbox("ended")),
        ContainerRuntimeState(alive, alive_pid, linux_env.sandbox("alive")),
    ]
    orphans = await second.recover(states)
    assert orphans == {orphan}
    status = await second.wait(ended)
    assert status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3
    assert second.pid(alive) == alive_pid
    await second.kill(alive, signal.SIGKILL)
    status = await second.wait(alive)
    assert status is not None and os.WTERMSIG(status) == signal.SIGKILL
    for cid in (ended, alive, orphan):
        await second.destroy(cid)
    assert linux_env.runtime_ids() == [] and linux_env.monitors() == []


async def test_monitor_memory_per_container(linux_env: LinuxEnv) -> None:
    """Supervision cost: conmon's RSS and PSS per container (the target is <= 3 MB)."""
    launcher = linux_env.launcher()
    ids = [ContainerID(value=f"rss{i}") for i in range(5)]
    for cid in ids:
        await linux_env.run(launcher, cid, "sleep 1000")
    rss = pss = 0
    for pid in linux_env.monitors():
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = {line.split(":")[0]: int(line.split()[1]) for line in f if "kB" in line}
        rss, pss = max(rss, fields["Rss"]), max(pss, fields["Pss"])
    print(f"conmon per container: RSS {rss} kB, PSS {pss} kB")
    assert len(linux_env.monitors()) == len(ids)
    assert rss <= 3 * 1024
    for cid in ids:
        await launcher.destroy(cid)


async def test_unknown_container(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    assert await launcher.wait(ContainerID(value="nope")) is None
    assert launcher.pid(ContainerID(value="nope")) is None
    await launcher.destroy(ContainerID(value="nope"))  # nothing to do, no error


def test_available_here() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if shutil.which("runc") is None or shutil.which("conmon") is None:
        pytest.skip("needs runc and conmon (scripts/setup.sh installs them)")
    # runc runs containers on v1, hybrid and v2 hosts alike: the probe must succeed.
    assert LinuxLauncher.available() is True


def test_a_runtime_that_cannot_run_a_container_is_refused_with_its_reason(
    linux_env: LinuxEnv, tmp_path: Path
) -> None:
    broken = tmp_path / "broken-oci"
    broken.write_text("#!/bin/sh\necho 'no containers today' >&2\nexit 1\n")
    broken.chmod(0o755)
    linux_env.flags.set("oci_runtime", str(broken))
    with pytest.raises(NoOciRuntime, match=r"no containers today.*--oci_runtime="):
        LinuxLauncher(linux_env.flags)
    assert LinuxLauncher.available(linux_env.flags) is False


def test_a_restarted_agent_does_not_probe_again_what_it_probed_on_this_boot(tmp_path: Path) -> None:
    """The probe's success is recorded in the runtime directory: the next process (an
    agent restarted after kill -9) trusts it, until the binary changes."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    calls = tmp_path / "calls"
    runtime = tmp_path / "fake-oci"
    runtime.write_text(f'#!/bin/sh\necho "$3" >> {calls}\n')
    runtime.chmod(0o755)
    record_dir = tmp_path / "run"

    def start() -> list[str]:
        code = "import sys; from mesilla.containerizer.launcher.runtime import find_runtime; "
        code += "print(find_runtime(sys.argv[1], sys.argv[2]))"
        found = subprocess.run([sys.executable, "-c", code, str(runtime), str(record_dir)],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        assert found == str(runtime)
        return calls.read_text().split()

    assert start() == ["run", "delete"]
    assert start() == ["run", "delete"]  # recorded: no second container
    runtime.write_text(runtime.read_text() + "# upgraded\n")
    assert start() == ["run", "delete", "run", "delete"]


async def test_destroying_a_held_container_never_runs_it(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="never")
    config = linux_env.config("never")
    marker = os.path.join(config.sandbox, "ran")
    pid = await launcher.fork(ForkRequest(
        cid, ["/bin/sh", "-c", f"touch {marker}"], config, linux_env.launch_info(config)
    ))
    await launcher.destroy(cid)
    status = await launcher.wait(cid)
    assert status is not None and os.WTERMSIG(status) == signal.SIGKILL
    assert not _alive(pid) and not os.path.exists(marker)
    assert linux_env.runtime_ids() == [] and linux_env.monitors() == []


async def test_a_cancelled_fork_leaves_nothing(linux_env: LinuxEnv) -> None:
    launcher = linux_env.launcher()
    cid = ContainerID(value="cancelled")
    config = linux_env.config("cancelled")
    fork = asyncio.ensure_future(
        launcher.fork(ForkRequest(cid, ["/bin/sleep", "1000"], config, linux_env.launch_info(config)))
    )
    # Cancel once conmon is on its way (its pid file is the first thing it writes).
    await _await_file(os.path.join(launcher.directory(cid), "monitor", "pid"))
    fork.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fork
    assert linux_env.runtime_ids() == [] and linux_env.monitors() == []
    assert not os.path.exists(os.path.join(launcher.directory(cid), "bundle"))
