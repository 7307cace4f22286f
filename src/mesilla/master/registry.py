"""The master's registry: what must survive a master restart (Mesos's `src/master/registry.proto`).

It holds the admitted agents (with their unreachable or gone marks) and the
frameworks that have not been torn down. Every mutation is durable before the
call returns, so the master only acts (e.g. answers REGISTERED) on state it
will remember. `SqliteRegistry` keeps it in ``<work_dir>/registry.db``;
`InMemoryRegistry` forgets it on restart (``--registry=in_memory``).
"""

from __future__ import annotations

import asyncio
import enum
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgspec

from mesilla.v1.mesos import AgentInfo, FrameworkInfo

T = TypeVar("T")


class RegistryError(RuntimeError):
    """The registry cannot be read or written; the message names the file and the way out."""


class AgentMark(enum.Enum):
    ADMITTED = "ADMITTED"
    UNREACHABLE = "UNREACHABLE"
    GONE = "GONE"


@dataclass
class RegisteredAgent:
    info: AgentInfo
    mark: AgentMark = AgentMark.ADMITTED
    #: When it was marked unreachable or gone (seconds since the epoch).
    time: float | None = None


@dataclass
class RegistryState:
    agents: dict[str, RegisteredAgent] = field(default_factory=dict)
    frameworks: dict[str, FrameworkInfo] = field(default_factory=dict)


class Registry(Protocol):
    async def recover(self) -> RegistryState: ...
    async def admit_agent(self, info: AgentInfo) -> None: ...
    async def readmit_agent(self, info: AgentInfo) -> None: ...
    async def mark_agent_unreachable(self, agent_id: str, when: float) -> None: ...
    async def mark_agent_gone(self, agent_id: str, when: float) -> None: ...
    async def remove_agent(self, agent_id: str) -> None: ...
    async def add_framework(self, info: FrameworkInfo) -> None: ...
    async def remove_framework(self, framework_id: str) -> None: ...
    async def close(self) -> None: ...


def _agent_id(info: AgentInfo) -> str:
    if info.id is None:
        raise ValueError(
            f"agent {info.hostname} has no id: admit it only after assigning one"
        )
    return info.id.value


def _framework_id(info: FrameworkInfo) -> str:
    if info.id is None:
        raise ValueError(
            f"framework '{info.name}' has no id: add it only after assigning one"
        )
    return info.id.value


class InMemoryRegistry:
    """A registry that lives as long as the master process (tests, `--registry=in_memory`)."""

    def __init__(self) -> None:
        self._state = RegistryState()

    async def recover(self) -> RegistryState:
        return RegistryState(dict(self._state.agents), dict(self._state.frameworks))

    async def admit_agent(self, info: AgentInfo) -> None:
        self._state.agents[_agent_id(info)] = RegisteredAgent(info)

    async def readmit_agent(self, info: AgentInfo) -> None:
        self._state.agents[_agent_id(info)] = RegisteredAgent(info)

    async def mark_agent_unreachable(self, agent_id: str, when: float) -> None:
        self._mark(agent_id, AgentMark.UNREACHABLE, when)

    async def mark_agent_gone(self, agent_id: str, when: float) -> None:
        self._mark(agent_id, AgentMark.GONE, when)

    def _mark(self, agent_id: str, mark: AgentMark, when: float) -> None:
        agent = self._state.agents.get(agent_id)
        if agent is not None:
            agent.mark, agent.time = mark, when

    async def remove_agent(self, agent_id: str) -> None:
        self._state.agents.pop(agent_id, None)

    async def add_framework(self, info: FrameworkInfo) -> None:
        self._state.frameworks[_framework_id(info)] = info

    async def remove_framework(self, framework_id: str) -> None:
        self._state.frameworks.pop(framework_id, None)

    async def close(self) -> None:
        pass


_SCHEMA = """
CREATE TABLE IF NOT EXISTS agents (
    id TEXT PRIMARY KEY, info BLOB NOT NULL, mark TEXT NOT NULL, time REAL);
CREATE TABLE IF NOT EXISTS frameworks (id TEXT PRIMARY KEY, info BLOB NOT NULL);
"""


class SqliteRegistry:
    """The registry in SQLite (WAL, synchronous=FULL).

    SQLite calls run on one dedicated thread so a slow fsync never stalls the
    event loop. Mutations apply in the order they were made; those that arrive
    while a transaction commits are committed together in the next one (group
    commit), so thousands of agents registering at once cost few fsyncs.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="registry")
        self._db: sqlite3.Connection | None = None
        self._pending: list[tuple[str, tuple[Any, ...], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    @classmethod
    def in_work_dir(cls, work_dir: str) -> SqliteRegistry:
        os.makedirs(work_dir, exist_ok=True)
        return cls(os.path.join(work_dir, "registry.db"))

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(_SCHEMA)
            self._db = db
        return self._db

    def _write(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        db = self._connect()
        with db:
            db.execute("BEGIN IMMEDIATE")
            for sql, params in statements:
                db.execute(sql, params)

    async def _mutate(self, sql: str, params: tuple[Any, ...]) -> None:
        """Returns once the statement is committed (durably)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((sql, params, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        await done

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await self._run(
                    self._write, [(sql, params) for sql, params, _ in batch]
                )
            except (
                sqlite3.Error,
                OSError,
                RuntimeError,
            ) as exc:  # every waiter learns it failed
                for _, _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
            else:
                for _, _, done in batch:
                    if not done.done():
                        done.set_result(None)

    def _recover(self) -> RegistryState:
        db = self._connect()
        state = RegistryState()
        for agent_id, info, mark, when in db.execute(
            "SELECT id, info, mark, time FROM agents"
        ):
            state.agents[agent_id] = RegisteredAgent(
                msgspec.json.decode(info, type=AgentInfo), AgentMark(mark), when
            )
        for framework_id, info in db.execute("SELECT id, info FROM frameworks"):
            state.frameworks[framework_id] = msgspec.json.decode(
                info, type=FrameworkInfo
            )
        return state

    async def recover(self) -> RegistryState:
        try:
            return await self._run(self._recover)
        except (sqlite3.DatabaseError, msgspec.DecodeError) as exc:
            raise RegistryError(
                f"Cannot read the registry {self.path}: {exc}. Restore it, or move it "
                "away to start with an empty registry (agents and frameworks register anew)"
            ) from None

    async def admit_agent(self, info: AgentInfo) -> None:
        await self._mutate(
            "INSERT OR REPLACE INTO agents (id, info, mark, time) VALUES (?, ?, ?, NULL)",
            (_agent_id(info), msgspec.json.encode(info), AgentMark.ADMITTED.value),
        )

    async def readmit_agent(self, info: AgentInfo) -> None:
        await self.admit_agent(info)

    async def mark_agent_unreachable(self, agent_id: str, when: float) -> None:
        await self._mutate(
            "UPDATE agents SET mark = ?, time = ? WHERE id = ?",
            (AgentMark.UNREACHABLE.value, when, agent_id),
        )

    async def mark_agent_gone(self, agent_id: str, when: float) -> None:
        await self._mutate(
            "UPDATE agents SET mark = ?, time = ? WHERE id = ?",
            (AgentMark.GONE.value, when, agent_id),
        )

    async def remove_agent(self, agent_id: str) -> None:
        await self._mutate("DELETE FROM agents WHERE id = ?", (agent_id,))

    async def add_framework(self, info: FrameworkInfo) -> None:
        await self._mutate(
            "INSERT OR REPLACE INTO frameworks (id, info) VALUES (?, ?)",
            (_framework_id(info), msgspec.json.encode(info)),
        )

    async def remove_framework(self, framework_id: str) -> None:
        await self._mutate("DELETE FROM frameworks WHERE id = ?", (framework_id,))

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    async def close(self) -> None:
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self._run(self._close)
        self._pool.shutdown(wait=True)
