"""The read rows: the active path, the context's tail, the context after an append, a timeline page.

Each session is built through the public API (units of work of many nodes or events), then read
by the store and by :mod:`_raw`'s queries on the store's own file, interleaved in rounds.
"""

from __future__ import annotations

import inspect
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from _harness import Figure, compare, interleave, median, timed, timed_sync
from _raw import active_path as raw_active_path
from _raw import connect_ro, locate, timeline_page
from _writes import Items
from peers._common import TAIL, item_role

from soong_store import SessionStore
from soong_store.read import session_reads as reads
from soong_store.store import run_read

BATCH = 1000
SIDE_EVERY = 10
TOKENS = 50
HAS_LIMIT = "limit" in inspect.signature(SessionStore.context).parameters
NEEDS_LIMIT = (
    "needs limit=: SessionStore.context has no limit= parameter yet, so the store's figure is "
    "context(sid) of the whole path"
)


async def build_chain(store: SessionStore, depth: int, side_every: int = SIDE_EVERY) -> str:
    """A session whose active path is ``depth`` nodes, with a two-node side branch every tenth.

    Returns the session id; the active node is the chain's tip.
    """
    items = Items.make(64)
    sid = (await store.create_session(cwd=str(store.home))).session_id
    parent: str | None = None
    made = 0
    while made < depth:
        async with store.transaction(sid) as tx:
            for _ in range(min(BATCH, depth - made)):
                content = items.content[made % 64]
                node = tx.add_node(
                    item_role(made), "message", content, parent_id=parent, token_count=TOKENS
                )
                if parent is not None and made % side_every == 0:
                    side = tx.add_node("user", "message", content, parent_id=parent)
                    tx.add_node("assistant", "message", content, parent_id=side)
                parent = node
                made += 1
    await store.switch_node(sid, parent)
    return sid


def _checked(call: Callable[[], Awaitable[Any]], size: int) -> Callable[[], Awaitable[Any]]:
    async def run() -> Any:
        got = await call()
        nodes = got.nodes if hasattr(got, "nodes") else got
        if len(nodes) != size:
            raise RuntimeError(f"read {len(nodes)} items, expected {size}")
        return got

    return run


async def _one_path(store: SessionStore, rounds: int, depth: int) -> list[Figure]:
    sid = await build_chain(store, depth)
    where = locate(store.home, sid)
    connection = connect_ro(where.path)
    samples = max(1, min(10, 30_000 // depth))
    store_call = _checked(lambda: store.active_path(sid), depth)
    # The query under the cache, run as the store runs a read (its reader thread, one snapshot).
    query = partial(reads.active_path, session_id=sid, node_id=None, limit=None)
    uncached_call = _checked(lambda: run_read(store, query), depth)

    def raw_call() -> None:
        got = raw_active_path(connection, where, sid)
        if len(got) != depth:
            raise RuntimeError(f"raw path of {len(got)} nodes, expected {depth}")

    await store_call()
    await uncached_call()
    raw_call()
    got = await interleave(
        rounds,
        {
            "store": lambda: timed(store_call, samples),
            "uncached": lambda: timed(uncached_call, samples),
            "raw": lambda: timed_sync(raw_call, samples),
        },
    )
    connection.close()
    workload = (
        f"active_path of a {depth:,}-deep chain, a side branch every {SIDE_EVERY}th node "
        f"(median of {samples} reads per round)"
    )
    return [
        compare(
            "active_path",
            f"active path {depth:,}",
            workload + "; repeated reads, served by the path cache",
            got,
            "store",
            "raw",
            target="≤ 1.5x raw CTE + decode",
            max_time_ratio=1.5,
        ),
        compare(
            "active_path",
            f"active path {depth:,}, uncached",
            workload + "; the store's query without its cache (a first read)",
            got,
            "uncached",
            "raw",
            target="≤ 1.5x raw CTE + decode",
            max_time_ratio=1.5,
        ),
    ]


async def active_path(rounds: int, depths: list[int]) -> list[Figure]:
    """``active_path`` of deep chains against the recursive CTE + decode in raw ``sqlite3``."""
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        async with SessionStore(home=Path(tmp) / "home") as store:
            return [figure for depth in depths for figure in await _one_path(store, rounds, depth)]


async def context_tail(
    rounds: int, nodes: int, sdk: Callable[[], float] | None, sdk_missing: str
) -> list[Figure]:
    """``context(sid, limit=20)`` of a long path: ≤ 1 ms, and ≤ the SDK's ``get_items(limit=20)``.

    ``sdk`` runs one round of the OpenAI Agents SDK's tail read (in its venv), or is ``None``
    with ``sdk_missing`` saying why.
    """
    reads = 20
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        home = Path(tmp) / "home"
        async with SessionStore(home=home) as store:
            sid = await build_chain(store, nodes)
            where = locate(home, sid)
            connection = connect_ro(where.path)
            if HAS_LIMIT:
                call = _checked(lambda: store.context(sid, limit=TAIL), TAIL)
            else:
                call = _checked(lambda: store.context(sid), nodes)
            await call()
            sides: dict[str, Any] = {
                "store": lambda: timed(call, reads),
                "raw": lambda: timed_sync(
                    lambda: raw_active_path(connection, where, sid, steps=TAIL), reads
                ),
            }
            if sdk is not None:
                sides["sdk"] = sdk
            got = await interleave(rounds, sides)
            connection.close()
    notes = [] if HAS_LIMIT else [NEEDS_LIMIT]
    workload = f"context(sid, limit={TAIL}) on a {nodes:,}-node path"
    raw_note = f"raw: the CTE walking {TAIL} steps up from the active node + decode"
    figures = [
        compare(
            "context_tail",
            "context tail",
            workload,
            got,
            "store",
            "raw",
            target="≤ 1 ms",
            max_value=0.001,
            notes=[*notes, raw_note],
        ),
        compare(
            "context_tail",
            "context tail vs SDK",
            workload + f"; the SDK: get_items(limit={TAIL}) of {nodes:,} items",
            got,
            "store",
            "sdk" if sdk is not None else None,
            target=f"≤ SQLiteSession.get_items(limit={TAIL})",
            max_time_ratio=1.0,
            notes=notes if sdk is not None else [*notes, sdk_missing],
        ),
    ]
    figures[1].baseline_name = "SQLiteSession" if sdk is not None else ""
    return figures


async def context_after_append(rounds: int, nodes: int) -> list[Figure]:
    """``context()`` right after one more append, on a long path (the append is not timed)."""
    reads = 20
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        home = Path(tmp) / "home"
        async with SessionStore(home=home) as store:
            sid = await build_chain(store, nodes)
            where = locate(home, sid)
            connection = connect_ro(where.path)
            content = Items.make(1).content[0]
            await store.context(sid)

            async def store_side() -> float:
                took = []
                for _ in range(reads):
                    await store.append_node(sid, "user", "message", content)
                    took.append(await timed(lambda: store.context(sid), 1))
                return median(took)

            async def raw_side() -> float:
                took = []
                for _ in range(reads):
                    await store.append_node(sid, "user", "message", content)
                    took.append(timed_sync(lambda: raw_active_path(connection, where, sid), 1))
                return median(took)

            got = await interleave(rounds, {"store": store_side, "raw": raw_side})
            connection.close()
    return [
        compare(
            "context_after_append",
            "context after an append",
            f"context() of a {nodes:,}-node session right after one more append_node "
            f"(the path grows by one per read)",
            got,
            "store",
            "raw",
            target="≤ 0.5 ms",
            max_value=0.0005,
            notes=["raw: the whole path by CTE + decode (what a read without a cache costs)"],
        )
    ]


async def context_budget(rounds: int, nodes: int, max_tokens: int = 8000) -> list[Figure]:
    """``context(max_tokens=)`` right after one more append, against ``context()`` the same way.

    Both sides append a node without a ``token_count`` (so it is estimated) before each timed
    read; the budget holds the last ~160 of the path's 50-token nodes.
    """
    reads = 20
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        async with SessionStore(home=Path(tmp) / "home") as store:
            sid = await build_chain(store, nodes)
            content = Items.make(1).content[0]
            await store.context(sid, max_tokens=max_tokens)

            def side(**bound: int) -> Callable[[], Awaitable[float]]:
                async def run() -> float:
                    took = []
                    for _ in range(reads):
                        await store.append_node(sid, "user", "message", content)
                        took.append(await timed(lambda: store.context(sid, **bound), 1))
                    return median(took)

                return run

            view = await store.context(sid, max_tokens=max_tokens)
            if not 0 < view.token_count <= max_tokens or not view.omitted:
                raise RuntimeError(f"a budgeted read of {view.token_count} tokens")
            got = await interleave(
                rounds, {"budgeted": side(max_tokens=max_tokens), "context": side()}
            )
    return [
        compare(
            "context_budget",
            "context within a budget",
            f"context(max_tokens={max_tokens:,}) of a {nodes:,}-node session right after one "
            "more append_node, against context() the same way",
            got,
            "budgeted",
            "context",
            target="≤ 1.2x",
            max_time_ratio=1.2,
        )
    ]


async def timeline(rounds: int, events: int, page: int = 100) -> list[Figure]:
    """``timeline(sid, after_seq=s, limit=100)`` at spread-out cursors of a long timeline."""
    reads = 20
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        home = Path(tmp) / "home"
        async with SessionStore(home=home) as store:
            sid = (await store.create_session(cwd=tmp)).session_id
            made = 0
            while made < events:
                async with store.transaction(sid) as tx:
                    for _ in range(min(BATCH * 2, events - made)):
                        tx.add_event("tool_progress", payload={"i": made, "note": "a step"})
                        made += 1
            where = locate(home, sid)
            connection = connect_ro(where.path)
            cursors = [(k * 7919) % (events - page) for k in range(reads)]

            async def store_side() -> float:
                took = []
                for cursor in cursors:
                    begin = time.perf_counter()
                    got = await store.timeline(sid, after_seq=cursor, limit=page)
                    took.append(time.perf_counter() - begin)
                    if len(got) != page:
                        raise RuntimeError(f"timeline gave {len(got)} events, expected {page}")
                return median(took)

            def raw_side() -> float:
                took = []
                for cursor in cursors:
                    begin = time.perf_counter()
                    got = timeline_page(connection, where, sid, cursor, page)
                    took.append(time.perf_counter() - begin)
                    if len(got) != page:
                        raise RuntimeError(f"raw page of {len(got)} events, expected {page}")
                return median(took)

            await store_side()
            raw_side()
            got = await interleave(rounds, {"store": store_side, "raw": raw_side})
            connection.close()
    return [
        compare(
            "timeline_page",
            "timeline page",
            f"{page} events after a seq in a {events:,}-event session ({reads} cursors per round)",
            got,
            "store",
            "raw",
            target="≤ 1.5x raw",
            max_time_ratio=1.5,
        )
    ]
