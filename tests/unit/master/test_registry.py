"""Both registries remember agents and frameworks; SQLite's survives a new process object."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mesilla.master.registry import (
    AgentMark,
    InMemoryRegistry,
    Registry,
    RegistryError,
    SqliteRegistry,
)
from mesilla.v1.mesos import AgentID, AgentInfo, FrameworkID, FrameworkInfo


def agent_info(agent_id: str, hostname: str = "h") -> AgentInfo:
    return AgentInfo(hostname=hostname, id=AgentID(value=agent_id))


def framework_info(framework_id: str, name: str = "f") -> FrameworkInfo:
    return FrameworkInfo(user="u", name=name, id=FrameworkID(value=framework_id))


@pytest.fixture(params=["sqlite", "in_memory"])
async def registry(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Registry]:
    store: Registry = (
        SqliteRegistry.in_work_dir(str(tmp_path))
        if request.param == "sqlite"
        else InMemoryRegistry()
    )
    yield store
    await store.close()


async def test_agents_are_admitted_marked_and_removed(registry: Registry) -> None:
    assert (await registry.recover()).agents == {}
    await registry.admit_agent(agent_info("a1"))
    await registry.admit_agent(agent_info("a2"))
    await registry.admit_agent(agent_info("a3"))
    await registry.mark_agent_unreachable("a2", 100.0)
    await registry.mark_agent_gone("a3", 200.0)
    await registry.readmit_agent(agent_info("a1", hostname="new-name"))
    state = await registry.recover()
    assert state.agents["a1"].mark is AgentMark.ADMITTED
    assert state.agents["a1"].info.hostname == "new-name"
    assert (state.agents["a2"].mark, state.agents["a2"].time) == (
        AgentMark.UNREACHABLE,
        100.0,
    )
    assert (state.agents["a3"].mark, state.agents["a3"].time) == (AgentMark.GONE, 200.0)
    await registry.remove_agent("a1")
    assert "a1" not in (await registry.recover()).agents


async def test_frameworks_are_added_updated_and_removed(registry: Registry) -> None:
    await registry.add_framework(framework_info("f1"))
    await registry.add_framework(framework_info("f1", name="renamed"))
    await registry.add_framework(framework_info("f2"))
    await registry.remove_framework("f2")
    frameworks = (await registry.recover()).frameworks
    assert list(frameworks) == ["f1"] and frameworks["f1"].name == "renamed"


async def test_entries_need_ids(registry: Registry) -> None:
    with pytest.raises(ValueError, match="no id"):
        await registry.admit_agent(AgentInfo(hostname="h"))
    with pytest.raises(ValueError, match="no id"):
        await registry.add_framework(FrameworkInfo(user="u", name="n"))


async def test_sqlite_registry_survives_reopening(tmp_path: Path) -> None:
    first = SqliteRegistry.in_work_dir(str(tmp_path / "work"))
    await first.admit_agent(agent_info("a1"))
    await first.add_framework(framework_info("f1"))
    await first.mark_agent_unreachable("a1", 5.0)
    await first.close()
    assert (tmp_path / "work" / "registry.db").exists()
    second = SqliteRegistry.in_work_dir(str(tmp_path / "work"))
    state = await second.recover()
    await second.close()
    assert state.agents["a1"].mark is AgentMark.UNREACHABLE
    assert state.frameworks["f1"].id == FrameworkID(value="f1")


async def test_concurrent_sqlite_mutations_commit_together_in_order(
    tmp_path: Path,
) -> None:
    registry = SqliteRegistry.in_work_dir(str(tmp_path))
    await asyncio.gather(
        *(registry.admit_agent(agent_info(f"a{i}")) for i in range(200)),
        registry.mark_agent_unreachable("a7", 1.0),
    )
    await registry.close()
    reopened = SqliteRegistry.in_work_dir(str(tmp_path))
    state = await reopened.recover()
    await reopened.close()
    assert len(state.agents) == 200
    # Applied in call order: the mark comes after a7's admission.
    assert state.agents["a7"].mark is AgentMark.UNREACHABLE


async def test_a_corrupt_registry_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "registry.db").write_bytes(b"this is not a database" * 100)
    registry = SqliteRegistry.in_work_dir(str(tmp_path))
    with pytest.raises(RegistryError, match="move it away"):
        await registry.recover()
    await registry.close()
