"""Search at scale: ``store.search`` beside the raw FTS5 query, indexing cost, index size.

Run: ``python bench/search_bench.py [--sessions N] [--nodes N] [--queries N] [--appends N]
[--only PART] [--window N]`` (parts: search, size, indexing, layouts; ``--only indexing`` needs
no home; ``--window``: rank that many matches at a time instead of the store's window)
(default 10,000 sessions of 50 nodes). The home is built once through the store's own write
path and cached outside the repository (``--cache DIR``, default
``~/.cache/soong-store-bench/search-<sessions>x<nodes>``); later runs reuse it. Then, in one run:

- **search**: the median and 90th percentile wall time of ``await store.search(q)`` over a
  fixed query mix (one common word, one rare word, two words, a quoted phrase, a word in one
  session), each query run twice in turn (the side going first alternating): as the store
  ranks, a window of matches at a time (``soong_store.backends.search.WINDOW``), and with a
  window no query fills (every match ranked at once: the order before windows), with the share
  of queries whose first page is the same both ways; beside the median of the bare FTS5
  statement for the same queries on a raw ``sqlite3`` connection to the same file (``MATCH`` +
  ``ORDER BY rank LIMIT 20``: no join, no snippet, no records), the median of half the mix
  narrowed to ``role="assistant"`` (a filter most nodes pass), and the medians of the mix's
  first ten common words alone, unfiltered and under each of :data:`COMMON_FILTERS`;
- **indexing**: per node, ``append_node`` of a text node and units of work of 50 nodes, with
  the index and with the session writer's search rows made none, on two fresh homes open at
  once that take turns by blocks of 25 appends or one unit (ratio of the sums, of wall and of
  process CPU time, and the bytes written);
- **size**: the pages of the index's tables (``dbstat``) against the whole file;
- **layouts**: the same texts (the first ``--layout-docs`` of the index) indexed on raw
  ``sqlite3`` as external content (the store's choice) and as contentless FTS5, each in a fresh
  WAL file, in batches of 50 rows per transaction: time per row, size, median query.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import soong_store.backends.search as search_seam
import soong_store.write.session_writer as session_writer
from soong_store import SessionStore

TOOLS = ["read_file", "grep", "run_tests", "edit_file", "list_dir", "web_search"]


def vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(size)]


def sentence(rng: random.Random, words: list[str], low: int, high: int) -> str:
    # Zipf-like: low ranks (common words) far more often than the tail.
    count = rng.randint(low, high)
    return " ".join(
        words[min(int(rng.paretovariate(1.1)) - 1, len(words) - 1)] for _ in range(count)
    )


def node_content(rng: random.Random, words: list[str], i: int) -> tuple[str, list[dict[str, Any]]]:
    kind = i % 5
    if kind == 0:
        return "user", [{"type": "text", "text": sentence(rng, words, 5, 40)}]
    if kind == 1:
        args = {"path": f"src/{rng.choice(words)}.py", "pattern": sentence(rng, words, 1, 3)}
        call = {"type": "tool_call", "tool_call_id": f"c{i}", "name": rng.choice(TOOLS),
                "arguments": args}  # fmt: skip
        return "assistant", [{"type": "text", "text": sentence(rng, words, 3, 20)}, call]
    if kind == 2:
        result = {"type": "tool_result", "tool_call_id": f"c{i - 1}",
                  "content": [{"type": "text", "text": sentence(rng, words, 20, 120)}]}  # fmt: skip
        return "tool", [result]
    return "assistant", [{"type": "text", "text": sentence(rng, words, 10, 80)}]


async def build(home: Path, sessions: int, nodes: int) -> None:
    rng = random.Random(19)
    words = vocabulary(rng)
    started = time.perf_counter()
    async with SessionStore(home=home) as store:
        for s in range(sessions):
            sid = (await store.create_session(cwd=str(home))).session_id
            async with store.transaction(sid) as tx:
                for i in range(nodes):
                    role, content = node_content(rng, words, i)
                    tx.add_node(role, "message", content)
            if (s + 1) % max(1, sessions // 20) == 0:
                print(f"  built {s + 1}/{sessions} sessions, {time.perf_counter() - started:.0f} s")


def queries(
    rng: random.Random, words: list[str], count: int, sid: str
) -> list[tuple[str, str | None]]:
    mix: list[tuple[str, str | None]] = []
    for i in range(count):
        kind = i % 5
        if kind == 0:
            mix.append((words[rng.randint(0, 20)], None))  # common
        elif kind == 1:
            mix.append((words[rng.randint(2_000, 19_999)], None))  # rare
        elif kind == 2:
            mix.append((f"{words[rng.randint(0, 200)]} {words[rng.randint(0, 2_000)]}", None))
        elif kind == 3:
            mix.append((f'"{words[rng.randint(0, 50)]} {words[rng.randint(0, 50)]}"', None))
        else:
            mix.append((words[rng.randint(0, 500)], sid))
    return mix


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def measure_search(home: Path, mix: list[tuple[str, str | None]]) -> dict[str, float]:
    from soong_store.backends.sqlite.search import match_expression
    from soong_store.model.search_query import parse_query

    raw = sqlite3.connect(home / "sessions.sqlite")
    store_times, full_times, raw_times, same = [], [], [], 0
    async with SessionStore(home=home) as store:
        await store.search("warmup")
        for n, (query, sid) in enumerate(mix):
            hits = {}
            for side in ("windowed", "full") if n % 2 == 0 else ("full", "windowed"):
                with ranked_by(search_seam.WINDOW if side == "windowed" else FULL):
                    t = time.perf_counter()
                    hits[side] = await store.search(query, session_id=sid)
                    (store_times if side == "windowed" else full_times).append(
                        time.perf_counter() - t
                    )
            same += hits["windowed"] == hits["full"]
            expression = match_expression(parse_query(query))
            sql = "SELECT rowid FROM search_fts WHERE search_fts MATCH ? ORDER BY rank LIMIT 20"
            params: tuple[Any, ...] = (expression,)
            if sid is not None:
                sql = (
                    "SELECT f.rowid FROM search_fts f JOIN search_text t ON t.doc_id = f.rowid"
                    " WHERE search_fts MATCH ? AND t.session_id = ? ORDER BY rank LIMIT 20"
                )
                params = (expression, sid)
            t = time.perf_counter()
            raw.execute(sql, params).fetchall()
            raw_times.append(time.perf_counter() - t)
        filtered = []
        for query, _sid in mix[: len(mix) // 2]:
            t = time.perf_counter()
            await store.search(query, role="assistant")
            filtered.append(time.perf_counter() - t)
        common = [query for i, (query, _sid) in enumerate(mix) if i % 5 == 0][:10]
        narrowed: dict[str, list[float]] = {}
        for name, kwargs in COMMON_FILTERS.items():
            for query in common:
                t = time.perf_counter()
                await store.search(query, **kwargs)
                narrowed.setdefault(name, []).append(time.perf_counter() - t)
    raw.close()
    common_ms = {f"common_{name}_ms": median_ms(times) for name, times in narrowed.items()}
    return {"window": search_seam.WINDOW, "search_ms": median_ms(store_times),
            "search_p90_ms": statistics.quantiles(store_times, n=10)[-1] * 1000,
            "full_rank_ms": median_ms(full_times),
            "full_rank_p90_ms": statistics.quantiles(full_times, n=10)[-1] * 1000,
            "first_page_as_full_rank": same / len(mix), "raw_fts5_ms": median_ms(raw_times),
            "search_role_filter_ms": median_ms(filtered), **common_ms}  # fmt: skip


FULL = 1 << 62
"""A window no query fills: every match ranked at once (the order before windows)."""


@contextmanager
def ranked_by(window: int) -> Iterator[None]:
    """Searches in the block rank ``window`` matches at a time (the store reads it per search)."""
    kept = search_seam.WINDOW
    search_seam.WINDOW = window  # type: ignore[misc]
    try:
        yield
    finally:
        search_seam.WINDOW = kept  # type: ignore[misc]


COMMON_FILTERS: dict[str, dict[str, str]] = {
    "unfiltered": {},
    "role_assistant": {"role": "assistant"},
    "node_type_message": {"node_type": "message"},
    "agent_type_sub": {"agent_type": "sub"},
}
"""Filters of the common-word figures: none, two that most rows pass, one that none passes
(the home has no sub-agents): a filtered search joins every match before filtering."""


@contextmanager
def index_off() -> Iterator[None]:
    real: Callable[..., Any] = session_writer.search_row
    session_writer.search_row = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        session_writer.search_row = real  # type: ignore[assignment]


async def measure_indexing(appends: int, rounds: int, block: int = 25) -> dict[str, float]:
    """Per node: ``append_node`` one at a time, and units of work of 50 nodes, with and without.

    Both homes are open at once and take turns, ``block`` appends (or one unit) at a time, the
    side going first alternating: each block with the index has a block without it run right
    beside it, under the same load of other processes. Wall time and process CPU time (the
    writer's thread included) are summed per side over ``rounds`` fresh pairs of homes; CPU
    time moves less with that load, and the bytes the process writes (WAL and checkpoints,
    Linux's ``/proc/self/io``) not at all. Each store first writes a block and a unit untimed
    (its statements are compiled at their first use). Also the median over turns of the
    wall-time ratio of the pair: a checkpoint's wait on the disk lands in one turn, and moves
    the sums more.
    """
    rng = random.Random(7)
    words = vocabulary(rng, 5_000)
    texts = [sentence(rng, words, 10, 60) for _ in range(appends)]
    contents = [node_content(rng, words, i) for i in range(50)]
    units = max(1, appends // 50)
    totals: dict[str, float] = {}
    pairs: dict[str, list[float]] = {}
    sides = ("with", "without")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            async with (
                SessionStore(home=Path(tmp) / f"with{r}") as with_store,
                SessionStore(home=Path(tmp) / f"without{r}") as without_store,
            ):
                stores = dict(zip(sides, (with_store, without_store), strict=True))
                sid = {k: (await v.create_session(cwd=tmp)).session_id for k, v in stores.items()}
                unit_sids = {
                    k: [(await v.create_session(cwd=tmp)).session_id for _ in range(units)]
                    for k, v in stores.items()
                }

                for side, store in stores.items():  # statements compiled once per store
                    with index_off() if side == "without" else _nothing():
                        warm = (await store.create_session(cwd=tmp)).session_id
                        await _appends(store, warm, texts[:block])
                        await _unit(store, warm, contents)
                turns = [("append", start) for start in range(0, appends, block)]
                turns += [("unit50", i) for i in range(units)]
                for n, (kind, arg) in enumerate(turns):
                    spent_wall: dict[str, float] = {}
                    for side in sides if (n + r) % 2 == 0 else sides[::-1]:
                        with index_off() if side == "without" else _nothing():
                            t, c, w = time.perf_counter(), time.process_time(), _written()
                            if kind == "append":
                                await _appends(stores[side], sid[side], texts[arg : arg + block])
                            else:
                                await _unit(stores[side], unit_sids[side][arg], contents)
                            for clock, spent in (
                                ("wall", time.perf_counter() - t),
                                ("cpu", time.process_time() - c),
                                ("written", float(_written() - w)),
                            ):
                                key = f"{kind}_{clock}_{side}"
                                totals[key] = totals.get(key, 0.0) + spent
                            spent_wall[side] = time.perf_counter() - t
                    pairs.setdefault(kind, []).append(spent_wall["with"] / spent_wall["without"])
    out: dict[str, float] = {}
    for kind, nodes in (("append", appends * rounds), ("unit50", 50 * units * rounds)):
        for clock in ("wall", "cpu"):
            with_index = totals[f"{kind}_{clock}_with"] / nodes
            without = totals[f"{kind}_{clock}_without"] / nodes
            out[f"{kind}_{clock}_with_index_us"] = with_index * 1e6
            out[f"{kind}_{clock}_without_index_us"] = without * 1e6
            out[f"{kind}_{clock}_ratio"] = with_index / without
        out[f"{kind}_wall_ratio_median_of_turns"] = statistics.median(pairs[kind])
        if _written() >= 0:
            for side in sides:
                out[f"{kind}_kb_written_{side}_index"] = (
                    totals[f"{kind}_written_{side}"] / nodes / 1024
                )
    return out


async def _appends(store: SessionStore, sid: str, bodies: list[str]) -> None:
    for body in bodies:
        await store.append_node(sid, "user", "message", [{"type": "text", "text": body}])


async def _unit(store: SessionStore, sid: str, contents: list[tuple[str, Any]]) -> None:
    async with store.transaction(sid) as tx:
        for role, content in contents:
            tx.add_node(role, "message", content)


def _written() -> int:
    """Bytes this process has written so far (``wchar``; -1 where there is no such count)."""
    try:
        with open("/proc/self/io") as io:
            for line in io:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def measure_size(home: Path) -> dict[str, float]:
    raw = sqlite3.connect(home / "sessions.sqlite")
    try:
        index = raw.execute(
            "SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'search%' OR name LIKE "
            "'sqlite_autoindex_search%' OR name LIKE 'ix_search%' OR name LIKE 'uq_search%'"
        ).fetchone()[0]
        text = raw.execute("SELECT SUM(pgsize) FROM dbstat WHERE name = 'search_text'").fetchone()[
            0
        ]
        docs = raw.execute("SELECT COUNT(*), SUM(LENGTH(body)) FROM search_text").fetchone()
    finally:
        raw.close()
    return {"index_mb": index / 1e6, "search_text_table_mb": text / 1e6,
            "file_mb": os.path.getsize(home / "sessions.sqlite") / 1e6, "rows": docs[0],
            "text_mb": (docs[1] or 0) / 1e6}  # fmt: skip


LAYOUTS = {
    "external": (
        "CREATE TABLE docs (doc_id INTEGER PRIMARY KEY, session_id TEXT, node_id TEXT, body TEXT)",
        "CREATE VIRTUAL TABLE f USING fts5(body, content='docs', content_rowid='doc_id')",
        "CREATE TRIGGER ai AFTER INSERT ON docs BEGIN "
        "INSERT INTO f(rowid, body) VALUES (new.doc_id, new.body); END",
    ),
    "contentless": (
        "CREATE TABLE docs (doc_id INTEGER PRIMARY KEY, session_id TEXT, node_id TEXT)",
        "CREATE VIRTUAL TABLE f USING fts5(body, content='')",
    ),
}


def measure_layouts(home: Path, docs: int, mix: list[tuple[str, str | None]]) -> dict[str, Any]:
    from soong_store.backends.sqlite.search import match_expression
    from soong_store.model.search_query import parse_query

    source = sqlite3.connect(home / "sessions.sqlite")
    rows = source.execute(
        "SELECT doc_id, session_id, node_id, body FROM search_text ORDER BY doc_id LIMIT ?", (docs,)
    ).fetchall()
    source.close()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, ddl in LAYOUTS.items():
            path = Path(tmp) / f"{name}.sqlite"
            con = sqlite3.connect(path, isolation_level=None)
            con.execute("PRAGMA journal_mode = WAL")
            con.execute("PRAGMA synchronous = NORMAL")
            for statement in ddl:
                con.execute(statement)
            t = time.perf_counter()
            for start in range(0, len(rows), 50):
                con.execute("BEGIN IMMEDIATE")
                for doc_id, sid, nid, body in rows[start : start + 50]:
                    if name == "external":
                        con.execute(
                            "INSERT INTO docs VALUES (?, ?, ?, ?)", (doc_id, sid, nid, body)
                        )
                    else:
                        con.execute("INSERT INTO docs VALUES (?, ?, ?)", (doc_id, sid, nid))
                        con.execute("INSERT INTO f(rowid, body) VALUES (?, ?)", (doc_id, body))
                con.execute("COMMIT")
            per_row = (time.perf_counter() - t) / max(1, len(rows))
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            times = []
            for query, _sid in mix:
                expression = match_expression(parse_query(query))
                t = time.perf_counter()
                con.execute(
                    "SELECT rowid FROM f WHERE f MATCH ? ORDER BY rank LIMIT 20", (expression,)
                ).fetchall()
                times.append(time.perf_counter() - t)
            con.close()
            out[name] = {
                "rows": len(rows),
                "insert_us_per_row": per_row * 1e6,
                "size_mb": path.stat().st_size / 1e6,
                "query_ms": median_ms(times),
            }
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--appends", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--layout-docs", type=int, default=100_000)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--window", type=int, default=None, help="rank this many at a time")
    parser.add_argument(
        "--only", choices=PARTS, action="append", help="run this part alone (may repeat)"
    )
    args = parser.parse_args()
    parts = args.only or list(PARTS)
    if args.window is not None:
        search_seam.WINDOW = args.window  # type: ignore[misc]
    if parts == ["indexing"]:  # fresh homes only: no cached home needed
        show({"indexing": await measure_indexing(args.appends, args.rounds)})
        return
    cache = args.cache or Path.home() / ".cache" / "soong-store-bench"
    home = cache / f"search-{args.sessions}x{args.nodes}"
    if not (home / "built").exists():
        print(f"building {args.sessions} sessions x {args.nodes} nodes in {home}")
        home.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        await build(home, args.sessions, args.nodes)
        (home / "built").write_text(f"{time.perf_counter() - t:.0f} s\n")
    print(f"home {home} (built in {(home / 'built').read_text().strip()})")
    words = vocabulary(random.Random(19))
    probe = sqlite3.connect(home / "sessions.sqlite")
    sid = probe.execute("SELECT session_id FROM sessions ORDER BY session_id LIMIT 1").fetchone()[0]
    probe.close()
    mix = queries(random.Random(3), words, args.queries, sid)
    results: dict[str, dict[str, Any]] = {}
    if "search" in parts:
        results["search"] = await measure_search(home, mix)
    if "size" in parts:
        results["size"] = measure_size(home)
    if "indexing" in parts:
        results["indexing"] = await measure_indexing(args.appends, args.rounds)
    if "layouts" in parts:
        results["layouts"] = measure_layouts(home, args.layout_docs, mix)
    show(results)


PARTS = ("search", "size", "indexing", "layouts")


def show(results: dict[str, dict[str, Any]]) -> None:
    for part, figures in results.items():
        print(f"{part}:")
        for key, value in figures.items():
            if isinstance(value, dict):
                shown = ", ".join(f"{k} {v:.3g}" for k, v in value.items())
                print(f"  {key}: {shown}")
            else:
                print(f"  {key}: {value:.4g}")


if __name__ == "__main__":
    asyncio.run(main())
