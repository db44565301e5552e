"""A per-session schema change: one ``ADD COLUMN`` on every ``nodes_`` table.

Run: ``python bench/scale/homes.py --only seed,lean,shards`` once, then
``python bench/scale/bench_alter.py [--rounds 3]``.

Every figure runs on a fresh copy of a built file, in one transaction, medians of the rounds:

- ``ALTER``: ``ALTER TABLE nodes_<sid> ADD COLUMN extra TEXT`` for every session. SQLite re-reads
  the whole schema of the file after each one, so a file of N pairs costs N re-parses of N pairs.
  At 10,000 sessions only the first ``--sample`` statements (default 1) are timed, in the first
  round only (one takes minutes), and the total extrapolated.
- ``rewrite``: the same change made the way ``ALTER TABLE ... ADD COLUMN`` makes it inside SQLite
  (the ``CREATE TABLE`` text in ``sqlite_master`` gets the column after its last column; rows
  already stored read the new column as NULL), for every table in one ``UPDATE`` under
  ``PRAGMA writable_schema``, then one ``schema_version`` bump: one re-parse in all. Then, from a
  new connection: ``quick_check``, a read of the new column and an insert that sets it.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import time
from collections import defaultdict
from pathlib import Path

import _common as c


def copy(folder: Path, name: str) -> Path:
    """A fresh copy of a built file (its WAL is empty: builds end with a checkpoint)."""
    target = folder / "scratch" / f"alter-{name}"
    target.parent.mkdir(exist_ok=True)
    for suffix in ("-wal", "-shm"):
        target.with_name(target.name + suffix).unlink(missing_ok=True)
    shutil.copyfile(folder / name, target)
    return target


def node_tables(connection: sqlite3.Connection) -> list[str]:
    """Every ``nodes_`` table of the file."""
    return [
        r[0]
        for r in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'nodes\\_%' "
            "ESCAPE '\\' ORDER BY name"
        )
    ]


def alter_each(path: Path, sample: int | None) -> tuple[float, int, int]:
    """Seconds for ``ALTER`` on the first ``sample`` tables (all if None), of how many."""
    connection = c.connect(path, write=True)
    tables = node_tables(connection)
    todo = tables if sample is None else tables[:sample]
    connection.execute("BEGIN IMMEDIATE")
    started = time.perf_counter()
    for table in todo:
        connection.execute(f"ALTER TABLE {table} ADD COLUMN extra TEXT")
    took = time.perf_counter() - started
    connection.execute("COMMIT")
    connection.close()
    return took, len(todo), len(tables)


def rewrite_all(path: Path) -> tuple[float, float]:
    """Seconds for the one-``UPDATE`` rewrite; seconds of the ``quick_check`` after it."""
    connection = c.connect(path, write=True)
    started = time.perf_counter()
    connection.execute("BEGIN IMMEDIATE")
    version = connection.execute("PRAGMA schema_version").fetchone()[0]
    rows = connection.execute(
        "SELECT rowid, name, sql FROM sqlite_master WHERE type = 'table' "
        "AND name LIKE 'nodes\\_%' ESCAPE '\\'"
    ).fetchall()
    changed, names = [], []
    for rowid, name, sql in rows:  # after the last column, before any table constraint
        last = "created_at TEXT NOT NULL"
        assert sql.count(last) == 1, sql
        changed.append((sql.replace(last, last + ", extra TEXT"), rowid))
        names.append(name)
    connection.execute("PRAGMA writable_schema = ON")
    # by rowid: sqlite_master has no index on name, and one scan per table would be quadratic
    connection.executemany("UPDATE sqlite_master SET sql = ? WHERE rowid = ?", changed)
    connection.execute(f"PRAGMA schema_version = {version + 1}")
    connection.execute("PRAGMA writable_schema = OFF")
    connection.execute("COMMIT")
    connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    took = time.perf_counter() - started
    connection.close()
    fresh = c.connect(path, write=True)
    started = time.perf_counter()
    result = fresh.execute("PRAGMA quick_check").fetchall()
    checked = time.perf_counter() - started
    assert result == [("ok",)], result
    first = sorted(names)[0]
    assert fresh.execute(f"SELECT extra FROM {first} LIMIT 1").fetchone() == (None,)
    fresh.execute(
        f"INSERT INTO {first} (node_id, node_seq, agent_id, role, node_type, content_json, "
        "created_at, extra) VALUES ('n_new', 99, 'a', 'user', 'message', '[]', 'now', 'x')"
    )
    assert fresh.execute(f"SELECT extra FROM {first} WHERE node_id = 'n_new'").fetchone() == ("x",)
    fresh.close()
    return took, checked


def run(folder: Path, rounds: int, sample: int, rewrite_only: bool) -> None:
    """Measure and print the table."""
    files = [
        ("seed", "seed-100.sqlite", None),
        ("seed", "seed-1000.sqlite", None),
        ("seed", "seed-10000.sqlite", sample),
        ("lean", "lean-100.sqlite", None),
        ("lean", "lean-1000.sqlite", None),
        ("lean", "lean-10000.sqlite", sample),
        ("lean shard", "shard-250.sqlite", None),
        ("lean shard", "shard-500.sqlite", None),
        ("lean shard", "shard-1000.sqlite", None),
    ]
    fig: dict[tuple[str, str], list[float]] = defaultdict(list)
    counts: dict[str, tuple[int, int]] = {}
    for round_ in range(rounds):
        for _shape, name, limit in files:
            if rewrite_only:
                counts[name] = (1, 1)
            elif limit is None or round_ == 0:  # at 10,000: one sample, first round only
                took, done, total = alter_each(copy(folder, name), limit)
                fig[name, "alter"].append(took * total / done)
                counts[name] = (done, total)
            took, checked = rewrite_all(copy(folder, name))
            fig[name, "rewrite"].append(took)
            fig[name, "check"].append(checked)
    rows = []
    for shape, name, _ in files:
        done, total = counts[name]
        if rewrite_only:
            total = len(fig[name, "rewrite"]) and int(name.split("-")[1].split(".")[0])
        alter = c.med_ms(fig[name, "alter"]) / 1000 if fig[name, "alter"] else float("nan")
        note = "" if done == total else f" (extrapolated from {done}, one round)"
        if rewrite_only:
            alter_cells = ["-", "-"]
        else:
            alter_cells = [f"{alter:,.2f} s{note}", f"{alter / total * 1000:.2f}"]
        rows.append(
            [
                shape,
                f"{total:,}",
                *alter_cells,
                f"{c.med_ms(fig[name, 'rewrite']):,.1f}",
                f"{c.med_ms(fig[name, 'check']) / 1000:,.2f} s",
            ]
        )
    c.print_table(
        f"ADD COLUMN on every nodes_ table, median of {rounds} rounds ({c.environment()})",
        ["pairs", "sessions", "ALTER each", "ms per ALTER", "rewrite (ms)", "quick_check after"],
        rows,
    )


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    c.add_common_args(parser)
    parser.add_argument("--sample", type=int, default=1, help="ALTERs timed at 10,000 (once)")
    parser.add_argument("--rewrite-only", action="store_true", help="skip the ALTER figures")
    parser.set_defaults(rounds=3)
    args = parser.parse_args()
    run(c.cache_dir(args), args.rounds, args.sample, args.rewrite_only)


if __name__ == "__main__":
    main()
