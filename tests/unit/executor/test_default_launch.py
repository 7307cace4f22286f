"""How a TaskInfo becomes a LAUNCH_CONTAINER, and the executor sandbox's task links."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mesilla.executor.default_launch import (
    allocation_role,
    hand_over_sandbox,
    launch_container_body,
    link_task_sandbox,
)


def disk_with_volume(path: str) -> dict:
    return {
        "name": "disk",
        "type": "SCALAR",
        "scalar": {"value": 10},
        "disk": {"persistence": {"id": "p1"}, "volume": {"container_path": path, "mode": "RW"}},
    }


def test_environment_gets_container_ip_and_allocation_role_after_the_tasks_own() -> None:
    task: dict[str, Any] = {
        "task_id": {"value": "t"},
        "command": {"value": "env", "environment": {"variables": [{"name": "A", "value": "1"}]}},
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}, "allocation_info": {"role": "web"}}
        ],
        "limits": {"cpus": {"value": 2}},
    }
    command, container, resources, limits = launch_container_body(task, "10.0.0.5")
    assert command["environment"]["variables"] == [
        {"name": "A", "value": "1"},
        {"name": "MESOS_CONTAINER_IP", "type": "VALUE", "value": "10.0.0.5"},
        {"name": "MESOS_ALLOCATION_ROLE", "type": "VALUE", "value": "web"},
    ]
    assert container is None
    assert resources == task["resources"] and limits == {"cpus": {"value": 2}}
    # The TaskInfo itself is left alone (it is resent on restarts).
    assert len(task["command"]["environment"]["variables"]) == 1


def test_disk_volumes_become_parent_sandbox_path_volumes() -> None:
    task = {"task_id": {"value": "t"}, "command": {"value": "true"}, "resources": [disk_with_volume("data")]}
    _, container, _, _ = launch_container_body(task, "127.0.0.1")
    assert container == {
        "type": "MESOS",
        "volumes": [
            {
                "mode": "RW",
                "container_path": "data",
                "source": {"type": "SANDBOX_PATH", "sandbox_path": {"type": "PARENT", "path": "data"}},
            }
        ],
    }
    image_task = {
        **task,
        "container": {"type": "MESOS", "mesos": {"image": {"type": "DOCKER", "docker": {"name": "busybox"}}}},
    }
    _, container, _, _ = launch_container_body(image_task, "127.0.0.1")
    assert container is not None
    assert container["mesos"]["image"]["docker"]["name"] == "busybox"
    assert container["volumes"][0]["container_path"] == "data"
    assert "volumes" not in image_task["container"]


def test_allocation_role_absent_without_allocation_info() -> None:
    assert allocation_role({"resources": [{"name": "cpus"}]}) is None


def test_task_link_points_at_the_current_container_and_is_replaced(tmp_path: Path) -> None:
    link_task_sandbox(str(tmp_path), "t", {"value": "c1"})
    assert os.readlink(tmp_path / "tasks" / "t") == str(tmp_path / "containers" / "c1")
    link_task_sandbox(str(tmp_path), "t", {"value": "c2"})
    assert os.readlink(tmp_path / "tasks" / "t") == str(tmp_path / "containers" / "c2")
    assert sorted(os.listdir(tmp_path / "tasks")) == ["t"]


def test_hand_over_moves_the_previous_sandbox(tmp_path: Path) -> None:
    old = tmp_path / "containers" / "c1"
    old.mkdir(parents=True)
    (old / "state").write_text("kept")
    assert hand_over_sandbox(str(tmp_path), {"value": "c1"}, {"value": "c2"})
    assert (tmp_path / "containers" / "c2" / "state").read_text() == "kept"
    assert not old.exists()
    assert not hand_over_sandbox(str(tmp_path), {"value": "gone"}, {"value": "c3"})
