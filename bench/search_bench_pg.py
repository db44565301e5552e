"""Search on PostgreSQL: ``store.search`` beside the bare ``tsvector`` query, and the index size.

Run: ``python bench/search_bench_pg.py URL [--sessions N] [--nodes N] [--queries N]`` with the URL
of an empty database (``postgresql+psycopg://...``; a throwaway server: ``.ci/postgres``). It
writes ``--sessions`` sessions of ``--nodes`` nodes through the store (the texts of
``search_bench.py``), unless the database already holds that many, then measures the median of
``await store.search(q)`` over the same query mix, beside the median of the bare statement on
the same connection pool (``@@`` on the GIN-indexed stored vector, ``ORDER BY ts_rank LIMIT 20``: no
join, no snippet, no records), and the sizes of ``search_text`` and its GIN index. Each query of
the mix runs twice in turn, as ``search_bench.py`` runs it: ranked a window at a time, and with
every match ranked at once (the order before windows).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

from search_bench import FULL, median_ms, node_content, queries, ranked_by, vocabulary
from sqlalchemy import create_engine, text

import soong_store.backends.search as search_seam
from soong_store import SessionStore

RAW = """SELECT doc_id FROM search_text
WHERE body_vector @@ ({match})
ORDER BY ts_rank(body_vector, {match}) DESC LIMIT 20"""


async def build(url: str, sessions: int, nodes: int) -> None:
    rng = random.Random(19)
    words = vocabulary(rng)
    started = time.perf_counter()
    async with SessionStore(url=url) as store:
        have = len(await store.list_sessions(limit=sessions))
        for s in range(have, sessions):
            sid = (await store.create_session(cwd=".")).session_id
            async with store.transaction(sid) as tx:
                for i in range(nodes):
                    role, content = node_content(rng, words, i)
                    tx.add_node(role, "message", content)
            if (s + 1) % max(1, sessions // 10) == 0:
                print(f"  built {s + 1}/{sessions} sessions, {time.perf_counter() - started:.0f} s")


async def measure(url: str, count: int) -> dict[str, Any]:
    engine = create_engine(url)
    with engine.connect() as connection:
        sid = connection.execute(text("SELECT min(session_id) FROM sessions")).scalar_one()
    mix = queries(random.Random(3), vocabulary(random.Random(19)), count, sid)
    store_times, full_times, raw_times, same = [], [], [], 0
    async with SessionStore(url=url) as store:
        await store.search("warmup")
        for n, (query, session) in enumerate(mix):
            hits = {}
            for side in ("windowed", "full") if n % 2 == 0 else ("full", "windowed"):
                with ranked_by(search_seam.WINDOW if side == "windowed" else FULL):
                    t = time.perf_counter()
                    hits[side] = await store.search(query, session_id=session)
                    (store_times if side == "windowed" else full_times).append(
                        time.perf_counter() - t
                    )
            same += hits["windowed"] == hits["full"]
            phrases = query.replace('"', " ").split()
            params = {f"p{i}": word for i, word in enumerate(phrases)}
            match = " && ".join(f"plainto_tsquery('simple', :p{i})" for i in range(len(phrases)))
            with engine.connect() as connection:
                t = time.perf_counter()
                connection.execute(text(RAW.format(match=match)), params).all()
                raw_times.append(time.perf_counter() - t)
    with engine.connect() as connection:
        sizes = connection.execute(
            text(
                "SELECT pg_total_relation_size('search_text'), "
                "pg_relation_size('ix_search_text_vector'), pg_database_size(current_database()), "
                "(SELECT count(*) FROM search_text)"
            )
        ).one()
    engine.dispose()
    return {
        "window": search_seam.WINDOW,
        "search_ms": median_ms(store_times),
        "search_p90_ms": statistics.quantiles(store_times, n=10)[-1] * 1000,
        "full_rank_ms": median_ms(full_times),
        "full_rank_p90_ms": statistics.quantiles(full_times, n=10)[-1] * 1000,
        "first_page_as_full_rank": same / len(mix),
        "raw_tsvector_ms": median_ms(raw_times),
        "search_text_with_indexes_mb": sizes[0] / 1e6,
        "gin_index_mb": sizes[1] / 1e6,
        "database_mb": sizes[2] / 1e6,
        "rows": sizes[3],
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    await build(args.url, args.sessions, args.nodes)
    for key, value in (await measure(args.url, args.queries)).items():
        print(f"  {key}: {value:.4g}")


if __name__ == "__main__":
    asyncio.run(main())
