"""The PostgreSQL row: the same calls on a PostgreSQL store beside the SQLite store, in one run.

Given ``--pg-url`` (a database the benchmark may fill: a throwaway one), each figure runs one
workload on both stores, interleaved in rounds: sequential appends, 8 coroutines appending to 8
sessions, the active path of a deep chain and the context tail of 20, both read under the
store's path cache (PostgreSQL keeps none) so that each read goes to the database. The baseline
is the SQLite store, not raw SQLite: the ratio says what the server costs against the file.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from functools import partial
from pathlib import Path

from _harness import Figure, compare, interleave, median
from _reads import build_chain
from _writes import Items
from peers._common import CONCURRENCY

from soong_store import SessionStore
from soong_store.read import session_reads as reads
from soong_store.store import run_read

TAIL = 20


async def _sequential(store: SessionStore, items: Items) -> float:
    sid = (await store.create_session(cwd=str(store.home))).session_id
    await store.append_node(sid, "user", "message", items.content[0])  # the pair exists
    begin = time.perf_counter()
    for content in items.content:
        await store.append_node(sid, "user", "message", content)
    return (time.perf_counter() - begin) / len(items.content)


async def _concurrent(store: SessionStore, items: Items) -> float:
    sids = []
    for _ in range(CONCURRENCY):
        sid = (await store.create_session(cwd=str(store.home))).session_id
        await store.append_node(sid, "user", "message", items.content[0])
        sids.append(sid)

    async def writer(sid: str) -> None:
        for content in items.content:
            await store.append_node(sid, "user", "message", content)

    begin = time.perf_counter()
    await asyncio.gather(*(writer(sid) for sid in sids))
    return (time.perf_counter() - begin) / (len(items.content) * CONCURRENCY)


async def _reads_of(store: SessionStore, sid: str, limit: int | None, samples: int) -> float:
    query = partial(reads.active_path, session_id=sid, node_id=None, limit=limit)
    took = []
    for _ in range(samples):
        begin = time.perf_counter()
        await run_read(store, query)
        took.append(time.perf_counter() - begin)
    return median(took)


async def postgresql(
    rounds: int, url: str, appends: int, depth: int, context_nodes: int
) -> list[Figure]:
    """The four figures, PostgreSQL against SQLite (``url``: the PostgreSQL database)."""
    items = Items.make(appends)
    per_writer = Items.make(max(1, appends // CONCURRENCY))
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        sqlite = SessionStore(home=Path(tmp) / "sqlite")
        pg = SessionStore(home=Path(tmp) / "pg", url=url)
        async with sqlite, pg:
            stores = {"postgresql": pg, "sqlite": sqlite}
            sequential = await interleave(
                rounds, {name: partial(_sequential, s, items) for name, s in stores.items()}
            )
            concurrent = await interleave(
                rounds, {name: partial(_concurrent, s, per_writer) for name, s in stores.items()}
            )
            chains = {name: await build_chain(s, depth) for name, s in stores.items()}
            tails = {name: await build_chain(s, context_nodes) for name, s in stores.items()}
            path = await interleave(
                rounds,
                {name: partial(_reads_of, s, chains[name], None, 5) for name, s in stores.items()},
            )
            tail = await interleave(
                rounds,
                {name: partial(_reads_of, s, tails[name], TAIL, 20) for name, s in stores.items()},
            )
    target = "— (what the server costs)"

    def figure(name: str, workload: str, samples: dict[str, list[float]], unit: str) -> Figure:
        return compare(
            "postgresql", name, workload, samples, "postgresql", "sqlite", target=target, unit=unit
        )

    return [
        figure(
            "PostgreSQL: sequential append",
            f"{appends:,} awaited append_node, durability normal (per append)",
            sequential,
            "s/item",
        ),
        figure(
            "PostgreSQL: concurrent append",
            f"{CONCURRENCY} coroutines × {len(per_writer.content):,} to {CONCURRENCY} sessions "
            "(per append)",
            concurrent,
            "s/item",
        ),
        figure(
            f"PostgreSQL: active path {depth:,}",
            f"the path of a {depth:,}-deep chain, read from the database (no cache)",
            path,
            "s",
        ),
        figure(
            "PostgreSQL: context tail",
            f"the last {TAIL} of a {context_nodes:,}-node path, read from the database",
            tail,
            "s",
        ),
    ]
