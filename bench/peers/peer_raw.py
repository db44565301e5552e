"""Raw ``sqlite3`` under the peers' workload: the least any store on SQLite spends on it.

Not a peer: a reference beside them. One table of items (an integer key, the session, the item's
JSON), one ``INSERT`` and one ``COMMIT`` an item, WAL at ``synchronous=FULL`` as the peers run;
no validation, no ids, no timeline, no index beyond the session's. What a store adds to this
figure is its own; a target that asks for less than this figure asks for more than SQLite gives
on this machine. Runs with the bench's own Python and imports nothing of soong_store.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from _common import Peer, item_role, item_text, main

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, "
    "data TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS items_session ON items (session_id, id)",
)


def _item(i: int) -> str:
    return json.dumps({"role": item_role(i), "content": item_text(i)})


class RawPeer(Peer):
    """``sqlite3`` in the event loop's thread, an explicit transaction per write."""

    name = "raw sqlite3"

    def __init__(self) -> None:
        super().__init__()
        self.connection: sqlite3.Connection | None = None

    async def open(self, db: str) -> None:
        self.connection = sqlite3.connect(db, isolation_level=None)
        self.connection.execute("PRAGMA journal_mode = WAL")
        self.connection.execute("PRAGMA synchronous = FULL")
        for sql in _SCHEMA:
            self.connection.execute(sql)

    async def session(self, session_id: str) -> Any:
        return session_id

    async def write(self, handle: Any, i: int) -> None:
        assert self.connection is not None
        self.connection.execute("BEGIN IMMEDIATE")
        self.connection.execute(
            "INSERT INTO items (session_id, data) VALUES (?, ?)", (handle, _item(i))
        )
        self.connection.execute("COMMIT")

    async def read_all(self, handle: Any) -> list[Any]:
        assert self.connection is not None
        rows = self.connection.execute(
            "SELECT data FROM items WHERE session_id = ? ORDER BY id", (handle,)
        ).fetchall()
        return [json.loads(data) for (data,) in rows]

    async def read_last(self, handle: Any, n: int) -> list[Any]:
        assert self.connection is not None
        rows = self.connection.execute(
            "SELECT data FROM items WHERE session_id = ? ORDER BY id DESC LIMIT ?", (handle, n)
        ).fetchall()
        return [json.loads(data) for (data,) in reversed(rows)]

    async def pragmas(self) -> dict[str, Any]:
        assert self.connection is not None
        return {
            "journal_mode": self.connection.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": self.connection.execute("PRAGMA synchronous").fetchone()[0],
        }

    async def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


if __name__ == "__main__":
    main(RawPeer())
