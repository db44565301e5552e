"""The store on PostgreSQL at many sessions: create, a new process's open + first read, disk.

Run: ``eval "$(bash .ci/postgres start)"; python bench/pg_store_scale.py [--sessions 10000]
[--samples 30]; bash .ci/postgres stop``.

Through the public API only. One database gets ``sessions`` empty sessions (``create_session``,
timed: the median of the last ``samples``), then one session gets 5 nodes; then ``samples`` new
processes each open a store and read that session's ``active_path`` (timed inside the process,
from after the imports to after the read); last, the database's size per session and one
empty session's pair (``pg_total_relation_size`` of both tables with their indexes and TOAST).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from soong_store import SessionStore  # noqa: E402
from soong_store.schema.catalog import session_table_names  # noqa: E402
from tests import postgres_server  # noqa: E402

READER = """
import asyncio, sys, time
from soong_store import SessionStore
t0 = time.perf_counter()  # after the imports: they cost the same at any number of sessions

async def main(home, url, sid):
    async with SessionStore(home=home, url=url) as store:
        path = await store.active_path(sid)
        print(time.perf_counter() - t0, len(path))

asyncio.run(main(*sys.argv[1:4]))
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


async def build(url: str, home: Path, sessions: int, samples: int) -> tuple[list[float], str, str]:
    times: list[float] = []
    async with SessionStore(home=home, url=url) as store:
        for _ in range(sessions):
            start = time.perf_counter()
            last = (await store.create_session(cwd=".")).session_id
            times.append(time.perf_counter() - start)
        full = (await store.create_session(cwd=".")).session_id
        for i in range(5):
            role = "user" if i % 2 == 0 else "assistant"
            await store.append_node(full, role, "message", [{"type": "text", "text": str(i)}])
    return times[-samples:], full, last


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    with (
        postgres_server.provide() as server,
        postgres_server.fresh_database(server) as url,
        tempfile.TemporaryDirectory(prefix="soong-pg-scale-") as folder,
    ):
        home = Path(folder)
        before = database_size(url)
        built = time.perf_counter()
        creates, full, empty = asyncio.run(build(url, home, args.sessions, args.samples))
        built = time.perf_counter() - built
        after = database_size(url)
        opens = []
        for _ in range(args.samples):
            out = subprocess.run(
                [sys.executable, "-c", READER, str(home), url, full],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            assert out[1] == "5"
            opens.append(float(out[0]))
        result = {
            "sessions": args.sessions,
            "build_s": round(built, 1),
            "create_session_ms_median": round(statistics.median(creates) * 1000, 2),
            "open_first_active_path_ms_median": round(statistics.median(opens) * 1000, 1),
            "open_first_active_path_ms_min": round(min(opens) * 1000, 1),
            "database_bytes_per_session": (after - before) // (args.sessions + 1),
            "empty_pair_bytes": pair_size(url, empty),
        }
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
