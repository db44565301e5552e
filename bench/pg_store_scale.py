"""The store on PostgreSQL at many sessions: create, a new process's open + first read, disk.

Run: ``eval "$(bash .ci/postgres start)"; python bench/pg_store_scale.py [--sessions 10000]
[--samples 30] [--baseline FOLDER]; bash .ci/postgres stop``.

Through the public API only. One database gets ``sessions`` empty sessions (``create_session``,
timed: the median of the last ``samples``), then one session gets 5 nodes; then ``samples`` new
processes each open a store and read that session's ``active_path`` (timed inside the process,
from after the imports to after the read); last, the database's size per session and one
empty session's pair (``pg_total_relation_size`` of both tables with their indexes and TOAST).

``--baseline FOLDER`` names a source checkout of another commit (``git worktree add --detach
FOLDER COMMIT``): its open is timed too, in processes that alternate with this checkout's, on the
same database under the same load, so the two medians compare. The load average is reported
before and after the timed opens (the machine may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from soong_store import SessionStore  # noqa: E402
from soong_store.schema.session_tables import session_table_names  # noqa: E402
from tests import postgres_server  # noqa: E402

READER = """
import asyncio, sys, time
from soong_store import SessionStore
import soong_store
t0 = time.perf_counter()  # after the imports: they cost the same at any number of sessions
import psycopg, sqlalchemy.dialects.postgresql.psycopg
t1 = time.perf_counter()

async def main(home, url, sid):
    async with SessionStore(home=home, url=url) as store:
        path = await store.active_path(sid)
        print(time.perf_counter() - t0, time.perf_counter() - t1, len(path), soong_store.__file__)

asyncio.run(main(*sys.argv[1:4]))
"""
"""One new process: the open and first read, timed with and without the driver's import.

A store imports psycopg and SQLAlchemy's PostgreSQL dialect when it opens (about 70 ms here,
whatever the database holds); importing them first shows what the open itself costs.
"""


def database_size(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            )
    finally:
        engine.dispose()


def pair_size(url: str, sid: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return sum(
                int(
                    connection.execute(
                        text("SELECT pg_total_relation_size(:t)"), {"t": t}
                    ).scalar_one()
                )
                for t in session_table_names(sid)
            )
    finally:
        engine.dispose()


async def build(url: str, home: Path, sessions: int, samples: int) -> tuple[list[float], str]:
    times: list[float] = []
    async with SessionStore(home=home, url=url) as store:
        for _ in range(sessions):
            start = time.perf_counter()
            await store.create_session(cwd=".")
            times.append(time.perf_counter() - start)
        full = (await store.create_session(cwd=".")).session_id
        for i in range(5):
            role = "user" if i % 2 == 0 else "assistant"
            await store.append_node(full, role, "message", [{"type": "text", "text": str(i)}])
    return times[-samples:], full


def open_and_read(home: Path, url: str, sid: str, source: Path) -> tuple[float, float]:
    """A new process's open + first ``active_path``, importing soong_store from ``source``.

    Returns the time with the driver's import, and without it.
    """
    env = dict(os.environ, PYTHONPATH=str(source))
    out = subprocess.run(
        [sys.executable, "-c", READER, str(home), url, sid],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=source,  # ``-c`` puts the working folder first on the path
    ).stdout.split()
    assert out[2] == "5"
    assert Path(out[3]).resolve().is_relative_to(source.resolve()), out[3]
    return float(out[0]), float(out[1])


def summary(opens: list[tuple[float, float]]) -> dict[str, float]:
    with_import = [sample[0] for sample in opens]
    without = [sample[1] for sample in opens]
    return {
        "median_ms": round(statistics.median(with_import) * 1000, 1),
        "min_ms": round(min(with_import) * 1000, 1),
        "driver_imported_median_ms": round(statistics.median(without) * 1000, 1),
        "driver_imported_min_ms": round(min(without) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    with (
        postgres_server.provide() as server,
        postgres_server.fresh_database(server) as url,
        tempfile.TemporaryDirectory(prefix="soong-pg-scale-") as folder,
    ):
        home = Path(folder)
        before = database_size(url)
        built = time.perf_counter()
        creates, full = asyncio.run(build(url, home, args.sessions, args.samples))
        built = time.perf_counter() - built
        after = database_size(url)
        load_before = os.getloadavg()
        opens: list[tuple[float, float]] = []
        baseline: list[tuple[float, float]] = []
        for _ in range(args.samples):
            opens.append(open_and_read(home, url, full, here))
            if args.baseline is not None:
                baseline.append(open_and_read(home, url, full, args.baseline))
        load_after = os.getloadavg()
        result: dict[str, object] = {
            "sessions": args.sessions,
            "build_s": round(built, 1),
            "create_session_ms_median": round(statistics.median(creates) * 1000, 2),
            "open_first_active_path": summary(opens),
            "database_bytes_per_session": (after - before) // (args.sessions + 1),
            "written_pair_bytes": pair_size(url, full),
            "load_average_1_5_15": {
                "before_opens": [round(x, 2) for x in load_before],
                "after_opens": [round(x, 2) for x in load_after],
            },
        }
        if args.baseline is not None:
            result["baseline_open_first_active_path"] = summary(baseline)
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
