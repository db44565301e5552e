"""The store's floors in the peers row: raw ``sqlite3`` on the store's own file and tables.

``open_read``: a new process, on a home ``peer_store.py workload`` left, does what any store
must to read the 50-item session from that file and hand back the store's records, and nothing
else: connect with the store's pragmas, read the schema's revision (a store must refuse a file
it does not know) and the journal mode, then in one ``BEGIN`` the session's row, its pair's
placement and the climb from its active node (the store's own SQL text), each row built by the
store's own record builder. No engine, no pool, no cache, no thread. It times what ``open_read``
times in ``_common.py`` (from before the open to the records; the names file read before);
what the store costs over it is its own, and a target under it cannot be met with this schema
and these records.

``writes``: the workload's writes (``N`` awaited ones to one session, then ``N`` by 8 coroutines
to 8 sessions) as the design runs them at ``durability="full"``: an append's statements
(:class:`_raw.RawWriter`, on the DDL of the workload's own sessions, copied empty) behind one
writer thread whose waiting jobs commit together (:class:`_floor.ThreadedRaw`), at
``synchronous=FULL`` like the peers. What the store costs over it is its own; a write target
above it cannot be met with these tables by a store that commits on a writer thread.

Run with the bench's Python (``soong_store`` installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from _common import CONCURRENCY, item_role, item_text, timed_writes
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

from soong_store import SessionStore  # noqa: F401  # imported as the store's side is at its clock
from soong_store.home import DATABASE_FILE, HEAD_REVISION
from soong_store.model.row_records import node_records
from soong_store.read.climb import climb_statement

_SMALL_ITEMS = 50
_PRAGMAS = (
    "PRAGMA busy_timeout = 5000",
    "PRAGMA synchronous = FULL",
    "PRAGMA foreign_keys = ON",
)
_SESSION = (
    "SELECT session_id, cwd, root_agent_id, active_node_id, parent_session_id, status, "
    "metadata_json, created_at, updated_at FROM sessions WHERE session_id = ?"
)
_PLACE = "SELECT file, epoch FROM session_files WHERE session_id = ?"


def open_read(home: Path, sid: str, climb: str) -> float:
    """Seconds from before the open to session ``sid``'s 50 records (its pair in main)."""
    begin = time.perf_counter()
    connection = sqlite3.connect(home / DATABASE_FILE, isolation_level=None)
    for pragma in _PRAGMAS:
        connection.execute(pragma)
    (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
    if revision != HEAD_REVISION or mode != "wal":
        raise RuntimeError(f"not a store at head in WAL: {revision!r}, {mode!r}")
    connection.execute("BEGIN")
    row: Any = connection.execute(_SESSION, (sid,)).fetchone()
    place = connection.execute(_PLACE, (sid,)).fetchone()
    if place is None or place[0] != "main":
        raise RuntimeError(f"session {sid!r} has no pair in the main file: {place!r}")
    records = node_records(sid, connection.execute(climb, {"node_id": row[3], "steps": 1 << 30}))
    connection.execute("COMMIT")
    took = time.perf_counter() - begin
    connection.close()
    if len(records) != _SMALL_ITEMS:
        raise RuntimeError(f"the small session read {len(records)} items")
    return took


async def _writes(writer: Any, names: dict[str, str], items: int) -> dict[str, Any]:
    async def write(sid: str, i: int) -> None:
        content = orjson.dumps([{"type": "text", "text": item_text(i)}]).decode()
        await writer.append(sid, item_role(i), content)

    handles = [names[f"conc{k}"] for k in range(CONCURRENCY)]
    return {"items": items, **await timed_writes(write, names["seq"], handles, items)}


def writes(home: Path, items: int) -> dict[str, Any]:
    """Seconds for the workload's writes, sequential and 8-way, on the design's floor."""
    # The bench's own modules, imported here: the open's floor runs with the store's imports.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _floor import ThreadedRaw
    from _raw import RawWriter

    names = json.loads((home / "names.json").read_text())
    sids = [names["seq"], *(names[f"conc{k}"] for k in range(CONCURRENCY))]
    with tempfile.TemporaryDirectory(prefix="soong-bench-floor-") as tmp:
        raw = RawWriter.clone(home, sids, Path(tmp) / "floor.sqlite", "FULL")
        writer = ThreadedRaw(raw)
        try:
            return asyncio.run(_writes(writer, names, items))
        finally:
            writer.close()
            raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="raw sqlite3 doing the store's part of the peers")
    parser.add_argument("mode", choices=("open_read", "writes"))
    parser.add_argument("--db", required=True)
    parser.add_argument("--items", type=int, default=5000)
    args = parser.parse_args()
    home = Path(args.db)
    if args.mode == "writes":
        json.dump({**writes(home, args.items), "peer": "store floor"}, sys.stdout)
        sys.stdout.write("\n")
        return
    sid = json.loads((home / "names.json").read_text())["small"]
    # The statement's text, made before the clock starts: a store without SQLAlchemy would
    # hold it as a constant.
    table = f'"nodes_{sid}"'
    climb = climb_statement(table, False, SQLiteDialect_pysqlite()).sql
    json.dump({"open_read": open_read(home, sid, climb), "peer": "store floor"}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
