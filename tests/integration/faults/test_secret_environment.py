"""SECRET environment variables (issue #9): a command task, a custom executor's
task, a pod task, and a nested and a standalone container of the agent API each
get the decoded value, and nothing the cluster writes down or shows holds it,
before or after an agent restart.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
import uuid
from pathlib import Path

import pytest
from tests.fixtures.clusters import MakeCluster, MakeFramework
from tests.fixtures.images import PushedImage
from tests.integration.faults.workload import container, pod_executor, task, tid

from mesilla.testing.processes import Cluster, http_json
from mesilla.testing.scheduler import Json, scalar

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.slow, pytest.mark.registry]


def _secret_environment(encoded: str) -> Json:
    secret = {"type": "VALUE", "value": {"data": encoded}}
    return {"variables": [{"name": "X", "type": "SECRET", "secret": secret}]}


def _with_secret(task_info: Json, encoded: str) -> Json:
    task_info["command"]["environment"] = _secret_environment(encoded)
    return task_info


async def _until_printed(root: Path, line: str, count: int, timeout: float = 60.0) -> list[Path]:
    """The `stdout` files under `root` that hold `line`, once there are `count` of them."""
    deadline = time.monotonic() + timeout
    while True:
        found = [p for p in root.rglob("stdout") if p.is_file() and line in p.read_text(errors="replace")]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.2)


def _leaks(cluster: Cluster, value: str, encoded: str, echo: str) -> list[str]:
    """Files of the cluster (work dirs, runtime dir, logs) holding the secret, but
    for the echo lines the tasks print into their own stdout."""
    leaks = []
    for directory in (cluster.root, cluster.log_dir):
        for path in directory.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            try:
                text = path.read_bytes().decode(errors="replace")
            except OSError:
                continue
            if encoded in text or value in text.replace(echo, ""):
                leaks.append(str(path))
    return leaks


def _state_bodies(cluster: Cluster) -> dict[str, str]:
    bodies: dict[str, str] = {}
    for base, paths in (
        (cluster.master_url, ("/state", "/tasks", "/frameworks", "/master/state")),
        (cluster.agent_url(0), ("/state", "/slave(1)/state")),
    ):
        for path in paths:
            bodies[base + path] = str(http_json(base + path))
    for call in ("GET_STATE", "GET_TASKS", "GET_EXECUTORS", "GET_FRAMEWORKS"):
        bodies[f"master {call}"] = str(http_json(f"{cluster.master_url}/api/v1", {"type": call}))
    for call in ("GET_STATE", "GET_TASKS", "GET_EXECUTORS", "GET_FRAMEWORKS", "GET_CONTAINERS"):
        bodies[f"agent {call}"] = str(cluster.agent_call({"type": call}))
    return bodies


def _assert_nothing_shows(cluster: Cluster, value: str, encoded: str, echo: str) -> None:
    assert _leaks(cluster, value, encoded, echo) == []
    bodies = _state_bodies(cluster)
    shown = [name for name, body in bodies.items() if value in body or encoded in body]
    assert shown == []
    # The rest of the message is intact: the variable is there, without its value.
    assert "'type': 'SECRET'" in bodies["agent GET_EXECUTORS"]


async def test_secret_variables_reach_tasks_and_nothing_else(
    make_cluster: MakeCluster, make_framework: MakeFramework, busybox_image: PushedImage
) -> None:
    cluster = make_cluster(agent_flags=["--isolation=filesystem/linux,docker/runtime,namespaces/pid"])
    framework = await make_framework(cluster)
    value = f"s3cr3t-{uuid.uuid4().hex}"
    encoded = base64.b64encode(value.encode()).decode()
    echo = f"X={value}"
    script = 'echo "X=$X"; sleep 3600'

    command_task = _with_secret(task("cmd", script, container=container(busybox_image.name)), encoded)
    pod_task = _with_secret(task("pod", script, container=container(busybox_image.name)), encoded)
    executor = pod_executor()
    # A custom executor (Mesilla's command executor, told what to run) with the
    # secret in its own environment; its task inherits it.
    custom_task = task("custom", script)
    del custom_task["command"]
    custom_task["executor"] = {
        "type": "CUSTOM",
        "executor_id": {"value": f"custom-{uuid.uuid4().hex[:8]}"},
        "command": {
            "shell": False, "value": sys.executable,
            "arguments": [
                sys.executable, "-m", "mesilla.executor.command",
                "--task_command=" + json.dumps({"value": script}),
            ],
            "environment": _secret_environment(encoded),
        },
        "resources": [scalar("cpus", 0.1), scalar("mem", 64)],
    }  # fmt: skip
    await framework.launch(await framework.offer(), [command_task, custom_task])
    await framework.launch_group(await framework.offer(), executor, [pod_task])
    tasks = [tid(command_task), tid(custom_task), tid(pod_task)]
    await framework.until_state(tasks, "TASK_RUNNING", 120)

    # A nested container of the agent API, under the pod's executor.
    parent = next(
        entry["container_id"] for entry in cluster.containers().values()
        if entry.get("executor_id", {}).get("value") == executor["executor_id"]["value"]
        and "parent" not in entry["container_id"]
    )  # fmt: skip
    nested = {"value": f"nested-{uuid.uuid4().hex[:8]}", "parent": parent}
    cluster.agent_call({
        "type": "LAUNCH_NESTED_CONTAINER",
        "launch_nested_container": {
            "container_id": nested,
            "command": {"value": script, "environment": _secret_environment(encoded)},
        },
    })  # fmt: skip

    # And a standalone container of the agent API.
    standalone = {"value": f"standalone-{uuid.uuid4().hex[:8]}"}
    cluster.agent_call({
        "type": "LAUNCH_CONTAINER",
        "launch_container": {
            "container_id": standalone,
            "command": {"value": script, "environment": _secret_environment(encoded)},
            "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
        },
    })  # fmt: skip

    printed = await _until_printed(cluster.agent_dir(0), echo, 5)
    assert len(printed) == 5, printed
    _assert_nothing_shows(cluster, value, encoded, echo)

    # Recovered after a restart: the agent knows every task without their secrets.
    stopped_at = time.time()
    assert cluster.agents[0].stop()
    cluster.start_agent(0, registered=False)
    cluster.await_agent_active(0, after=stopped_at)
    await framework.reconcile(tasks)

    def running(t: Json) -> bool:
        answer = framework.reconciled(tid(t))
        return answer is not None and answer.state == "TASK_RUNNING"

    await framework.until(
        lambda: all(running(t) for t in (command_task, custom_task, pod_task)), 30,
        "every task reconciled running",
    )  # fmt: skip
    everything = cluster.agent_call(
        {"type": "GET_CONTAINERS", "get_containers": {"show_nested": True, "show_standalone": True}}
    )
    assert nested["value"] in str(everything) and standalone["value"] in str(everything)
    _assert_nothing_shows(cluster, value, encoded, echo)

    cluster.agent_call({"type": "KILL_NESTED_CONTAINER", "kill_nested_container": {"container_id": nested}})
    cluster.agent_call({"type": "KILL_CONTAINER", "kill_container": {"container_id": standalone}})
    for t in tasks:
        await framework.kill(t)
    await framework.until_state(tasks, "TASK_KILLED", 60)
    cluster.agent_call({"type": "WAIT_CONTAINER", "wait_container": {"container_id": standalone}})
    cluster.agent_call({"type": "REMOVE_CONTAINER", "remove_container": {"container_id": standalone}})
    assert cluster.await_no_leftovers() == []


async def test_a_secret_reference_fails_the_launch_with_the_reason(
    make_cluster: MakeCluster, make_framework: MakeFramework
) -> None:
    cluster = make_cluster()
    framework = await make_framework(cluster)
    reference = task("ref", "echo never")
    secret = {"type": "REFERENCE", "reference": {"name": "/db/password"}}
    reference["command"]["environment"] = {
        "variables": [{"name": "X", "type": "SECRET", "secret": secret}]
    }
    await framework.launch(await framework.offer(), [reference])
    await framework.until_state([tid(reference)], "TASK_FAILED", 60)
    message = framework.terminal(tid(reference))[-1].status.get("message", "")
    assert "no secret resolver" in message, message
