"""LangGraph's ``AsyncSqliteSaver.aput_writes`` under the peers' workload (run in its own venv).

One saver (one ``aiosqlite`` connection) for all sessions, as an application holds one
checkpointer; a session is a thread with one checkpoint, and an item is one ``aput_writes`` of
one write to a ``messages`` channel under a task id of its own. Reading a session is
``aget_tuple``, whose pending writes are the items; the saver has no read of the last N only.
The saver switches the file to WAL and leaves ``synchronous`` at SQLite's default (FULL).
"""

from __future__ import annotations

from typing import Any

import aiosqlite
from _common import Peer, item_role, item_text, main
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver


def _item(i: int) -> Any:
    return {"role": item_role(i), "content": item_text(i)}


class LangGraphPeer(Peer):
    name = "langgraph AsyncSqliteSaver"
    tail_api = False

    def __init__(self) -> None:
        super().__init__()
        self.connection: aiosqlite.Connection | None = None
        self.saver: AsyncSqliteSaver | None = None
        self.task = 0
        self.notes.append("no read of the last N: aget_tuple reads every write")

    async def open(self, db: str) -> None:
        self.connection = await aiosqlite.connect(db)
        self.saver = AsyncSqliteSaver(self.connection)

    async def session(self, session_id: str) -> Any:
        assert self.saver is not None
        thread = {"configurable": {"thread_id": session_id, "checkpoint_ns": ""}}
        found = await self.saver.aget_tuple(thread)
        if found is not None:
            return found.config
        return await self.saver.aput(thread, empty_checkpoint(), {}, {})

    async def write(self, handle: Any, i: int) -> None:
        assert self.saver is not None
        self.task += 1
        await self.saver.aput_writes(handle, [("messages", _item(i))], f"task-{self.task}")

    async def read_all(self, handle: Any) -> list[Any]:
        assert self.saver is not None
        found = await self.saver.aget_tuple(handle)
        assert found is not None and found.pending_writes is not None
        return list(found.pending_writes)

    async def pragmas(self) -> dict[str, Any]:
        assert self.connection is not None
        out = {}
        for name in ("journal_mode", "synchronous"):
            async with self.connection.execute(f"PRAGMA {name}") as cursor:
                row = await cursor.fetchone()
                out[name] = None if row is None else row[0]
        return out

    async def close(self) -> None:
        if self.connection is not None:
            await self.connection.close()


if __name__ == "__main__":
    main(LangGraphPeer())
