"""A failed LAUNCH_CONTAINER answers by whose fault it is: the containerizer's
ContainerError becomes its HTTP status, with its message, at the agent API's edge."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from mesilla.agent import agent_api, container_api
from mesilla.agent.agent import Agent, AgentStatus
from mesilla.agent.flags import AgentFlags
from mesilla.agent.main import AGENT_FLAGS
from mesilla.common.errors import ContainerLaunchError, ImageUnavailable, InvalidContainer
from mesilla.common.flags import parse
from mesilla.common.http import Router, make_app
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import AgentInfo, ContainerID


class FailingContainerizer:
    """Fails every launch with `error` (below the part under test: the agent API)."""

    error: Exception = RuntimeError("unset")

    async def launch(self, container_id: ContainerID, config: ContainerConfig) -> None:
        raise self.error

    def containers(self) -> list[ContainerID]:
        return []

    def config(self, container_id: ContainerID) -> ContainerConfig | None:
        return None

    async def wait(self, container_id: ContainerID) -> None:
        return None


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[TestClient, FailingContainerizer]]:
    flags = parse(AGENT_FLAGS, ["--master=127.0.0.1:1", f"--work_dir={tmp_path}"], environ={})
    containerizer = FailingContainerizer()
    agent = Agent(AgentFlags.from_flags(flags), containerizer, AgentInfo(hostname="h"))  # type: ignore[arg-type]
    agent.status = AgentStatus.RUNNING
    agent.executors_recovered.set()
    router = Router("slave(1)")
    container_api.install(agent_api.install(router, agent, agent.files), agent)
    try:
        async with TestClient(TestServer(make_app(router))) as c:
            yield c, containerizer
    finally:
        await agent.close()


LAUNCH: dict[str, Any] = {
    "type": "LAUNCH_CONTAINER",
    "launch_container": {
        "container_id": {"value": "standalone"},
        "command": {"value": "true"},
        "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}}],
    },
}
CID = ContainerID(value="standalone")


@pytest.mark.parametrize(
    "error,status",
    [
        (InvalidContainer(CID, "PREPARING", "volume mode 'XX' is not RO or RW"), 400),
        (ImageUnavailable(CID, "PROVISIONING", "registry at 127.0.0.1:1 refused"), 503),
        (ContainerLaunchError(CID, "PREPARING", "runc create exited with 1"), 500),
    ],
)
async def test_a_failed_launch_answers_its_errors_status_and_reason(
    client: tuple[TestClient, FailingContainerizer], error: ContainerLaunchError, status: int
) -> None:
    c, containerizer = client
    containerizer.error = error
    r = await c.post("/api/v1", json=LAUNCH)
    assert r.status == status
    assert await r.text() == str(error)
