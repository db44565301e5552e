"""The store's per-session upgrade of one shard: ``add_column`` through ``upgrade_pairs``' step.

Run: ``python bench/scale/bench_pair_upgrade.py [--pairs 500] [--shards 3] [--alter]``.

Builds ``--shards`` shard files of ``--pairs`` pairs each (the table factory's lean pair, 5 nodes
and 1 event per session) under the system temp folder, then upgrades each with the code a
revision runs per shard (``soong_store.migrate.pairs._upgrade_shard`` with
``add_column("nodes", "flags")``: open the shard, read its record, rewrite every nodes table,
record the revision, commit), timed per shard. ``--alter`` also times plain ``ALTER TABLE ...
ADD COLUMN`` per table on a fresh copy of the first shard, in one transaction.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.schema import CreateIndex, CreateTable

from soong_store.backends.sqlite.backend import make_engine
from soong_store.migrate.pairs import _upgrade_shard, add_column
from soong_store.schema.session_tables import session_tables


def _ddl(session_id: str) -> list[str]:
    engine = create_engine("sqlite://")
    tables = session_tables(session_id)
    out = []
    for table in (tables.nodes, tables.events):
        out.append(str(CreateTable(table).compile(engine)))
        out += [str(CreateIndex(index).compile(engine)) for index in table.indexes]
    return out


def build(path: Path, pairs: int, first: int) -> None:
    """A shard file of ``pairs`` sessions, journal off while building, WAL after."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("BEGIN")
    con.execute(
        "CREATE TABLE shard_pairs (session_id TEXT PRIMARY KEY, epoch INTEGER) WITHOUT ROWID"
    )
    for i in range(first, first + pairs):
        sid = f"sess_20260101_000000_{i:06x}"
        for statement in _ddl(sid):
            con.execute(statement)
        for k in range(5):
            con.execute(
                f'INSERT INTO "nodes_{sid}" (node_id, node_seq, agent_id, role, node_type, '
                "content_json, created_at) VALUES (?, ?, 'agent_x', 'user', 'message', ?, 't')",
                (f"node_{k}", k + 1, '[{"type":"text","text":"hello"}]'),
            )
        con.execute(
            f'INSERT INTO "events_{sid}" (event_id, seq, level, event_type, created_at) '
            "VALUES ('evt_1', 1, 'info', 'session_created', 't')"
        )
        con.execute("INSERT INTO shard_pairs VALUES (?, 1)", (sid,))
    con.execute("COMMIT")
    con.execute("PRAGMA journal_mode = WAL")
    con.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--alter", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="pair_upgrade_"))
    try:
        main_db = folder / "sessions.sqlite"
        sqlite3.connect(main_db).close()
        shards = [folder / f"{n:04d}.sqlite" for n in range(1, args.shards + 1)]
        started = time.perf_counter()
        for n, path in enumerate(shards):
            build(path, args.pairs, n * args.pairs)
        took = time.perf_counter() - started
        print(f"built {args.shards} shards of {args.pairs} pairs in {took:.1f} s")
        if args.alter:
            copy = folder / "alter.sqlite"
            shutil.copyfile(shards[0], copy)
            con = sqlite3.connect(copy, isolation_level=None)
            names = [
                r[0]
                for r in con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'nodes%'"
                )
            ]
            t0 = time.perf_counter()
            con.execute("BEGIN IMMEDIATE")
            for name in names:
                con.execute(f'ALTER TABLE "{name}" ADD COLUMN flags INTEGER')
            con.execute("COMMIT")
            print(f"ALTER per table, one shard: {time.perf_counter() - t0:.2f} s")
            con.close()
        change = add_column("nodes", "flags", "INTEGER")
        engine = make_engine(f"sqlite:///{main_db}", "admin")
        times = []
        with engine.connect() as connection:
            for path in shards:
                t0 = time.perf_counter()
                assert _upgrade_shard(connection, path, "bench_rev", change)
                times.append(time.perf_counter() - t0)
        engine.dispose()
        con = sqlite3.connect(shards[-1])
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        con.close()
        per = statistics.median(times)
        shown = ", ".join(f"{t * 1000:.0f}" for t in times)
        print(f"upgrade per shard: {shown} ms; median {per * 1000:.0f} ms")
        print(f"200 shards at that median: {per * 200:.1f} s")
    finally:
        if not os.environ.get("KEEP"):
            shutil.rmtree(folder)


if __name__ == "__main__":
    main()
