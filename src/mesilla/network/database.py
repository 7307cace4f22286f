"""The network book's file: one SQLite table per resource, one JSON document per row.

``<work_dir>/network.db`` (WAL, synchronous=FULL), apart from the master's
``registry.db`` so that neither waits for the other's fsyncs. A write is one
transaction of upserts and deletes, durable when `write` returns. SQLite runs
on a thread of its own so the event loop never waits for the disk. Rows keep
their insertion order (an upsert keeps the rowid), so lists come back in the
order the resources were created.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any

TABLES = ("networks", "subnets", "ports", "trunks", "trunk_tokens")

#: (table, id, document), or (table, id, None) to delete the row.
Row = tuple[str, str, dict[str, Any] | None]


class Database:
    def __init__(self, path: str) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="network-db")
        self._db: sqlite3.Connection | None = None

    @classmethod
    def in_work_dir(cls, work_dir: str) -> Database:
        os.makedirs(work_dir, exist_ok=True)
        return cls(os.path.join(work_dir, "network.db"))

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            for table in TABLES:
                db.execute(f"CREATE TABLE IF NOT EXISTS {table} (id TEXT PRIMARY KEY, doc TEXT NOT NULL)")
            self._db = db
        return self._db

    def _load(self) -> dict[str, list[dict[str, Any]]]:
        db = self._connect()
        return {
            table: [json.loads(doc) for (doc,) in db.execute(f"SELECT doc FROM {table} ORDER BY rowid")]
            for table in TABLES
        }

    async def load(self) -> dict[str, list[dict[str, Any]]]:
        loaded: dict[str, list[dict[str, Any]]] = await self._run(self._load)
        return loaded

    def _write(self, rows: list[Row]) -> None:
        db = self._connect()
        with db:
            db.execute("BEGIN IMMEDIATE")
            for table, key, doc in rows:
                if doc is None:
                    db.execute(f"DELETE FROM {table} WHERE id = ?", (key,))
                else:
                    db.execute(
                        f"INSERT INTO {table} (id, doc) VALUES (?, ?) "
                        "ON CONFLICT(id) DO UPDATE SET doc = excluded.doc",
                        (key, json.dumps(doc, separators=(",", ":"))),
                    )

    async def write(self, rows: list[Row]) -> None:
        await self._run(self._write, rows)

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    async def close(self) -> None:
        await self._run(self._close)
        self._pool.shutdown(wait=True)
