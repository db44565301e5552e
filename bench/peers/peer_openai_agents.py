"""The OpenAI Agents SDK's ``SQLiteSession`` under the peers' workload (run in its own venv).

One ``SQLiteSession`` per session, all on one file, as the SDK is used; an item is an input
message ``{"role", "content"}``. The SDK switches the file to WAL and leaves ``synchronous`` at
SQLite's default (FULL); ``pragmas`` reports what its connection says.
"""

from __future__ import annotations

from typing import Any

from _common import Peer, item_role, item_text, main
from agents import SQLiteSession


def _item(i: int) -> Any:
    return {"role": item_role(i), "content": item_text(i)}


class AgentsPeer(Peer):
    name = "openai-agents SQLiteSession"

    def __init__(self) -> None:
        super().__init__()
        self.db = ""
        self.sessions: list[SQLiteSession] = []

    async def open(self, db: str) -> None:
        self.db = db

    async def session(self, session_id: str) -> Any:
        handle = SQLiteSession(session_id, self.db)
        self.sessions.append(handle)
        return handle

    async def write(self, handle: Any, i: int) -> None:
        await handle.add_items([_item(i)])

    async def bulk(self, handle: Any, count: int) -> None:
        await handle.add_items([_item(i) for i in range(count)])

    async def read_all(self, handle: Any) -> list[Any]:
        return list(await handle.get_items())

    async def read_last(self, handle: Any, n: int) -> list[Any]:
        return list(await handle.get_items(limit=n))

    async def pragmas(self) -> dict[str, Any]:
        # The SDK's own connection (a private accessor, used only to report its settings).
        connection = self.sessions[0]._get_connection()
        return {
            "journal_mode": connection.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": connection.execute("PRAGMA synchronous").fetchone()[0],
        }

    async def close(self) -> None:
        for handle in self.sessions:
            handle.close()


if __name__ == "__main__":
    main(AgentsPeer())
