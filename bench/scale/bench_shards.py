"""Shard files attached on demand: what an attach costs, when SQLite parses, what it invalidates.

Run: ``python bench/scale/homes.py --only lean,shards,home`` once, then
``python bench/scale/bench_shards.py [--rounds 5]``.

1. On a warm connection to a 100-session home: ``ATTACH`` of a shard of S lean sessions
   (S = 250, 500, 1,000, 2,000; and 1,000 with 1 KB pages), then the first active path of one of
   its sessions, then ``DETACH``; each step timed on its own, interleaved, medians.
2. The attach limit of this build: ``getlimit``, ``setlimit`` above it, an attach past it.
3. K shards (of 500) kept attached, K = 0, 4, 9: a warm read of the main file, and the next read
   after another connection created a pair in the main file (the re-parse it causes).
4. Who re-parses when: another connection attaching a shard; a pair created inside a shard by a
   writer that has it attached, seen by a reader with that shard attached and by one without.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import _common as c
from bench_schema import bench_sid, create_eager, drop_bench_sessions
from homes import SHARD_SIZES, build_design_home, shard_name


def shard_path(connection: sqlite3.Connection, db: str, index: int) -> list[tuple[object, ...]]:
    """The active path of session ``index`` in the attached shard ``db`` (its last node)."""
    sid = c.sid_of(index)
    sql = c.ACTIVE_PATH.format(db=f"{db}.", sid=sid)
    return connection.execute(sql, (c.node_id(sid, c.NODES_PER_SESSION),)).fetchall()


def attach_costs(folder: Path, rounds: int) -> None:
    """Part 1: attach, first read, detach of shards of several sizes."""
    main = c.connect(folder / "lean-100.sqlite")
    c.active_path(main, c.sid_of(99))
    shards = [(f"{s:,}", folder / f"shard-{s}.sqlite", s) for s in SHARD_SIZES]
    shards.append(("1,000 (1 KB pages)", folder / "shard-1000-1k.sqlite", 1000))
    fig: dict[tuple[str, str], list[float]] = defaultdict(list)
    for _ in range(rounds):
        for label, path, size in shards:
            with c.timer(fig[label, "attach"]):
                main.execute("ATTACH DATABASE ? AS s1", (str(path),))
            with c.timer(fig[label, "first"]):
                assert len(shard_path(main, "s1", size // 2)) == c.NODES_PER_SESSION
            with c.timer(fig[label, "second"]):
                shard_path(main, "s1", size // 3)
            with c.timer(fig[label, "detach"]):
                main.execute("DETACH DATABASE s1")
    main.close()
    rows = []
    for label, path, _ in shards:
        ms = [c.med_ms(fig[label, k]) for k in ("attach", "first", "second", "detach")]
        rows.append(
            [
                label,
                *(f"{m:.2f}" for m in ms),
                f"{ms[0] + ms[1]:.2f}",
                f"{c.file_bytes(path) >> 20}",
            ]
        )
    c.print_table(
        f"shard attach, ms, median of {rounds} rounds ({c.environment()})",
        ["sessions in shard", "ATTACH", "1st path", "2nd path", "DETACH", "attach+1st", "MB"],
        rows,
    )


def attach_limit(folder: Path) -> None:
    """Part 2: the attach limit of this build."""
    connection = c.connect(folder / "lean-100.sqlite")
    limit = connection.getlimit(sqlite3.SQLITE_LIMIT_ATTACHED)
    connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 125)
    raised = connection.getlimit(sqlite3.SQLITE_LIMIT_ATTACHED)
    options = [r[0] for r in connection.execute("PRAGMA compile_options") if "ATTACH" in r[0]]
    home = folder / "home-100000"
    error = "none"
    try:
        for index in range(limit + 1):
            connection.execute(f"ATTACH DATABASE ? AS s{index}", (str(home / shard_name(index)),))
    except sqlite3.OperationalError as exc:
        error = f"{exc} (at attach number {index + 1})"
    connection.close()
    print(f"\nattach limit: getlimit {limit}; after setlimit(125) {raised}; {options}; {error}")


def kept_attached(folder: Path, rounds: int) -> None:
    """Part 3: the cost of keeping K shards attached on one connection."""
    path = folder / "lean-100.sqlite"
    home = folder / "home-100000"
    writer = c.connect(path, write=True)
    drop_bench_sessions(writer)
    readers = {}
    for k in (0, 4, 9):
        reader = c.connect(path)
        for index in range(k):
            reader.execute(f"ATTACH DATABASE ? AS s{index}", (str(home / shard_name(index)),))
            shard_path(reader, f"s{index}", index * 500)
        c.active_path(reader, c.sid_of(98))
        readers[k] = reader
    fig: dict[tuple[int, str], list[float]] = defaultdict(list)
    for serial in range(rounds):
        create_eager(writer, "lean", bench_sid(serial))
        for k, reader in readers.items():
            with c.timer(fig[k, "next"]):
                c.active_path(reader, c.sid_of(98))
        for k, reader in readers.items():
            with c.timer(fig[k, "warm"]):
                c.active_path(reader, c.sid_of(98))
            if k:
                with c.timer(fig[k, "shard_next"]):
                    shard_path(reader, "s0", 7)
    drop_bench_sessions(writer)
    rows = []
    for k in readers:
        cells = [f"{c.med_ms(fig[k, key]):.3f}" for key in ("warm", "next")]
        cells.append(f"{c.med_ms(fig[k, 'shard_next']):.3f}" if k else "-")
        rows.append([str(k), *cells])
    c.print_table(
        "K shards of 500 attached (ms, medians): the first main read after another connection "
        "created a pair in main, then a warm main read, then a read of an attached shard",
        ["K", "warm main read", "next main read after a create", "a read of an attached shard"],
        rows,
    )


def who_reparses(folder: Path, rounds: int) -> None:
    """Part 4: attaching elsewhere, and a schema change inside a shard."""
    main_path = folder / "lean-100.sqlite"
    scratch = folder / "scratch"
    scratch.mkdir(exist_ok=True)
    shard = scratch / "shard-1000-copy.sqlite"
    shutil.copyfile(folder / "shard-1000.sqlite", shard)
    other = folder / "shard-2000.sqlite"
    watcher = c.connect(main_path)  # never attaches anything
    holder = c.connect(main_path)  # keeps the written shard attached
    holder.execute("ATTACH DATABASE ? AS s1", (str(shard),))
    attacher = c.connect(main_path)
    writer = c.connect(main_path, write=True)
    writer.execute("ATTACH DATABASE ? AS s1", (str(shard),))
    for connection in (watcher, holder, attacher, writer):
        c.active_path(connection, c.sid_of(97))
    shard_path(holder, "s1", 3)
    fig: dict[str, list[float]] = defaultdict(list)
    for round_ in range(rounds):
        with c.timer(fig["watch_warm"]):
            c.active_path(watcher, c.sid_of(97))
        attacher.execute("ATTACH DATABASE ? AS s2", (str(other),))
        shard_path(attacher, "s2", 5)
        with c.timer(fig["watch_after_attach"]):
            c.active_path(watcher, c.sid_of(97))
        attacher.execute("DETACH DATABASE s2")
        sid = c.sid_of(round_, "sess_20990202_000000_")
        with c.timer(fig["shard_create"]):
            writer.execute("BEGIN IMMEDIATE")
            c.create_pair(writer, "lean", sid, db="s1")
            writer.execute("COMMIT")
        with c.timer(fig["holder_main_next"]):
            c.active_path(holder, c.sid_of(97))
        with c.timer(fig["holder_shard_next"]):
            shard_path(holder, "s1", 3)
        with c.timer(fig["watch_next"]):
            c.active_path(watcher, c.sid_of(97))
    for connection in (watcher, holder, attacher, writer):
        connection.close()
    shard.unlink()
    labels = {
        "watch_warm": "a connection's warm main read",
        "watch_after_attach": "its next main read after ANOTHER connection attached a shard",
        "shard_create": "a writer creates a pair inside an attached shard of 1,000",
        "holder_main_next": "next MAIN read on a connection that has that shard attached",
        "holder_shard_next": "then its next read of that SHARD",
        "watch_next": "next main read on a connection without that shard",
    }
    rows = [[label, f"{c.med_ms(fig[key]):.3f}"] for key, label in labels.items()]
    c.print_table(f"who re-parses (ms, median of {rounds} rounds)", ["step", "ms"], rows)


def main() -> None:
    """Parse the options and run every part."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    c.add_common_args(parser)
    args = parser.parse_args()
    folder = c.cache_dir(args)
    build_design_home(folder / "home-100000", 100_000)
    attach_costs(folder, args.rounds)
    attach_limit(folder)
    kept_attached(folder, args.rounds)
    who_reparses(folder, args.rounds)


if __name__ == "__main__":
    main()
