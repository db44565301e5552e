"""Search at scale: ``store.search`` beside the raw FTS5 query, indexing cost, index size.

Run: ``python bench/search_bench.py [--sessions N] [--nodes N] [--queries N] [--appends N]``
(default 10,000 sessions of 50 nodes). The home is built once through the store's own write
path and cached outside the repository (``--cache DIR``, default
``~/.cache/soong-store-bench/search-<sessions>x<nodes>``); later runs reuse it. Then, in one run:

- **search**: the median wall time of ``await store.search(q)`` over a fixed query mix (one
  common word, one rare word, two words, a quoted phrase, a word in one session), beside the
  median of the bare FTS5 statement for the same queries on a raw ``sqlite3`` connection to
  the same file (``MATCH`` + ``ORDER BY rank LIMIT 20``: no join, no snippet, no records),
  and the median of half the mix narrowed to ``role="assistant"`` (a filter most nodes pass);
- **indexing**: per node, ``append_node`` of a text node and units of work of 50 nodes, on a
  fresh home, with the index and with the session writer's search rows made none, interleaved
  in rounds (ratio of medians, of wall and of process CPU time);
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

import soong_store.sql.session_writer as session_writer
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
    from soong_store.search.fts5 import match_expression
    from soong_store.search.query import parse_query

    raw = sqlite3.connect(home / "sessions.sqlite")
    store_times, raw_times = [], []
    async with SessionStore(home=home) as store:
        await store.search("warmup")
        for query, sid in mix:
            t = time.perf_counter()
            await store.search(query, session_id=sid)
            store_times.append(time.perf_counter() - t)
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
    raw.close()
    return {"search_ms": median_ms(store_times), "raw_fts5_ms": median_ms(raw_times),
            "search_p90_ms": statistics.quantiles(store_times, n=10)[-1] * 1000,
            "search_role_filter_ms": median_ms(filtered)}  # fmt: skip


@contextmanager
def index_off() -> Iterator[None]:
    real: Callable[..., Any] = session_writer.search_row
    session_writer.search_row = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        session_writer.search_row = real  # type: ignore[assignment]


async def measure_indexing(appends: int, rounds: int) -> dict[str, float]:
    """Per node: ``append_node`` one at a time, and units of work of 50 nodes, with and without.

    Wall time and process CPU time (the writer's thread included) of each; CPU time moves less
    with the load of other processes on a shared machine, and the bytes the process writes
    (WAL and checkpoints, Linux's ``/proc/self/io``) not at all.
    """
    rng = random.Random(7)
    words = vocabulary(rng, 5_000)
    texts = [sentence(rng, words, 10, 60) for _ in range(appends)]
    contents = [node_content(rng, words, i) for i in range(50)]
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    written: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for side in ["with", "without"] if r % 2 == 0 else ["without", "with"]:
                home = Path(tmp) / f"{side}{r}"
                async with SessionStore(home=home) as store:
                    sid = (await store.create_session(cwd=tmp)).session_id
                    units = [(await store.create_session(cwd=tmp)).session_id
                             for _ in range(max(1, appends // 50))]  # fmt: skip
                    with index_off() if side == "without" else _nothing():
                        t, c, w = time.perf_counter(), time.process_time(), _written()
                        for body in texts:
                            await store.append_node(sid, "user", "message",
                                                    [{"type": "text", "text": body}])  # fmt: skip
                        _add(wall, cpu, f"append_{side}", t, c, appends)
                        written.setdefault(f"append_{side}", []).append((_written() - w) / appends)
                        t, c, w = time.perf_counter(), time.process_time(), _written()
                        for unit in units:
                            async with store.transaction(unit) as tx:
                                for role, content in contents:
                                    tx.add_node(role, "message", content)
                        _add(wall, cpu, f"unit50_{side}", t, c, 50 * len(units))
                        written.setdefault(f"unit50_{side}", []).append(
                            (_written() - w) / (50 * len(units))
                        )
    out: dict[str, float] = {}
    for kind in ("append", "unit50"):
        for clock, samples in (("wall", wall), ("cpu", cpu)):
            with_index = statistics.median(samples[f"{kind}_with"])
            without = statistics.median(samples[f"{kind}_without"])
            out[f"{kind}_{clock}_with_index_us"] = with_index * 1e6
            out[f"{kind}_{clock}_without_index_us"] = without * 1e6
            out[f"{kind}_{clock}_ratio"] = with_index / without
        if _written() >= 0:
            for side in ("with", "without"):
                out[f"{kind}_kb_written_{side}_index"] = (
                    statistics.median(written[f"{kind}_{side}"]) / 1024
                )
    return out


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


def _add(
    wall: dict[str, list[float]], cpu: dict[str, list[float]], key: str, t: float, c: float, n: int
) -> None:
    wall.setdefault(key, []).append((time.perf_counter() - t) / n)
    cpu.setdefault(key, []).append((time.process_time() - c) / n)


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
    from soong_store.search.fts5 import match_expression
    from soong_store.search.query import parse_query

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
    args = parser.parse_args()
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
    results = {
        "search": await measure_search(home, mix),
        "size": measure_size(home),
        "indexing": await measure_indexing(args.appends, args.rounds),
        "layouts": measure_layouts(home, args.layout_docs, mix),
    }
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
