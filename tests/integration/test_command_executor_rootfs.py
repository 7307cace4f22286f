"""A command task with an image rootfs: the executor stays on the host, the task
runs pivoted into the rootfs with its sandbox at --sandbox_directory (as Mesos),
in pid and mount namespaces of its own, so nothing leads it back to the host."""

from __future__ import annotations

import asyncio
import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.unit.executor.fake_agent import FakeAgent, kill_event, launch_event

from mesilla.common.flags import parse
from mesilla.containerizer.containerizer import Containerizer
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.launcher import load_launcher
from mesilla.containerizer.launcher.oci import (
    DEFAULT_CAPABILITIES,
    capability_mask,
    capability_names,
)
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import (
    AgentID,
    CommandInfo,
    ContainerID,
    ContainerInfo,
    TaskID,
    TaskInfo,
    Volume,
    VolumeSource,
)

pytestmark = [pytest.mark.integration, pytest.mark.root]

BUSYBOX = "/bin/busybox"


@pytest.fixture
def rootfs(tmp_path: Any) -> str:
    if not os.path.exists(BUSYBOX):
        pytest.skip("needs busybox-static")
    root = tmp_path / "rootfs"
    (root / "bin").mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    applets = subprocess.run([BUSYBOX, "--list"], check=True, capture_output=True, text=True)
    for applet in applets.stdout.split():
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")  # relative: valid inside the chroot
    (root / "image-marker").write_text("from the image\n")
    return str(root)


@pytest.fixture
async def agent(unused_port: int) -> AsyncIterator[FakeAgent]:
    fake = FakeAgent(unused_port)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


async def _containerizer(tmp_path: Any, launcher: str, isolation: str | None) -> Containerizer:
    argv = [f"--runtime_dir={tmp_path}/runtime", f"--launcher={launcher}"]
    if isolation is not None:
        argv.append(f"--isolation={isolation}")
    flags = parse(CONTAINERIZER_FLAGS, argv, environ={})
    if launcher == "linux":
        try:
            available = load_launcher("linux").available(flags)  # type: ignore[attr-defined]
        except ImportError:
            available = False
        if not available:
            pytest.skip("the linux launcher is not available here (needs conmon, runc)")
    return await Containerizer.create(flags)


async def _run_task(
    agent: FakeAgent, rootfs: str, tmp_path: Any, launcher: str, script: str,
    isolation: str | None = None, environment: dict[str, str] | None = None,
    kill_when_running: bool = False, volumes: list[Volume] | None = None,
    **task_fields: Any,
) -> tuple[dict[str, Any], str]:  # fmt: skip
    """Runs `script` as a command task in `rootfs` (killed once running, with time to
    end on SIGTERM, if `kill_when_running`): its terminal update and its stdout."""
    containerizer = await _containerizer(tmp_path, launcher, isolation)
    sandbox = str(tmp_path / "sandbox")
    task = TaskInfo(name="t", task_id=TaskID(value="t1"), agent_id=AgentID(value="a"))
    config = ContainerConfig(
        command=CommandInfo(
            shell=False,
            value=sys.executable,
            arguments=[sys.executable, "-m", "mesilla.executor.command"],
        ),
        sandbox=sandbox,
        environment={**os.environ, **agent.environ(MESOS_DIRECTORY=sandbox)},
        task_info=task,
        rootfs=rootfs,  # what the provisioner sets for an image
        container_info=ContainerInfo(type="MESOS", volumes=volumes or []),
    )
    cid = ContainerID(value="executor")
    try:
        await containerizer.launch(cid, config)
        await asyncio.wait_for(agent.subscribed.wait(), 30)
        variables = [{"name": k, "value": v} for k, v in (environment or {}).items()]
        command = {"value": script, "environment": {"variables": variables}}
        agent.send(launch_event("t1", command, **task_fields))
        statuses = [await agent.next_update()]
        while statuses[-1]["state"] in ("TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"):
            if kill_when_running and statuses[-1]["state"] == "TASK_RUNNING":
                agent.send(kill_event("t1", grace_secs=60))
            statuses.append(await agent.next_update())
        termination = await containerizer.wait(cid)
        assert termination is not None and termination.status == 0
    finally:
        for container_id in containerizer.containers():
            await containerizer.destroy(container_id)
        await containerizer.close()
    with open("/proc/self/mountinfo") as mounts:
        assert rootfs not in mounts.read()  # the task's mounts died with it
    return statuses[-1], open(os.path.join(sandbox, "stdout")).read()


@pytest.mark.parametrize("launcher", ["posix", "linux"])
async def test_task_runs_in_the_rootfs_and_executor_on_the_host(
    agent: FakeAgent, rootfs: str, tmp_path: Any, launcher: str
) -> None:
    script = 'cat /image-marker; echo "$PWD $MESOS_SANDBOX"; ls /proc/self/ >/dev/null && echo proc'
    status, output = await _run_task(agent, rootfs, tmp_path, launcher, script)
    assert status["state"] == "TASK_FINISHED", status.get("message")
    assert "from the image\n/mnt/mesos/sandbox /mnt/mesos/sandbox\nproc\n" in output


@pytest.mark.parametrize("launcher", ["posix", "linux"])
async def test_a_killed_task_ends_by_the_signal_its_init_passed_on(
    agent: FakeAgent, rootfs: str, tmp_path: Any, launcher: str
) -> None:
    """The executor's SIGTERM, even sent while the task is being set up, reaches the
    command through the task's init; its end reads as Mesos's."""
    status, _ = await _run_task(agent, rootfs, tmp_path, launcher, "sleep 1000", kill_when_running=True)
    assert (status["state"], status["message"]) == (
        "TASK_KILLED", "Command terminated with signal Terminated",
    )  # fmt: skip


@pytest.mark.parametrize("launcher", ["posix", "linux"])
async def test_the_task_exit_code_is_the_executors_report(
    agent: FakeAgent, rootfs: str, tmp_path: Any, launcher: str
) -> None:
    status, _ = await _run_task(agent, rootfs, tmp_path, launcher, "exit 7")
    assert (status["state"], status["message"]) == ("TASK_FAILED", "Command exited with status 7")


@pytest.mark.parametrize("launcher", ["posix", "linux"])
async def test_a_command_check_runs_in_the_image(
    agent: FakeAgent, rootfs: str, tmp_path: Any, launcher: str
) -> None:
    """Only the check, which sees the image and the sandbox, lets the task end."""
    check = {
        "type": "COMMAND", "delay_seconds": 0, "interval_seconds": 0.2, "timeout_seconds": 10,
        "command": {"command": {"value": "cat /image-marker > $MESOS_SANDBOX/checked"}},
    }  # fmt: skip
    script = "until [ -s checked ]; do sleep 0.1; done; cat checked"
    status, output = await _run_task(agent, rootfs, tmp_path, launcher, script, check=check)
    assert status["state"] == "TASK_FINISHED", (status.get("message"), output)
    assert "from the image" in output


async def test_the_task_sees_its_volumes_in_its_rootfs(
    agent: FakeAgent, rootfs: str, tmp_path: Any
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "file").write_text("from the host volume\n")

    def host_path(container_path: str) -> Volume:
        source = VolumeSource(type="HOST_PATH", host_path={"path": str(shared)})
        return Volume(container_path=container_path, mode="RO", source=source)

    status, output = await _run_task(
        agent, rootfs, tmp_path, "linux", "cat /data/file vol/file", "filesystem/linux",
        volumes=[host_path("/data"), host_path("vol")],
    )  # fmt: skip
    assert status["state"] == "TASK_FINISHED", (status.get("message"), output)
    assert output.count("from the host volume") == 2


# Every route from a process's /proc entry to a filesystem: its root, its working
# directory (climbing from it with ..), its descriptors; what each process is;
# and the host's disks among the devices.
ESCAPE_PROBE = r"""
climb=../../../../../../../../../../../../../../../../../../../..
for p in /proc/[0-9]*; do
  n=${p#/proc/}
  echo "cmdline $n $(tr '\0' ' ' < $p/cmdline)"
  for link in root cwd; do
    for way in "$p/$link" "$p/$link/$climb"; do
      [ -e "$way$MARKER" ] && echo "ESCAPE $way$MARKER"
      [ -e "$way$HOST_ONLY" ] && echo "ESCAPE $way$HOST_ONLY"
    done
    echo "$link $n $(ls -A $p/$link/ | tr '\n' ' ')"
  done
  for fd in $p/fd/*; do echo "fd $n ${fd##*/} $(readlink $fd)"; done
done
for dev in /dev/* /dev/*/*; do [ -b "$dev" ] && echo "ESCAPE block device $dev"; done
grep ^CapBnd /proc/self/status
echo "self"; ls -l /proc/self/fd
"""


def _assert_no_escape(output: str, host_paths: list[str]) -> None:
    lines = output.splitlines()
    assert "self" in lines, output  # the probe ran to the end
    assert not [line for line in lines if line.startswith("ESCAPE")], output
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "root":
            assert "image-marker" in rest.split(), line  # the image's root, nothing else
        if kind == "cmdline":
            # Neither the executor nor its helper is visible: only the task's own.
            assert not any(word in rest for word in ("python", "executor", "task_rootfs")), line
        assert not any(path in line for path in host_paths), line
    assert any(line.startswith("cmdline 1 ") for line in lines), output


@pytest.mark.parametrize(
    "launcher,isolation",
    [
        ("posix", None),
        ("linux", "filesystem/linux"),
        ("linux", "filesystem/linux,namespaces/pid"),
    ],
)
async def test_task_cannot_reach_the_host_through_proc(
    agent: FakeAgent, rootfs: str, tmp_path: Any, launcher: str, isolation: str | None
) -> None:
    """Issue #9: neither /proc/<pid>/root, /proc/<pid>/cwd nor a descriptor of any
    process the task sees leads out of the image, and pid 1 is not the executor."""
    marker = tmp_path / "host-marker"  # on the host, outside the image
    marker.write_text("on the host only\n")
    host_only = str(tmp_path / "runtime")  # the agent's runtime directory
    status, output = await _run_task(
        agent, rootfs, tmp_path, launcher, ESCAPE_PROBE, isolation,
        environment={"MARKER": str(marker), "HOST_ONLY": host_only},
    )  # fmt: skip
    assert status["state"] == "TASK_FINISHED", (status.get("message"), output)
    _assert_no_escape(output, [str(tmp_path), sys.executable, os.path.dirname(sys.executable)])
    # The task's sandbox files are open through its own view of them.
    assert "/mnt/mesos/sandbox/stdout" in output
    # Root's capabilities: the OCI runtimes' default set only.
    bounding = next(line.split()[1] for line in output.splitlines() if line.startswith("CapBnd"))
    default = [c for c in DEFAULT_CAPABILITIES if c in capability_names(None)]
    assert int(bounding, 16) == capability_mask(default)


# open_by_handle_at(2) opens any file of a filesystem by its handle, through a
# descriptor of any other file of that filesystem: with CAP_DAC_READ_SEARCH, a
# task whose sandbox is a bind mount from the host's filesystem reaches its root.
OPEN_BY_HANDLE = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* MOUNT_DIR HANDLE_TYPE HANDLE_HEX PATH: prints PATH, relative to the directory
   the handle names, opened through a descriptor on MOUNT_DIR's filesystem. */
int main(int argc, char **argv) {
  if (argc != 5) return 2;
  size_t n = strlen(argv[3]) / 2;
  struct file_handle *h = malloc(sizeof(*h) + n);
  h->handle_bytes = n;
  h->handle_type = atoi(argv[2]);
  for (size_t i = 0; i < n; i++) sscanf(argv[3] + 2 * i, "%2hhx", &h->f_handle[i]);
  int mount_fd = open(argv[1], O_RDONLY | O_DIRECTORY);
  if (mount_fd < 0) { perror("open"); return 1; }
  int root = open_by_handle_at(mount_fd, h, O_RDONLY | O_DIRECTORY);
  if (root < 0) { perror("open_by_handle_at"); return 1; }
  int fd = openat(root, argv[4], O_RDONLY);
  if (fd < 0) { perror("openat"); return 1; }
  char buf[256];
  ssize_t len = read(fd, buf, sizeof buf);
  if (len > 0) { fputs("ESCAPE ", stdout); fwrite(buf, 1, len, stdout); }
  return 0;
}
"""


class _FileHandle(ctypes.Structure):
    _fields_ = [
        ("handle_bytes", ctypes.c_uint),
        ("handle_type", ctypes.c_int),
        ("f_handle", ctypes.c_ubyte * 128),
    ]


def _handle_of(path: str) -> tuple[int, str]:
    """The file handle of `path` (name_to_handle_at): its type and bytes in hex."""
    handle = _FileHandle(handle_bytes=128)
    mount_id = ctypes.c_int()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.name_to_handle_at(-100, path.encode(), ctypes.byref(handle), ctypes.byref(mount_id), 0):
        pytest.skip(f"{path}'s filesystem has no file handles: {os.strerror(ctypes.get_errno())}")
    return handle.handle_type, bytes(handle.f_handle[: handle.handle_bytes]).hex()


def _mount_root(path: str) -> str:
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


@pytest.mark.parametrize(
    "launcher,isolation",
    [("linux", "filesystem/linux"), ("linux", "filesystem/linux,namespaces/pid")],
)
async def test_task_cannot_open_host_files_by_handle(
    agent: FakeAgent, rootfs: str, tmp_path: Any, launcher: str, isolation: str
) -> None:
    """Issue #9: root in an image task keeps the capabilities Mesos gives it, yet
    cannot open the host's files by handle through its sandbox's bind mount."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("needs gcc")
    source = tmp_path / "open_by_handle.c"
    source.write_text(OPEN_BY_HANDLE)
    built = subprocess.run(
        [gcc, "-static", "-O", "-o", f"{rootfs}/bin/open_by_handle", str(source)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if built.returncode != 0:
        pytest.skip(f"cannot build a static program here: {built.stderr.strip()}")
    marker = tmp_path / "host-marker"
    marker.write_text("on the host only\n")
    root = _mount_root(str(tmp_path))
    kind, handle = _handle_of(root)
    relative = os.path.relpath(marker, root)
    script = f"open_by_handle /mnt/mesos/sandbox {kind} {handle} {relative}; echo done"
    status, output = await _run_task(agent, rootfs, tmp_path, launcher, script, isolation)
    assert status["state"] == "TASK_FINISHED", (status.get("message"), output)
    assert "done" in output
    assert "ESCAPE" not in output, output


@pytest.mark.parametrize(
    "launcher,isolation",
    [("linux", "filesystem/linux"), ("linux", "filesystem/linux,namespaces/pid")],
)
async def test_task_cannot_read_the_hosts_disk(
    agent: FakeAgent, rootfs: str, tmp_path: Any, launcher: str, isolation: str | None
) -> None:
    """Issue #9: root in an image task cannot make a device node of the disk that
    holds the host's files and read it (the executor's container's device cgroup,
    which the posix launcher does not give)."""
    device = os.stat(str(tmp_path)).st_dev
    major, minor = os.major(device), os.minor(device)
    script = (
        f"mknod /disk b {major} {minor} && head -c 4096 /disk | wc -c | sed 's/^/READ /'; "
        "echo done"
    )
    status, output = await _run_task(agent, rootfs, tmp_path, launcher, script, isolation)
    assert status["state"] == "TASK_FINISHED", (status.get("message"), output)
    assert "done" in output
    assert "READ 4096" not in output, output
