"""Memory of a process that touched 1,000 sessions once each: SQLite's schema cache, per layout.

Run: ``python bench/scale/homes.py`` once, then ``python bench/scale/bench_rss.py [--rounds 3]``.

Each case runs in a fresh child process: it imports ``sqlite3``, notes its RSS and SQLite's own
allocator total (``sqlite3_memory_used``, through the same shared library), opens one read
connection, reads the active path of 1,000 different sessions once each, and notes both again.
The store has 4 read connections and a writer; each holds its own copy of every schema it has
parsed, so a store's figure is up to five times the per-connection one below. SQLAlchemy's own
per-session ``Table`` objects are not here (raw ``sqlite3`` only): the store bounds that cache.

Cases: one file of 1,000 / 10,000 sessions in the seed's DDL and in the lean shape (touching
1,000 of them); the recommended layout at 100,000 sessions: 1,000 sessions spread over every
shard (each read attaches a shard, detaching the least recently used past 8; ``-small``: past 4,
with a page cache of 256 KB per shard), and 1,000 sessions of two shards.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import _common as c
from _layout import ShardedReader, sqlite_memory
from homes import HOT, SHARD

TOUCHED = 1000


def measure(case: str, folder: Path) -> dict[str, float]:
    """Run one case in this process (the child side)."""
    before_rss, before_sql = c.rss_kb(), sqlite_memory() or 0
    if case.startswith(("seed", "lean")):
        shape, n = case.split("-")
        connection = c.connect(folder / f"{shape}-{n}.sqlite")
        step = int(n) // TOUCHED
        for index in range(TOUCHED):
            assert c.active_path(connection, c.sid_of(index * step))
        attaches = 0
    else:
        if case == "home-spread-small":
            reader = ShardedReader(folder / "home-100000", limit=4, cache_kb=256)
        else:
            reader = ShardedReader(folder / "home-100000")
        idle = 100_000 - HOT
        if case.startswith("home-spread"):
            picks = [index * (idle // TOUCHED) for index in range(TOUCHED)]
        else:
            picks = list(range(2 * SHARD))[:TOUCHED]
        for index in picks:
            assert reader.active_path(c.sid_of(index))
        attaches = reader.attaches
    return {
        "rss_mb": (c.rss_kb() - before_rss) / 1024,
        "sqlite_mb": ((sqlite_memory() or 0) - before_sql) / 2**20,
        "total_rss_mb": c.rss_kb() / 1024,
        "attaches": attaches,
    }


def run(folder: Path, rounds: int, script: str) -> None:
    """Run every case ``rounds`` times in child processes and print medians."""
    cases = [
        "seed-1000",
        "seed-10000",
        "lean-1000",
        "lean-10000",
        "home-spread",
        "home-spread-small",
        "home-2shards",
    ]
    got: dict[str, list[dict[str, float]]] = {case: [] for case in cases}
    for _ in range(rounds):
        for case in cases:
            out = subprocess.run(
                [sys.executable, script, "--dir", str(folder), "--case", case],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            got[case].append(json.loads(out))
    rows = []
    for case in cases:

        def med(key: str, case: str = case) -> float:
            return statistics.median(r[key] for r in got[case])

        rows.append(
            [
                case,
                f"{med('sqlite_mb'):.1f}",
                f"{med('rss_mb'):.1f}",
                f"{med('total_rss_mb'):.1f}",
                f"{med('attaches'):.0f}",
            ]
        )
    c.print_table(
        f"touching {TOUCHED:,} sessions once each on one connection, medians of {rounds} "
        f"child processes ({c.environment()})",
        ["case", "SQLite memory (MB)", "RSS growth (MB)", "RSS of the process (MB)", "attaches"],
        rows,
    )


def main() -> None:
    """Parse the options: the parent, or one child case."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    c.add_common_args(parser)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.set_defaults(rounds=3)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(measure(args.case, c.cache_dir(args))))
    else:
        run(c.cache_dir(args), args.rounds, __file__)


if __name__ == "__main__":
    main()
