"""The issue's targets on the recommended layout: a 100-session home against a 100,000-session one.

Run: ``python bench/scale/homes.py --only home`` once (the 100,000-session home: ``HOT`` lean
pairs in ``sessions.sqlite``, the rest in shards of ``SHARD``), then
``python bench/scale/bench_home.py [--rounds 5]``. Interleaved per round, medians:

- ``open+path``: a new process (its start and imports excluded) opens the home and reads the
  newest session's row and catalog row, then its active path;
- ``idle path``: on a warm reader that already holds 8 other shards attached, the first active
  path of a session in a shard it does not hold (detach the least recently used, attach, read);
  and the same from a new process (``open+idle``);
- ``create``: ``create_session`` lazily (rows only) and eagerly (rows and a lean pair in the hot
  file), each followed by the ``next read`` on another warm connection;
- ``list(50)``: ``list_sessions(limit=50)`` newest first, the first page and one 50,000 rows
  down (``OFFSET``) and the same page by key (``updated_at, session_id`` below the last seen);
- ``archive`` / ``reactivate``: moving one session of 5 nodes from the hot file into a shard and
  back (``move.Home``), each move its own transactions.
Sessions made here are deleted again at the end.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import _common as c
import move
from _layout import ShardedReader
from bench_schema import BENCH_PREFIX, bench_sid, create_eager, create_lazy, drop_bench_sessions
from homes import HOT, SHARD, build_design_home, shard_name

PAGE = (
    "SELECT session_id, updated_at FROM sessions WHERE status = 'active' "
    "ORDER BY updated_at DESC, session_id DESC LIMIT 50"
)
FAR = PAGE + " OFFSET 50000"
KEYSET = (
    "SELECT session_id, updated_at FROM sessions WHERE status = 'active' "
    "AND (updated_at, session_id) < (?, ?) ORDER BY updated_at DESC, session_id DESC LIMIT 50"
)


def cleanup(home: Path) -> None:
    """Delete what an earlier run left: bench sessions, their pairs wherever they are."""
    first_shard = home / shard_name(0)
    if not first_shard.exists():  # the 100-session home has no shard yet: an empty one
        shard = c.connect(first_shard)
        shard.execute("PRAGMA journal_mode = WAL")
        shard.execute(c.SHARD_DDL)
        shard.close()
    writer = c.connect(home / "sessions.sqlite", write=True)
    writer.execute(move.JOURNAL_DDL)
    files = [
        r[0]
        for r in writer.execute(
            "SELECT DISTINCT file FROM session_files WHERE session_id LIKE ? AND file != 'main'",
            (BENCH_PREFIX + "%",),
        )
    ]
    for file in files:
        writer.execute("ATTACH DATABASE ? AS s", (str(home / file),))
        for (name,) in writer.execute(
            "SELECT name FROM s.sqlite_master WHERE type = 'table' AND name LIKE ?",
            (f"%{BENCH_PREFIX}%",),
        ).fetchall():
            writer.execute(f"DROP TABLE s.{name}")
        writer.execute("DETACH DATABASE s")
    writer.execute("DELETE FROM session_moves")
    drop_bench_sessions(writer)
    writer.close()


def run(folder: Path, rounds: int) -> None:
    """Measure every figure on both homes and print the table."""
    homes = {n: folder / f"home-{n}" for n in (100, 100_000)}
    for n, home in homes.items():
        build_design_home(home, n)
        cleanup(home)
    fig: dict[tuple[int, str], list[float]] = defaultdict(list)
    writers = {n: c.connect(h / "sessions.sqlite", write=True) for n, h in homes.items()}
    others = {n: ShardedReader(h) for n, h in homes.items()}
    movers = {n: move.Home(h) for n, h in homes.items()}
    warm = {}
    for n, home in homes.items():
        others[n].active_path(c.sid_of(n - 1))
        if n > HOT:
            warm[n] = ShardedReader(home)
            for shard in range(8):
                warm[n].active_path(c.sid_of(shard * SHARD))
    serial = 0
    for round_ in range(rounds):
        for n, home in homes.items():
            newest = c.sid_of(n - 1)
            took, length = c.open_in_child(home, newest, sharded=True)
            assert length == c.NODES_PER_SESSION
            fig[n, "open"].append(took)
            if n in warm:
                idle = c.sid_of((20 + round_ * 7) * SHARD + 3)
                with c.timer(fig[n, "idle"]):
                    assert len(warm[n].active_path(idle)) == c.NODES_PER_SESSION
                took, length = c.open_in_child(
                    home, c.sid_of((60 + round_) * SHARD + 9), sharded=True
                )
                assert length == c.NODES_PER_SESSION
                fig[n, "open_idle"].append(took)
            for kind in ("lazy", "eager"):
                serial += 1
                sid = bench_sid(serial)
                with c.timer(fig[n, kind]):
                    if kind == "lazy":
                        create_lazy(writers[n], sid)
                    else:
                        create_eager(writers[n], "lean", sid)
                with c.timer(fig[n, kind + "_next"]):
                    others[n].active_path(newest)
            with c.timer(fig[n, "page"]):
                page = writers[n].execute(PAGE).fetchall()
            with c.timer(fig[n, "far"]):
                writers[n].execute(FAR).fetchall()
            with c.timer(fig[n, "keyset"]):
                writers[n].execute(KEYSET, page[-1]).fetchall()
            serial += 1
            sid = bench_sid(serial)
            create_eager(writers[n], "lean", sid)
            for _ in range(c.NODES_PER_SESSION):
                movers[n].append(sid)
            target = shard_name(0)
            with c.timer(fig[n, "archive"]):
                movers[n].archive(sid, target)
            with c.timer(fig[n, "reactivate"]):
                movers[n].reactivate(sid)
            c.active_path(writers[n], newest)  # the moves changed the hot file's schema: absorb
            others[n].active_path(newest)  # the re-parse here, not in the next round's figures
    for n, home in homes.items():
        movers[n].close()
        writers[n].close()
        others[n].close()
        cleanup(home)
    report(fig, rounds)


def report(fig: dict[tuple[int, str], list[float]], rounds: int) -> None:
    """Print the figures against the 100-session home."""
    labels = [
        ("open", "new process: open + first active_path of a recent session"),
        ("idle", "first active_path of an idle session (warm reader, 8 shards held)"),
        ("open_idle", "new process: open + first active_path of an idle session"),
        ("lazy", "create_session, lazy (rows only)"),
        ("lazy_next", "next read on another connection after it"),
        ("eager", "create_session, eager (rows + lean pair in the hot file)"),
        ("eager_next", "next read on another connection after it"),
        ("page", "list_sessions(limit=50), first page"),
        ("far", "list_sessions(limit=50), OFFSET 50,000"),
        ("keyset", "list_sessions(limit=50), next page by key"),
        ("archive", "archive one session of 5 nodes (hot -> shard)"),
        ("reactivate", "reactivate it (shard -> hot)"),
    ]
    rows = []
    for key, label in labels:
        small = c.med_ms(fig[100, key]) if fig[100, key] else None
        big = c.med_ms(fig[100_000, key])
        ratio = f"{big / small:.1f}x" if small else "-"
        rows.append([label, f"{small:.2f}" if small else "-", f"{big:.2f}", ratio])
    c.print_table(
        f"recommended layout (hot {HOT}, shards of {SHARD}), ms, median of {rounds} rounds "
        f"({c.environment()})",
        ["figure", "100 sessions", "100,000 sessions", "ratio"],
        rows,
    )


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    c.add_common_args(parser)
    args = parser.parse_args()
    run(c.cache_dir(args), args.rounds)


if __name__ == "__main__":
    main()
