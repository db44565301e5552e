"""Search where every hit ties on score: the page's time and the memory it takes.

Run: ``python bench/search_ties_bench.py [--ties N] [--url URL] [--window N]`` (default
200,000 nodes that each say "continue", in sessions of 1,000; SQLite in a home cached outside
the repository, ``--cache DIR``, default ``~/.cache/soong-store-bench/ties-<N>``; or the
PostgreSQL database at ``--url``, which it fills once and reuses). Equal short texts ("ok",
"continue", a repeated tool output) are common in agent transcripts, and every one of them
scores the same, so the page is decided by time alone among all of them. ``--window N`` ranks
that many matches at a time instead of the store's window
(``soong_store.backends.search.WINDOW``; a number larger than the ties ranks them all at once,
as before windows).

In a fresh process (so that the build's memory is not counted), after the store's open and one
search of another word: the median wall time of ``store.search("continue")`` (the first page of
20), of a page at offset ``N // 2`` and of the last page, beside the bare FTS5 statement on a
raw ``sqlite3`` connection to the same file (``MATCH`` + ``ORDER BY rank LIMIT 20``: no join,
no snippet, ties in FTS5's own order; SQLite only); and how much the process's peak resident
memory (``VmHWM``) grew over those searches.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import soong_store.backends.search as search_seam
from soong_store import SessionStore, TextBlock

WORD = "continue"
PER_SESSION = 1_000


def store_of(home: Path, url: str | None) -> SessionStore:
    return SessionStore(home=home, url=url)


async def build(home: Path, url: str | None, ties: int) -> None:
    started = time.perf_counter()
    async with store_of(home, url) as store:
        for first in range(0, ties, PER_SESSION):
            sid = (await store.create_session(cwd=str(home))).session_id
            async with store.transaction(sid) as tx:
                for _ in range(min(PER_SESSION, ties - first)):
                    tx.add_node("user", "message", [TextBlock(text=WORD)])
            if (first // PER_SESSION) % 20 == 19:
                print(f"  built {first + PER_SESSION} nodes, {time.perf_counter() - started:.0f} s")
        await store.append_node(sid, "user", "message", [TextBlock(text="warmup")])
        await store.search("warmup")  # the index takes every row in


def peak_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


async def measure(home: Path, url: str | None, ties: int, rounds: int) -> dict[str, float]:
    pages = {"first_page": 0, "middle_page": ties // 2, "last_page": ties - 20}
    times: dict[str, list[float]] = {name: [] for name in pages}
    async with store_of(home, url) as store:
        await store.search("warmup")
        before = peak_kb()
        for _ in range(rounds):
            for name, offset in pages.items():
                t = time.perf_counter()
                hits = await store.search(WORD, offset=offset)
                times[name].append(time.perf_counter() - t)
                assert len(hits) == 20, (name, len(hits))
        grown = peak_kb() - before
    figures = {f"{name}_ms": statistics.median(ts) * 1000 for name, ts in times.items()}
    figures["peak_rss_growth_mb"] = grown / 1024
    if url is None:
        raw = sqlite3.connect(home / "sessions.sqlite")
        bare = "SELECT rowid FROM search_fts WHERE search_fts MATCH ? ORDER BY rank LIMIT 20"
        samples = []
        for _ in range(rounds):
            t = time.perf_counter()
            raw.execute(bare, (f'"{WORD}"',)).fetchall()
            samples.append(time.perf_counter() - t)
        raw.close()
        figures["raw_fts5_first_page_ms"] = statistics.median(samples) * 1000
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ties", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--url", default=None, help="a PostgreSQL database it may fill")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--window", type=int, default=None, help="rank this many at a time")
    parser.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.window is not None:
        search_seam.WINDOW = args.window  # type: ignore[misc]
    if args.measure is not None:
        print(json.dumps(asyncio.run(measure(args.measure, args.url, args.ties, args.rounds))))
        return
    cache = args.cache or Path.home() / ".cache" / "soong-store-bench"
    home = cache / f"ties-{args.ties}{'-pg' if args.url else ''}"
    if not (home / "built").exists():
        print(f"building {args.ties} nodes that say {WORD!r} in {home}")
        home.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        asyncio.run(build(home, args.url, args.ties))
        (home / "built").write_text(f"{time.perf_counter() - t:.0f} s\n")
    print(f"home {home} (built in {(home / 'built').read_text().strip()})")
    command = [sys.executable, __file__, "--measure", str(home), "--ties", str(args.ties)]
    command += ["--rounds", str(args.rounds)] + (["--url", args.url] if args.url else [])
    command += ["--window", str(args.window)] if args.window is not None else []
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    for key, value in figures.items():
        print(f"  {key}: {value:.4g}")


if __name__ == "__main__":
    main()
