"""Pods end to end: a framework launches task groups on `mesilla local` through the scheduler API.

The whole stack is real (master, agent, containerizer, the default executor);
the test is the framework. Each test subscribes its own framework and tears it
down afterwards, so its executors and containers go away with it.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from tests.integration.master_harness import Scheduler, scalar

from mesilla.common.recordio import Decoder
from mesilla.containerizer.cgroups import Hierarchy, own_cgroup_path
from mesilla.testing.cluster import LocalCluster, free_port
from mesilla.testing.images import build_image, write_docker_save
from mesilla.v1.mesos import ContainerID

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.root]

Json = dict[str, Any]
TERMINAL = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # filesystem/linux brings volume/sandbox_path: PARENT volumes share a
    # directory of the executor's sandbox between the tasks of a pod.
    flags = ["--isolation=filesystem/linux,posix/cpu,posix/mem"]
    with LocalCluster(tmp_path_factory.mktemp("pods"), extra_flags=flags) as running:
        yield running


class Framework:
    """A scheduler that launches task groups and acknowledges every update it reads."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.updates: list[Json] = []

    async def launch_group(self, *tasks: Json, executor_resources: list[Json] | None = None) -> str:
        offer = await self.scheduler.offer()
        executor_id = "pod-" + uuid.uuid4().hex[:8]
        executor = {
            "type": "DEFAULT",
            "executor_id": {"value": executor_id},
            "framework_id": {"value": self.scheduler.framework_id},
            "resources": executor_resources or [scalar("cpus", 0.1), scalar("mem", 32), scalar("disk", 10)],
        }
        group = [{**t, "agent_id": offer["agent_id"]} for t in tasks]
        accept = {
            "offer_ids": [offer["id"]],
            "operations": [
                {
                    "type": "LAUNCH_GROUP",
                    "launch_group": {"executor": executor, "task_group": {"tasks": group}},
                }
            ],
        }
        response = await self.scheduler.call("ACCEPT", accept)
        assert response.status == 202, await response.text()
        return executor_id

    async def next_update(self) -> Json:
        status = await self.scheduler.update()
        self.updates.append(status)
        if "uuid" in status:
            ack = {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]}
            response = await self.scheduler.call("ACKNOWLEDGE", ack)
            assert response.status == 202, await response.text()
        return status

    async def until_terminal(self, *task_ids: str) -> dict[str, Json]:
        ended: dict[str, Json] = {}
        while set(task_ids) - set(ended):
            status = await self.next_update()
            if status["state"] in TERMINAL:
                ended[status["task_id"]["value"]] = status
        return ended

    async def kill(self, *tasks: Json) -> dict[str, Json]:
        """Kills the tasks and waits for their ends (so no executor is left shutting down)."""
        for task_info in tasks:
            response = await self.scheduler.call("KILL", {"task_id": task_info["task_id"]})
            assert response.status == 202, await response.text()
        return await self.until_terminal(*(t["task_id"]["value"] for t in tasks))

    def states(self, task_id: str) -> list[str]:
        return [u["state"] for u in self.updates if u["task_id"]["value"] == task_id]


@asynccontextmanager
async def framework_on(
    cluster: LocalCluster, *capabilities: str, user: str = "root"
) -> AsyncIterator[Framework]:
    """A subscribed framework, torn down (with its executors) on the way out."""
    async with aiohttp.ClientSession() as session:
        scheduler = Scheduler(session, f"http://{cluster.master}")
        await scheduler.subscribe(
            {"name": "pods", "user": user, "capabilities": [{"type": c} for c in capabilities]}
        )
        try:
            yield Framework(scheduler)
        finally:
            await scheduler.call("TEARDOWN")
            await scheduler.close()


@pytest.fixture
async def framework(cluster: LocalCluster) -> AsyncIterator[Framework]:
    async with framework_on(cluster, "TASK_RESTARTING_STATE") as subscribed:
        yield subscribed


def task(name: str, command: str, **extra: Any) -> Json:
    return {
        "name": name,
        "task_id": {"value": f"{name}-{uuid.uuid4().hex[:6]}"},
        "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
        "command": {"value": command},
        **extra,
    }


def tid(task_info: Json) -> str:
    return task_info["task_id"]["value"]


def shared_volume(path: str) -> Json:
    return {
        "type": "MESOS",
        "volumes": [
            {
                "container_path": path,
                "mode": "RW",
                "source": {"type": "SANDBOX_PATH", "sandbox_path": {"type": "PARENT", "path": path}},
            }
        ],
    }


async def test_sidecar_writes_into_a_shared_volume_that_the_main_task_reads(framework: Framework) -> None:
    sidecar = task("sidecar", "echo from-sidecar > shared/note", container=shared_volume("shared"))
    main = task(
        "main",
        "while [ ! -s shared/note ]; do sleep 0.1; done; grep -q from-sidecar shared/note",
        container=shared_volume("shared"),
    )
    await framework.launch_group(main, sidecar)
    ended = await framework.until_terminal(tid(main), tid(sidecar))
    assert ended[tid(sidecar)]["state"] == "TASK_FINISHED"
    assert ended[tid(main)]["state"] == "TASK_FINISHED", ended[tid(main)].get("message")
    for task_id in (tid(main), tid(sidecar)):
        assert framework.states(task_id)[:2] == ["TASK_STARTING", "TASK_RUNNING"]


async def test_a_pods_tasks_run_as_their_frameworks_user(cluster: LocalCluster) -> None:
    """As Mesos (--switch_user): the tasks, and what they write in their sandboxes,
    are the framework's user's; a task's own command user overrides it."""
    async with framework_on(cluster, user="nobody") as framework:
        plain = task("plain", "id -u > uid; id -g > gid")
        as_root = task("as-root", "id -u > uid")
        as_root["command"]["user"] = "root"
        await framework.launch_group(plain, as_root)
        ended = await framework.until_terminal(tid(plain), tid(as_root))
        assert all(e["state"] == "TASK_FINISHED" for e in ended.values()), ended
        sandboxes = {
            name: next(
                Path(cluster.work_dir).glob(
                    f"agent-*/slaves/*/frameworks/*/executors/*/runs/*/tasks/{tid(t)}"
                )
            )
            for name, t in (("plain", plain), ("as-root", as_root))
        }
        with open(os.path.join(sandboxes["plain"], "uid")) as f:
            assert f.read().strip() == "65534"
        with open(os.path.join(sandboxes["plain"], "gid")) as f:
            assert f.read().strip() != "0"
        assert os.stat(os.path.join(sandboxes["plain"], "uid")).st_uid == 65534
        with open(os.path.join(sandboxes["as-root"], "uid")) as f:
            assert f.read().strip() == "0"


async def test_a_pod_task_with_a_tty_writes_through_its_terminal(
    framework: Framework, cluster: LocalCluster
) -> None:
    """A task with `tty_info` runs on a terminal (an I/O switchboard server holds it),
    and what it prints lands in its sandbox's stdout."""
    tty = task(
        "tty",
        "test -t 0 && test -t 1 && echo on-a-terminal; stty size",
        container={"type": "MESOS", "tty_info": {"window_size": {"rows": 25, "columns": 81}}},
    )
    await framework.launch_group(tty)
    ended = await framework.until_terminal(tid(tty))
    assert ended[tid(tty)]["state"] == "TASK_FINISHED", ended[tid(tty)].get("message")
    sandbox = next(
        Path(cluster.work_dir).glob(f"agent-*/slaves/*/frameworks/*/executors/*/runs/*/tasks/{tid(tty)}")
    )
    output = (sandbox / "stdout").read_bytes().decode()
    assert output.split("\r\n")[:2] == ["on-a-terminal", "25 81"], output


async def test_one_task_reaches_the_server_of_another_on_localhost(framework: Framework) -> None:
    port = free_port()
    server = task("server", f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1")
    client = task(
        "client",
        f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5)\"",
        restart_policy={
            "type": "ON_FAILURE",
            "max_restarts": 20,
            "min_restart_delay": {"nanoseconds": 100_000_000},
        },
    )
    await framework.launch_group(server, client)
    ended = await framework.until_terminal(tid(client))
    assert ended[tid(client)]["state"] == "TASK_FINISHED", ended[tid(client)].get("message")
    ended = await framework.kill(server)
    assert ended[tid(server)]["state"] == "TASK_KILLED"


async def test_restart_policy_restarts_in_the_same_sandbox(framework: Framework) -> None:
    flaky = task(
        "flaky",
        "echo run >> runs; [ $(wc -l < runs) -ge 3 ] && exit 0; exit 1",
        restart_policy={
            "type": "ON_FAILURE",
            "max_restarts": 5,
            "min_restart_delay": {"nanoseconds": 50_000_000},
        },
    )
    await framework.launch_group(flaky)
    ended = await framework.until_terminal(tid(flaky))
    assert ended[tid(flaky)]["state"] == "TASK_FINISHED"
    assert framework.states(tid(flaky)) == [
        "TASK_STARTING", "TASK_RUNNING",
        "TASK_RESTARTING", "TASK_RUNNING",
        "TASK_RESTARTING", "TASK_RUNNING",
        "TASK_FINISHED",
    ]
    containers = {
        u["container_status"]["container_id"]["value"]
        for u in framework.updates
        if u["state"] == "TASK_RUNNING"
    }
    assert len(containers) == 3
    parents = {str(u["container_status"]["container_id"].get("parent")) for u in framework.updates}
    assert len(parents) == 1 and "None" not in parents


async def test_failing_task_kills_its_group_and_exhausted_restarts_too(framework: Framework) -> None:
    doomed = task(
        "doomed",
        "exit 4",
        restart_policy={
            "type": "ON_FAILURE",
            "max_restarts": 1,
            "min_restart_delay": {"nanoseconds": 50_000_000},
        },
    )
    peer = task("peer", "sleep 600")
    await framework.launch_group(doomed, peer)
    ended = await framework.until_terminal(tid(doomed), tid(peer))
    assert ended[tid(doomed)]["state"] == "TASK_FAILED"
    assert "after 1 restarts" in ended[tid(doomed)]["message"]
    assert ended[tid(peer)]["state"] == "TASK_KILLED"


def test_tasks_sandboxes_are_linked_from_the_executor_sandbox(cluster: LocalCluster) -> None:
    # Earlier tests left their executor sandboxes behind: every task link
    # points into that executor's containers/ directory.
    links = list(Path(cluster.work_dir).glob("agent-*/slaves/*/frameworks/*/executors/*/runs/*/tasks/*"))
    assert links
    for link in links:
        target = os.readlink(link)
        assert os.path.realpath(os.path.dirname(target)) == os.path.realpath(
            link.parent.parent / "containers"
        )
        assert (link / "stdout").exists()


@pytest.fixture(scope="module")
def cgroups_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    flags = ["--isolation=filesystem/linux,cgroups/cpu,cgroups/mem"]
    with LocalCluster(tmp_path_factory.mktemp("pods-cgroups"), extra_flags=flags) as running:
        yield running


async def test_task_over_its_own_memory_limit_is_oom_killed_and_its_group_with_it(
    cgroups_cluster: LocalCluster,
) -> None:
    async with framework_on(cgroups_cluster) as framework:
        # As Mesos, every task of the group must agree on share_cgroups.
        own_cgroups = {"type": "MESOS", "linux_info": {"share_cgroups": False}}
        hog = task(
            "hog",
            f"{sys.executable} -c 'x = bytearray(512 * 1024 * 1024)'",
            container=own_cgroups,
            limits={"mem": {"value": 64}},
        )
        peer = task("peer", "sleep 600", container=own_cgroups)
        await framework.launch_group(hog, peer)
        ended = await framework.until_terminal(tid(hog), tid(peer))
        assert ended[tid(hog)]["state"] == "TASK_FAILED", ended[tid(hog)]
        assert ended[tid(hog)].get("reason") == "REASON_CONTAINER_LIMITATION_MEMORY", ended[tid(hog)]
        assert ended[tid(peer)]["state"] == "TASK_KILLED"


@pytest.fixture(scope="module")
def cfs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    flags = ["--isolation=filesystem/linux,cgroups/cpu", "--cgroups_enable_cfs"]
    with LocalCluster(tmp_path_factory.mktemp("pods-cfs"), extra_flags=flags) as running:
        yield running


async def test_with_cfs_on_a_pods_executor_is_capped_once_subscribed(cfs_cluster: LocalCluster) -> None:
    """The executor starts uncapped (its Python start-up is not throttled to the pod's
    0.2 cpus); by the time its tasks run, the container has the quota of executor + tasks."""
    async with framework_on(cfs_cluster) as framework:
        sleeper = task("capped", "sleep 600")
        executor_id = await framework.launch_group(sleeper)
        while (await framework.next_update())["state"] != "TASK_RUNNING":
            pass
        url = f"http://127.0.0.1:{cfs_cluster.agent_ports[0]}/state"
        with urllib.request.urlopen(url, timeout=5) as response:
            agent = json.loads(response.read())
        [container_id] = [
            e["container"]
            for f in agent["frameworks"]
            for e in f["executors"]
            if e["id"] == executor_id
        ]
        flags = SimpleNamespace(cgroups_root="mesilla")  # mesilla local's default
        cgroup = Hierarchy.detect("/sys/fs/cgroup").cgroup(
            own_cgroup_path(flags, ContainerID(value=container_id))
        )
        if cgroup.version == 1:
            quota = cgroup.read("cpu", "cpu.cfs_quota_us").strip()
        else:
            quota = cgroup.read("cpu", "cpu.max").split()[0]
        assert quota == "20000"  # (0.1 executor + 0.1 task) cpus of a 100 ms period
        await framework.kill(sleeper)


@pytest.fixture(scope="module")
def images_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # Two images (`docker save` tarballs from Debian's busybox-static), told
    # apart by the content of /etc/pod-image.
    images = tmp_path_factory.mktemp("pod-images")
    for name in ("image-a", "image-b"):
        image = build_image(extra_files={"etc/pod-image": name.encode()})
        write_docker_save(image, str(images / f"{name}:latest.tar"), [f"{name}:latest"])
    work_dir = tmp_path_factory.mktemp("pods-images")
    flags = [
        "--isolation=filesystem/linux,docker/runtime",
        "--image_providers=docker",
        f"--docker_registry={images}",
        f"--docker_store_dir={work_dir / 'store'}",
    ]
    with LocalCluster(work_dir, extra_flags=flags) as running:
        yield running


def image(name: str) -> Json:
    return {"type": "MESOS", "mesos": {"image": {"type": "DOCKER", "docker": {"name": name}}}}


async def test_two_tasks_of_one_pod_run_different_images(images_cluster: LocalCluster) -> None:
    async with framework_on(images_cluster) as framework:
        a = task("a", "grep -qx image-a /etc/pod-image", container=image("image-a:latest"))
        b = task("b", "grep -qx image-b /etc/pod-image", container=image("image-b:latest"))
        await framework.launch_group(a, b)
        ended = await framework.until_terminal(tid(a), tid(b))
        assert ended[tid(a)]["state"] == "TASK_FINISHED", ended[tid(a)]
        assert ended[tid(b)]["state"] == "TASK_FINISHED", ended[tid(b)]


async def test_checks_of_every_kind_through_the_agent(framework: Framework) -> None:
    port = free_port()
    fast = {"delay_seconds": 0, "interval_seconds": 0.2, "timeout_seconds": 10}
    health = {"type": "TCP", "tcp": {"port": port}, "grace_period_seconds": 30, **fast}
    http_check = {"type": "HTTP", "http": {"port": port, "path": "/"}, **fast}
    # COMMAND checks run as check-<uuid> containers nested in the task's.
    command_health = {
        "type": "COMMAND",
        "command": {"value": "test -d ."},
        "grace_period_seconds": 30,
        **fast,
    }
    command_check = {"type": "COMMAND", "command": {"command": {"value": "exit 3"}}, **fast}
    server = task("server", f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1",
                  health_check=health, check=http_check)
    checked = task("checked", "sleep 600", health_check=command_health, check=command_check)
    await framework.launch_group(server, checked)

    def seen(task_info: Json, predicate: Any) -> bool:
        return any(u["task_id"] == task_info["task_id"] and predicate(u) for u in framework.updates)

    wanted = [
        (server, lambda u: u.get("healthy") is True),
        (server, lambda u: u.get("check_status", {}).get("http", {}).get("status_code") == 200),
        (checked, lambda u: u.get("healthy") is True),
        (checked, lambda u: u.get("check_status", {}).get("command", {}).get("exit_code") == 3),
    ]
    while not all(seen(t, p) for t, p in wanted):
        status = await framework.next_update()
        assert status["state"] not in TERMINAL, status
    ended = await framework.kill(server, checked)
    assert {status["state"] for status in ended.values()} == {"TASK_KILLED"}


async def test_command_health_check_sees_the_image_and_the_volume_of_its_task(
    images_cluster: LocalCluster,
) -> None:
    # The check (a DEBUG container) must run in the task's filesystem: its
    # image, its SANDBOX_PATH volume, its working directory (the sandbox).
    fast = {"delay_seconds": 0, "interval_seconds": 0.2, "timeout_seconds": 10}
    command = "test -s shared/now && grep -qx image-a /etc/pod-image"
    health = {"type": "COMMAND", "command": {"value": command}, "grace_period_seconds": 60, **fast}
    container = {**image("image-a:latest"), "volumes": shared_volume("shared")["volumes"]}
    checked = task("checked", "date > shared/now && sleep 600", container=container,
                   health_check=health)  # fmt: skip
    async with framework_on(images_cluster) as framework:
        await framework.launch_group(checked)
        while True:
            status = await framework.next_update()
            assert status["state"] not in TERMINAL, status
            if status.get("healthy") is True:
                break
            assert status.get("healthy") is not False, status
        ended = await framework.kill(checked)
        assert ended[tid(checked)]["state"] == "TASK_KILLED"


async def test_exec_session_into_a_task_sees_its_image_and_working_directory(
    images_cluster: LocalCluster,
) -> None:
    # LAUNCH_NESTED_CONTAINER_SESSION (exec into a running task) is a DEBUG
    # container: it sees the task's rootfs and starts in the task's sandbox.
    running = task("running", "echo here > marker && sleep 600", container=image("image-b:latest"))
    async with framework_on(images_cluster) as framework:
        await framework.launch_group(running)
        while (status := await framework.next_update())["state"] != "TASK_RUNNING":
            assert status["state"] not in TERMINAL, status
        parent = status["container_status"]["container_id"]
        call = {
            "type": "LAUNCH_NESTED_CONTAINER_SESSION",
            "launch_nested_container_session": {
                "container_id": {"value": "exec-" + uuid.uuid4().hex[:8], "parent": parent},
                "command": {"value": "while ! test -s marker; do sleep 0.1; done; "
                                     "cat /etc/pod-image marker; pwd"},
            },
        }  # fmt: skip
        headers = {"Accept": "application/recordio", "Message-Accept": "application/json"}
        agent = f"http://127.0.0.1:{images_cluster.agent_ports[0]}/api/v1"
        async with aiohttp.ClientSession() as session:
            async with session.post(agent, json=call, headers=headers) as response:
                assert response.status == 200, await response.text()
                body = await response.read()
        stdout = b"".join(
            base64.b64decode(message["data"]["data"])
            for message in map(json.loads, Decoder().feed(body))
            if message["type"] == "DATA" and message["data"]["type"] == "STDOUT"
        )
        # /etc/pod-image has no newline of its own.
        assert stdout == b"image-bhere\n/mnt/mesos/sandbox\n"
        ended = await framework.kill(running)
        assert ended[tid(running)]["state"] == "TASK_KILLED"
