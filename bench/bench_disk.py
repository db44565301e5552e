"""Disk per idle session in a shard, and what reading it costs: 1 KB shard pages against 4 KB.

Run: ``python bench/bench_disk.py [--sessions N] [--nodes-kb K] [--rounds R]``. Two homes are
built through the store, one with shard files of SQLite's 4096-byte pages (the baseline) and one
as the store makes them (``SHARD_PAGE_SIZE``): ``N`` sessions of 3 nodes (user, assistant, user),
each node's text ``K`` KB (0: one short sentence), moved out of the main file by the writer's
maintenance (a hot bound of 10). It prints, for each, the bytes per session of the shard files,
of the whole home (main file included, after the store's close), and, in a new store, the first
``context()`` of a shard session (attaching the shard) and of 49 more (each a first read of its
pair): medians of ``rounds``, the two homes in turns, and the ratios against the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from soong_store import SessionStore
from soong_store.backends.sqlite import files
from soong_store.catalog import lookup as catalog
from soong_store.catalog import moves, placement
from soong_store.store import run_read, run_write

SENTENCE = "a short message of an ordinary length, about the weather"


def _hot_count(connection: Any) -> tuple[int, int]:
    placed = placement.placements(connection)
    hot = sum(1 for file, _ in placed.values() if file == catalog.MAIN)
    return hot, len(placement.journaled_files(connection))


def _nothing(_connection: Any) -> None:
    """A write that writes nothing: it starts the writer, and with it the maintenance."""


async def build(home: Path, sessions: int, node_kb: int) -> list[str]:
    """``sessions`` sessions of 3 nodes, waited for until the writer has moved them to shards."""
    text = SENTENCE if node_kb == 0 else ("x" * 1023 + " ") * node_kb
    ids: list[str] = []
    async with SessionStore(home=home) as store:
        for _ in range(sessions):
            session = await store.create_session(cwd=str(home))
            for role in ("user", "assistant", "user"):
                content = [{"type": "text", "text": text}]
                await store.append_node(session.session_id, role, "message", content)
            ids.append(session.session_id)
        await run_write(store, _nothing)
        deadline = time.monotonic() + 600
        while True:
            hot, journaled = await run_read(store, _hot_count)
            if hot <= moves.LIMITS.hot and not journaled:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"moves did not settle: {hot} pairs still in the main file")
            await asyncio.sleep(0.05)
    return ids


def sizes(home: Path, sessions: int) -> tuple[float, float]:
    """KB per session of the shard files, and of every file under the home."""
    shard = sum(p.stat().st_size for p in (home / files.SHARD_FOLDER).glob("*"))
    whole = sum(p.stat().st_size for p in home.rglob("*") if p.is_file())
    return shard / sessions / 1024, whole / sessions / 1024


async def first_reads(home: Path, ids: list[str]) -> tuple[float, float]:
    """In a store opened for it, ms: the first ``context()`` of a shard session (the shard's
    attach included), and the median first ``context()`` of 49 more sessions of that shard."""
    async with SessionStore(home=home) as store:
        await store.list_sessions(limit=1)
        started = time.perf_counter()
        await store.context(ids[0])
        attach = time.perf_counter() - started
        times = []
        for sid in ids[1:50]:
            started = time.perf_counter()
            await store.context(sid)
            times.append(time.perf_counter() - started)
    return attach * 1000, statistics.median(times) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--nodes-kb", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    shipped = files.SHARD_PAGE_SIZE
    homes: dict[int, tuple[Path, list[str]]] = {}
    moves.LIMITS = moves.Limits(hot=10, shard=500, batch=50)
    for page in (4096, shipped):
        files.SHARD_PAGE_SIZE = page
        home = Path(tempfile.mkdtemp(prefix=f"disk-{page}-"))
        homes[page] = (home, await build(home, args.sessions, args.nodes_kb))
    files.SHARD_PAGE_SIZE = shipped
    reads: dict[int, list[tuple[float, float]]] = {page: [] for page in homes}
    for _ in range(args.rounds):
        for page, (home, ids) in homes.items():
            reads[page].append(await first_reads(home, ids))
    print(f"{args.sessions} idle sessions of 3 nodes of {args.nodes_kb or 'a sentence'} KB")
    print(
        "| shard page | shard KB/session | home KB/session | first read, attach included "
        "(ms, ratio) | next first reads (ms, ratio) |"
    )
    print("| --- | --- | --- | --- | --- |")
    base = [statistics.median(r[i] for r in reads[4096]) for i in (0, 1)]
    for page, (home, _) in homes.items():
        shard, whole = sizes(home, args.sessions)
        ms = [statistics.median(r[i] for r in reads[page]) for i in (0, 1)]
        cells = " | ".join(f"{m:.2f} ({m / b:.2f}x)" for m, b in zip(ms, base, strict=True))
        print(f"| {page} | {shard:.1f} | {whole:.1f} | {cells} |")


if __name__ == "__main__":
    asyncio.run(main())
