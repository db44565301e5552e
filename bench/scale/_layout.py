"""The recommended layout's read path: the catalog, then the hot file or an attached shard.

``ShardedReader`` is one read connection of the store as the design has it: the main file opened,
shard files attached on demand under aliases ``s0`` .. ``s{limit-1}`` and detached least recently
used once ``limit`` are attached (SQLite allows 10 on this build; the store keeps a margin).
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from pathlib import Path

import _common as c

ATTACH_LIMIT = 8


class ShardedReader:
    """A read connection that follows the catalog and keeps at most ``limit`` shards attached."""

    def __init__(self, home: Path, limit: int = ATTACH_LIMIT, cache_kb: int | None = None) -> None:
        self.home = home
        self.limit = limit
        self.cache_kb = cache_kb  # page cache of each attached shard (SQLite's default: 2,000)
        self.connection = c.connect(home / "sessions.sqlite")
        self.lru: OrderedDict[str, str] = OrderedDict()  # file -> alias
        self.attaches = 0

    def close(self) -> None:
        """Close the connection (its attachments go with it)."""
        self.connection.close()

    def alias(self, file: str) -> str:
        """The alias ``file`` is attached under, attaching it (and detaching the LRU) if needed."""
        if file in self.lru:
            self.lru.move_to_end(file)
            return self.lru[file]
        if len(self.lru) >= self.limit:
            _, free = self.lru.popitem(last=False)
            self.connection.execute(f"DETACH DATABASE {free}")
        else:
            free = f"s{len(self.lru)}"
        self.connection.execute(f"ATTACH DATABASE ? AS {free}", (str(self.home / file),))
        if self.cache_kb is not None:
            self.connection.execute(f"PRAGMA {free}.cache_size = -{self.cache_kb}")
        self.attaches += 1
        self.lru[file] = free
        return free

    def active_path(self, sid: str) -> list[tuple[object, ...]]:
        """The first read of a session: its row and catalog row, then its active path."""
        row = self.connection.execute(
            "SELECT s.active_node_id, f.file, f.epoch FROM sessions AS s "
            "LEFT JOIN session_files AS f ON f.session_id = s.session_id WHERE s.session_id = ?",
            (sid,),
        ).fetchone()
        if row is None or row[0] is None or row[1] is None:
            return []  # no node yet, or no pair yet (a lazily created session)
        if row[1] == "main":
            return self.connection.execute(
                c.ACTIVE_PATH.format(db="", sid=sid), (row[0],)
            ).fetchall()
        db = self.alias(row[1])
        self.connection.execute("BEGIN")  # the epoch and the rows from one snapshot of the shard
        try:
            epoch = self.connection.execute(
                f"SELECT epoch FROM {db}.shard_pairs WHERE session_id = ?", (sid,)
            ).fetchone()
            assert epoch == (row[2],), "moved meanwhile: the store reads again"
            sql = c.ACTIVE_PATH.format(db=f"{db}.", sid=sid)
            return self.connection.execute(sql, (row[0],)).fetchall()
        finally:
            self.connection.execute("COMMIT")


def sqlite_memory() -> int | None:
    """Bytes SQLite's allocator holds in this process (``sqlite3_memory_used``), if reachable."""
    import ctypes

    try:
        library = ctypes.CDLL("libsqlite3.so.0")
    except OSError:
        return None
    library.sqlite3_memory_used.restype = ctypes.c_int64
    library.sqlite3_libversion.restype = ctypes.c_char_p
    version = library.sqlite3_libversion()
    if version is None or version.decode() != sqlite3.sqlite_version:
        return None  # another copy of the library than the one the sqlite3 module uses
    return int(library.sqlite3_memory_used())
