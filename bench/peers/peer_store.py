"""soong_store itself under the peers' workload, at ``durability="full"`` like the peers' default.

Run by the bench's own Python (the one ``soong_store`` is installed in), as a process of its
own like every peer. Writes are ``append_node`` of a one-block text node; "all items" is
``context(sid)`` (the whole path: the workload writes no compaction), "the last 50" is
``context(sid, limit=50)``, or, where ``context`` has no ``limit=`` yet, the whole context cut
in Python (noted in the output). The store generates its own session ids, so the names the
workload uses are kept in ``names.json`` beside the database, and loaded before an ``open_read``
or ``open_write`` clock starts (``recall``), as an application holds its ids.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from _common import Peer, item_role, item_text, main

from soong_store import SessionStore


class StorePeer(Peer):
    name = "soong_store"

    def __init__(self) -> None:
        super().__init__()
        self.store: SessionStore | None = None
        self.home = Path()
        self.names: dict[str, str] = {}
        self.limit = "limit" in inspect.signature(SessionStore.context).parameters
        if not self.limit:
            self.notes.append("needs limit=: a tail read is the whole context, cut in Python")

    def recall(self, db: str) -> None:
        names = Path(db) / "names.json"
        if names.exists():
            self.names = json.loads(names.read_text())

    async def open(self, db: str) -> None:
        self.home = Path(db)
        self.store = SessionStore(home=self.home, durability="full")
        await self.store.open()

    def _names_file(self) -> Path:
        return self.home / "names.json"

    async def session(self, session_id: str) -> Any:
        assert self.store is not None
        if session_id not in self.names:
            record = await self.store.create_session(cwd=str(self.home))
            self.names[session_id] = record.session_id
            self._names_file().write_text(json.dumps(self.names))
        return self.names[session_id]

    async def write(self, handle: Any, i: int) -> None:
        assert self.store is not None
        content = [{"type": "text", "text": item_text(i)}]
        await self.store.append_node(handle, item_role(i), "message", content)

    async def bulk(self, handle: Any, count: int) -> None:
        assert self.store is not None
        async with self.store.transaction(handle) as tx:
            for i in range(count):
                tx.add_node(item_role(i), "message", [{"type": "text", "text": item_text(i)}])

    async def read_all(self, handle: Any) -> list[Any]:
        assert self.store is not None
        return list((await self.store.context(handle)).nodes)

    async def read_last(self, handle: Any, n: int) -> list[Any]:
        assert self.store is not None
        if self.limit:
            view = await self.store.context(handle, limit=n)  # type: ignore[call-arg]
            return list(view.nodes)
        return list((await self.store.context(handle)).nodes[-n:])

    async def pragmas(self) -> dict[str, Any]:
        return {"durability": "full"}

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()


if __name__ == "__main__":
    main(StorePeer())
