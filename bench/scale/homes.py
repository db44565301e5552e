"""Build (once) every home the scale experiments read, and say how long each build took.

Run: ``python bench/scale/homes.py [--dir DIR] [--only seed,lean,checked,empty,shards,home]``.

- ``seed-N`` / ``lean-N``: one file, N sessions of 5 nodes each, pairs in the seed's DDL or the
  lean shape (N = 100, 1,000, 10,000); ``checked-N``: the lean shape with the seed's CHECKs and
  foreign keys (N = 100, 1,000);
- ``empty-*``: 100 and 1,100 sessions without nodes (eager pairs, seed and lean, 4 KB and 1 KB
  pages; and lazy: rows only), for the disk taken per empty session;
- ``shard-S``: a shard file of S lean sessions (S = 250, 500, 1,000, 2,000);
- ``home-N``: the recommended layout, ``sessions.sqlite`` holding the global tables, the catalog
  and the pairs of the ``HOT`` most recent sessions, the rest in ``shards/NNNN.sqlite`` of
  ``SHARD`` sessions each (N = 100 and 100,000).

Builds use ``journal_mode=OFF`` and ``synchronous=OFF`` (a build is redone if interrupted) and
leave every file in WAL mode, as the store does.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from pathlib import Path

import _common as c

SIZES = (100, 1000, 10000)
SHAPE_SIZES = {"seed": SIZES, "lean": SIZES, "checked": (100, 1000)}
SHARD_SIZES = (250, 500, 1000, 2000)
EMPTY_SIZES = (100, 1100)
HOT = 150
SHARD = 500


def shard_name(index: int) -> str:
    """The catalog's name of a shard file, relative to the home."""
    return f"shards/{index:04d}.sqlite"


def build_design_home(home: Path, sessions: int) -> float:
    """The recommended layout: a bounded hot file plus shard files; seconds taken."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "shards").mkdir(exist_ok=True)
    marker = home / "built.json"
    if marker.exists():
        return 0.0
    started = time.perf_counter()
    hot_first = max(0, sessions - HOT)
    placement: dict[int, str] = {}
    for first in range(0, hot_first, SHARD):
        count = min(SHARD, hot_first - first)
        name = shard_name(first // SHARD)
        c.build_shard(home / name, first, count, c.NODES_PER_SESSION)
        for index in range(first, first + count):
            placement[index] = name

    def make(connection: sqlite3.Connection) -> None:
        c.create_globals(connection)
        for index in range(sessions):
            sid = c.sid_of(index)
            if index >= hot_first:
                c.create_pair(connection, "lean", sid)
                active = c.fill_pair(connection, sid, c.NODES_PER_SESSION)
                file = "main"
            else:
                active = c.node_id(sid, c.NODES_PER_SESSION)
                file = placement[index]
            c.insert_session_rows(connection, sid, active, c.stamp_of(index))
            connection.execute("INSERT INTO session_files VALUES (?, ?, 1)", (sid, file))

    c.build_file(home / "sessions.sqlite", make)
    took = time.perf_counter() - started
    marker.write_text(json.dumps({"seconds": round(took, 1), "hot": HOT, "shard": SHARD}))
    return took


def build_empty(folder: Path, kind: str, sessions: int) -> float:
    """``sessions`` sessions without nodes: ``seed``/``lean`` pairs (``-1k``: 1 KB pages) or
    ``lazy`` (rows only, no pair)."""
    shape, _, pages = kind.partition("-")
    page_size = 1024 if pages == "1k" else 4096
    path = folder / f"empty-{kind}-{sessions}.sqlite"
    if shape == "lazy":

        def make(connection: sqlite3.Connection) -> None:
            c.create_globals(connection)
            for index in range(sessions):
                c.insert_session_rows(connection, c.sid_of(index), None)

        return c.build_file(path, make, page_size)
    return c.build_home(path, shape, sessions, 0, page_size)


def check_ddl() -> None:
    """Compare the frozen seed DDL with what the installed package builds (if importable)."""
    import asyncio
    import tempfile

    from soong_store import SessionStore

    async def one_session(home: str) -> str:
        async with SessionStore(home=home) as store:
            return (await store.create_session(cwd=home)).session_id

    with tempfile.TemporaryDirectory() as home:
        sid = asyncio.run(one_session(home))
        connection = sqlite3.connect(Path(home) / "sessions.sqlite")
        rows = [r[0] for r in connection.execute("SELECT sql FROM sqlite_master ORDER BY rowid")]
        connection.close()
    pair = tuple(s.replace(sid, "{sid}") for s in rows if s and sid in s)
    same = pair == c.SEED_PAIR_DDL
    print("seed pair DDL", "matches" if same else "DIFFERS from", "the installed table factory")


def main() -> None:
    """Build what is missing and print what each build took."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    c.add_common_args(parser)
    parser.add_argument("--only", default="seed,lean,checked,empty,shards,home")
    parser.add_argument("--check-ddl", action="store_true")
    args = parser.parse_args()
    if args.check_ddl:
        check_ddl()
        return
    folder = c.cache_dir(args)
    only = set(args.only.split(","))
    took: dict[str, float] = {}
    for shape, sizes in SHAPE_SIZES.items():
        if shape in only:
            for n in sizes:
                path = folder / f"{shape}-{n}.sqlite"
                took[path.name] = c.build_home(path, shape, n, c.NODES_PER_SESSION)
    if "empty" in only:
        for kind in ("seed", "lean", "lean-1k", "lazy"):
            for n in EMPTY_SIZES:
                took[f"empty-{kind}-{n}"] = build_empty(folder, kind, n)
    if "shards" in only:
        for s in SHARD_SIZES:
            path = folder / f"shard-{s}.sqlite"
            took[path.name] = c.build_shard(path, 0, s, c.NODES_PER_SESSION)
        path = folder / "shard-1000-1k.sqlite"
        took[path.name] = c.build_shard(path, 0, 1000, c.NODES_PER_SESSION, page_size=1024)
    if "home" in only:
        for n in (100, 100_000):
            took[f"home-{n}"] = build_design_home(folder / f"home-{n}", n)
    for name, seconds in took.items():
        print(f"{name:28s} {'cached' if seconds == 0 else f'{seconds:8.1f} s'}")


if __name__ == "__main__":
    main()
