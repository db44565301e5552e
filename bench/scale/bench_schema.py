"""Per-session schema cost in one file: the seed's DDL against the lean pair, eager against lazy.

Run: ``python bench/scale/homes.py --only seed,lean,checked,empty`` once, then
``python bench/scale/bench_schema.py [--rounds 5] [--largest 10000]``.

For each shape (seed, lean, and lean with the seed's CHECKs and foreign keys) and each home size
(100, 1,000, 10,000 sessions of 5 nodes), interleaved round by round, medians:

- ``open+path``: in a new process (interpreter start and imports excluded): a connection, the
  session row with its catalog row, the active path (the recursive CTE the store runs) of the
  newest session;
- ``warm path``: the same read on a connection that is open and has read before;
- ``create``: on a warm writer connection, one ``create_session`` as the store does it (session
  row, root agent row, the pair, the ``session_created`` event, one transaction);
- ``next read``: on another connection that was open and warm before that create, its next
  active path of another session (SQLite re-parses the schema the create changed);
- ``lazy create`` / ``next read``: the session and agent rows only, and the next read after it;
- ``1st append``: the first node of a lazily created session (creates the pair, the catalog row,
  the ``session_created`` event, the node and its event, moves the active node), and the next
  read on the other connection after it;
- ``empty read``: the active path of a session that has no pair yet (the catalog says so).

Then the disk taken per empty session, from the ``empty-*`` homes (bytes of 1,100 minus bytes of
100, over 1,000). Sessions created here are dropped again at the end.
"""

from __future__ import annotations

import argparse
import sqlite3
from collections import defaultdict
from pathlib import Path

import _common as c
from homes import EMPTY_SIZES, SHAPE_SIZES

BENCH_PREFIX = "sess_20990101_000000_"


def bench_sid(serial: int) -> str:
    """A session id for a session made here, whose last 8 digits match no built session's."""
    return c.sid_of(serial + 0x8000_0000, BENCH_PREFIX)


def create_eager(connection: sqlite3.Connection, shape: str, sid: str) -> None:
    """``create_session`` with its pair, as the store does it today."""
    connection.execute("BEGIN IMMEDIATE")
    c.insert_session_rows(connection, sid, None)
    c.create_pair(connection, shape, sid)
    c.fill_pair(connection, sid, 0)
    connection.execute("INSERT INTO session_files VALUES (?, 'main', 1)", (sid,))
    connection.execute("COMMIT")


def create_lazy(connection: sqlite3.Connection, sid: str) -> None:
    """``create_session`` without a pair: the two rows only."""
    connection.execute("BEGIN IMMEDIATE")
    c.insert_session_rows(connection, sid, None)
    connection.execute("COMMIT")


def first_append(connection: sqlite3.Connection, shape: str, sid: str) -> None:
    """The first node of a lazy session: the pair, its catalog row and the first rows."""
    connection.execute("BEGIN IMMEDIATE")
    c.create_pair(connection, shape, sid)
    connection.execute("INSERT INTO session_files VALUES (?, 'main', 1)", (sid,))
    active = c.fill_pair(connection, sid, 1)
    connection.execute(
        "UPDATE sessions SET active_node_id = ?, updated_at = ? WHERE session_id = ?",
        (active, c.STAMP, sid),
    )
    connection.execute("COMMIT")


def drop_bench_sessions(connection: sqlite3.Connection) -> None:
    """Remove every session this experiment created (also those of an interrupted run)."""
    sids = [
        r[0]
        for r in connection.execute(
            "SELECT session_id FROM sessions WHERE session_id LIKE ?", (BENCH_PREFIX + "%",)
        )
    ]
    if not sids:
        return
    connection.execute("PRAGMA foreign_keys = OFF")
    connection.execute("BEGIN IMMEDIATE")
    for sid in sids:
        connection.execute(f"DROP TABLE IF EXISTS events_{sid}")
        connection.execute(f"DROP TABLE IF EXISTS nodes_{sid}")
        for table in ("session_files", "agents", "sessions"):
            connection.execute(f"DELETE FROM {table} WHERE session_id = ?", (sid,))
    connection.execute("COMMIT")
    connection.execute("PRAGMA foreign_keys = ON")


def run(folder: Path, rounds: int, largest: int) -> None:
    """Measure every figure, interleaved across homes, and print the tables."""
    homes = [(shape, n) for shape, sizes in SHAPE_SIZES.items() for n in sizes if n <= largest]
    writers, readers = {}, {}
    for shape, n in homes:
        path = folder / f"{shape}-{n}.sqlite"
        writers[shape, n] = c.connect(path, write=True)
        drop_bench_sessions(writers[shape, n])
        readers[shape, n] = c.connect(path)
        c.active_path(writers[shape, n], c.sid_of(0))
        c.active_path(readers[shape, n], c.sid_of(n - 2))
    fig: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    serial = 0
    for _ in range(rounds):
        for shape, n in homes:
            path = folder / f"{shape}-{n}.sqlite"
            writer, reader = writers[shape, n], readers[shape, n]
            key = (shape, n)
            took, length = c.open_in_child(path, c.sid_of(n - 1))
            assert length == c.NODES_PER_SESSION
            fig[(*key, "open")].append(took)
            with c.timer(fig[(*key, "warm")]):
                c.active_path(reader, c.sid_of(n - 2))
            serial += 1
            with c.timer(fig[(*key, "create")]):
                create_eager(writer, shape, bench_sid(serial))
            with c.timer(fig[(*key, "next")]):
                c.active_path(reader, c.sid_of(n - 2))
            serial += 1
            lazy = bench_sid(serial)
            with c.timer(fig[(*key, "lazy")]):
                create_lazy(writer, lazy)
            with c.timer(fig[(*key, "lazy_next")]):
                c.active_path(reader, c.sid_of(n - 2))
            with c.timer(fig[(*key, "empty")]):
                assert c.active_path(reader, lazy) == []
            with c.timer(fig[(*key, "append")]):
                first_append(writer, shape, lazy)
            with c.timer(fig[(*key, "append_next")]):
                c.active_path(reader, c.sid_of(n - 2))
    for shape, n in homes:
        drop_bench_sessions(writers[shape, n])
        writers[shape, n].close()
        readers[shape, n].close()
    cols = [
        ("open", "open+path"),
        ("warm", "warm path"),
        ("create", "create"),
        ("next", "next read"),
        ("lazy", "lazy create"),
        ("lazy_next", "next read"),
        ("empty", "empty read"),
        ("append", "1st append"),
        ("append_next", "next read"),
    ]
    rows = []
    for shape, n in homes:
        base = c.med_ms(fig[(shape, 100, "open")])
        cells = [f"{c.med_ms(fig[(shape, n, k)]):.2f}" for k, _ in cols]
        cells[0] += f" ({c.med_ms(fig[(shape, n, 'open')]) / base:.1f}x)"
        rows.append([shape, f"{n:,}", *cells])
    c.print_table(
        f"ms, median of {rounds} rounds ({c.environment()}); (Nx) = against 100 sessions",
        ["shape", "sessions", *[label for _, label in cols]],
        rows,
    )
    disk_rows = []
    for kind in ("seed", "lean", "lean-1k", "lazy"):
        small, big = (c.file_bytes(folder / f"empty-{kind}-{n}.sqlite") for n in EMPTY_SIZES)
        per = (big - small) / (EMPTY_SIZES[1] - EMPTY_SIZES[0])
        disk_rows.append([kind, f"{per / 1024:.1f}"])
    for shape in ("seed", "lean"):
        per = c.file_bytes(folder / f"{shape}-1000.sqlite") / 1000
        disk_rows.append([f"{shape}, 5 nodes (1,000 home)", f"{per / 1024:.1f}"])
    c.print_table("disk per session, KB", ["pair", "KB"], disk_rows)


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    c.add_common_args(parser)
    parser.add_argument("--largest", type=int, default=10000, help="skip bigger homes")
    args = parser.parse_args()
    run(c.cache_dir(args), args.rounds, args.largest)


if __name__ == "__main__":
    main()
