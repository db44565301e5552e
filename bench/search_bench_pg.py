"""Search on PostgreSQL: ``store.search`` beside the bare ``tsvector`` query, and the index size.

Run: ``python bench/search_bench_pg.py URL [--sessions N] [--nodes N] [--queries N]`` with the URL
of an empty database (``postgresql+psycopg://...``; a throwaway server: ``.ci/postgres``). It
writes ``--sessions`` sessions of ``--nodes`` nodes through the store (the texts of
``search_bench.py``), unless the database already holds that many, then measures the median of
``await store.search(q)`` over the same query mix, beside the median of the bare statement on
the same connection pool (``@@`` on the GIN-indexed vector, ``ORDER BY ts_rank LIMIT 20``: no
join, no snippet, no records), and the sizes of ``search_text`` and its GIN index.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

from search_bench import median_ms, node_content, queries, vocabulary
from sqlalchemy import create_engine, text

from soong_store import SessionStore

RAW = """SELECT doc_id FROM search_text
WHERE to_tsvector('simple', body) @@ ({match})
ORDER BY ts_rank(to_tsvector('simple', body), {match}) DESC LIMIT 20"""


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
    store_times, raw_times = [], []
    async with SessionStore(url=url) as store:
        await store.search("warmup")
        for query, session in mix:
            t = time.perf_counter()
            await store.search(query, session_id=session)
            store_times.append(time.perf_counter() - t)
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
                "pg_relation_size('ix_search_text_tsv'), pg_database_size(current_database()), "
                "(SELECT count(*) FROM search_text)"
            )
        ).one()
    engine.dispose()
    return {
        "search_ms": median_ms(store_times),
        "raw_tsvector_ms": median_ms(raw_times),
        "search_p90_ms": statistics.quantiles(store_times, n=10)[-1] * 1000,
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
