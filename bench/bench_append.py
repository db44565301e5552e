"""``append_node`` of a short text node, against the same three statements in raw ``sqlite3``.

Run: ``python bench/bench_append.py [--rounds N] [--batch N]``. Each round awaits ``batch``
appends of a one-block text node (the store validates it, queues it, and its writer inserts the
node and its ``node_created`` event and moves the session's active node in one transaction), and,
in turn, runs ``batch`` raw transactions of one node insert, one event insert and one session
update on a file of the same shape (WAL, ``synchronous=NORMAL``). Which side goes first alternates
per round; the report gives the median time per append of each side and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from soong_store import SessionStore

CONTENT = [{"type": "text", "text": "a short message of an ordinary length, one block"}]
RAW_SCHEMA = """
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, active_node_id TEXT, updated_at TEXT);
CREATE TABLE nodes (node_id TEXT PRIMARY KEY, node_seq INTEGER UNIQUE, parent_id TEXT,
                    content_json TEXT, created_at TEXT);
CREATE INDEX nodes_parent ON nodes (parent_id);
CREATE TABLE events (event_id TEXT PRIMARY KEY, seq INTEGER UNIQUE, node_id TEXT,
                     event_type TEXT, created_at TEXT);
CREATE INDEX events_node ON events (node_id);
INSERT INTO sessions VALUES ('s', NULL, '');
"""


@dataclass(frozen=True)
class Result:
    """Seconds per append of each side, one figure per round."""

    store: list[float]
    raw: list[float]

    def report(self) -> str:
        store, raw = statistics.median(self.store), statistics.median(self.raw)
        return "\n".join(
            [
                f"append_node, {len(self.store)} rounds (medians per append)",
                f"  raw sqlite3 (3 statements) : {raw * 1e6:8.1f} us",
                f"  store.append_node          : {store * 1e6:8.1f} us "
                f"({1 / store:,.0f} per second)",
                f"  ratio                      : {store / raw:8.2f}x",
            ]
        )


def raw_round(connection: sqlite3.Connection, start: int, batch: int) -> None:
    for seq in range(start, start + batch):
        node = f"node_{seq:012d}"
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            "INSERT INTO nodes VALUES (?, ?, ?, ?, ?)",
            (node, seq, f"node_{seq - 1:012d}", '[{"type":"text","text":"x"}]', "t"),
        )
        connection.execute(
            "INSERT INTO events VALUES (?, ?, ?, 'node_created', 't')", (f"evt_{seq}", seq, node)
        )
        connection.execute("UPDATE sessions SET active_node_id = ?, updated_at = 't'", (node,))
        connection.execute("COMMIT")


async def run(rounds: int, batch: int) -> Result:
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        raw_db = sqlite3.connect(Path(tmp) / "raw.sqlite", isolation_level=None)
        raw_db.execute("PRAGMA journal_mode = WAL")
        raw_db.execute("PRAGMA synchronous = NORMAL")
        raw_db.executescript(RAW_SCHEMA)
        store_times: list[float] = []
        raw_times: list[float] = []
        async with SessionStore(home=Path(tmp) / "home") as store:
            sid = (await store.create_session(cwd=tmp)).session_id
            for _ in range(batch):  # warm-up
                await store.append_node(sid, "user", "message", CONTENT)
            raw_round(raw_db, 1, batch)
            next_raw = batch + 1
            for i in range(rounds):
                for side in ("store", "raw") if i % 2 else ("raw", "store"):
                    begin = time.perf_counter()
                    if side == "store":
                        for _ in range(batch):
                            await store.append_node(sid, "user", "message", CONTENT)
                        store_times.append((time.perf_counter() - begin) / batch)
                    else:
                        raw_round(raw_db, next_raw, batch)
                        next_raw += batch
                        raw_times.append((time.perf_counter() - begin) / batch)
        raw_db.close()
        return Result(store_times, raw_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    print(asyncio.run(run(args.rounds, args.batch)).report())


if __name__ == "__main__":
    main()
