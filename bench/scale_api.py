"""The issue's scale targets through the public API: a big home against a 100-session one.

Run: ``python bench/scale_api.py [--sessions 100000] [--nodes 5] [--rounds 5] [--cache DIR]
[--build-only]``.
Both homes are built through ``SessionStore`` (one unit of work per session, ``--nodes`` user and
assistant messages in a chain) and kept between runs under ``--cache`` (default: a folder of the
system temp folder), so only the first run pays the build; its time is stored beside the homes,
with the process's CPU time and the load average before and after (the machine may be shared).
``--build-only`` builds (or finds) the big home and prints its build figures, nothing else.
Every figure is measured on both homes in the same run, interleaved round by round (medians),
and printed with the ratio big / small:

- ``open+path``: a new process (interpreter start and imports excluded) opens the home and reads
  the active path of the most recent session; ``open+idle``: the same for the oldest session;
- ``create``: ``create_session`` on a warm store; ``next read``: right after it, the active path
  on a second store of the same home that was open and warm before;
- ``list(50)``: the first page; ``list far``: a page half-way down, by key (``after=``);
- ``cli sessions`` / ``cli path``: the wall time of the CLI commands, process start included;
- ``check 1``: ``check`` of one session;
- ``empty KB``: file growth per session created and never written (100 creates, checkpointed);
- ``rss MB``: a new process's resident set after reading the path of up to 1,000 sessions.
Sessions created by a measurement are deleted again.
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
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from soong_store import SessionStore
from soong_store.check.run import check_store

SMALL = 100
CHILD = """
import asyncio, json, sys, time
from soong_store import SessionStore
home, sid, touch = sys.argv[1], sys.argv[2], int(sys.argv[3])

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

async def main():
    begin = time.perf_counter()
    async with SessionStore(home=home) as store:
        await store.active_path(sid)
        took = (time.perf_counter() - begin) * 1000
        if touch:
            page = await store.list_sessions(limit=touch)
            for s in page:
                await store.active_path(s.session_id)
        print(json.dumps({"ms": took, "rss": rss_mb()}))

asyncio.run(main())
"""


async def build(home: Path, sessions: int, nodes: int) -> float:
    """Make ``sessions`` sessions of ``nodes`` nodes each, through the API; seconds taken."""
    begin = time.perf_counter()
    step = max(1000, sessions // 20)
    async with SessionStore(home=home) as store:
        for i in range(sessions):
            sid = (await store.create_session(cwd=str(home))).session_id
            async with store.transaction(sid) as tx:
                for n in range(nodes):
                    role = "user" if n % 2 == 0 else "assistant"
                    tx.add_node(role, "message", [{"type": "text", "text": f"s{i} n{n}"}])
            if i % step == step - 1:
                took = time.perf_counter() - begin
                print(
                    f"  built {i + 1:,} of {sessions:,} in {took:.0f} s "
                    f"(load {os.getloadavg()[0]:.1f})",
                    file=sys.stderr,
                    flush=True,
                )
    return time.perf_counter() - begin


def cached_home(cache: Path, sessions: int, nodes: int) -> tuple[Path, dict[str, float]]:
    """The home of ``sessions`` x ``nodes`` under ``cache``, built once; and its build figures."""
    folder = cache / f"home-{sessions}x{nodes}"
    done = folder / "built.json"
    if not done.exists():
        if folder.exists():
            raise SystemExit(f"{folder} holds an unfinished build: remove it and run again")
        print(f"building {sessions:,} sessions x {nodes} nodes in {folder}", file=sys.stderr)
        load_before, cpu_before = os.getloadavg()[0], time.process_time()
        seconds = asyncio.run(build(folder / "home", sessions, nodes))
        built = {
            "seconds": seconds,
            "ms per session": seconds * 1000 / sessions,
            "cpu s": time.process_time() - cpu_before,
            "load before": load_before,
            "load after": os.getloadavg()[0],
        }
        done.write_text(json.dumps(built))
    return folder / "home", json.loads(done.read_text())


def child(home: Path, sid: str, touch: int = 0) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), sid, str(touch)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def wall(args: list[str]) -> float:
    begin = time.perf_counter()
    subprocess.run([sys.executable, "-m", "soong_store", *args], capture_output=True, check=True)
    return (time.perf_counter() - begin) * 1000


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    begin = time.perf_counter()
    await call()
    return (time.perf_counter() - begin) * 1000


async def in_store(home: Path, figures: dict[str, list[float]]) -> None:
    """The figures measured inside one process on a warm store."""
    async with SessionStore(home=home) as store, SessionStore(home=home) as other:
        newest = (await store.list_sessions(limit=1))[0].session_id
        await other.active_path(newest)
        made = []
        for _ in range(3):
            begin = time.perf_counter()
            made.append((await store.create_session(cwd=str(home))).session_id)
            figures["create"].append((time.perf_counter() - begin) * 1000)
            figures["next read"].append(await timed(lambda: other.active_path(newest)))
        figures["list(50)"].append(await timed(lambda: store.list_sessions(limit=50)))
        total = len(await store.list_sessions())
        half = (await store.list_sessions(limit=max(1, total // 2)))[-1]
        figures["list far"].append(await timed(lambda: store.list_sessions(limit=50, after=half)))
        figures["check 1"].append(await timed(lambda: check_store(store, newest)))
        for sid in made:
            await store.delete_session(sid)


async def empty_kb(home: Path) -> float:
    """File growth per session created and never written (the file is checkpointed first)."""
    path = home / "sessions.sqlite"
    async with SessionStore(home=home) as store:
        before = path.stat().st_size
        made = [(await store.create_session(cwd=str(home))).session_id for _ in range(100)]
    grown = path.stat().st_size - before
    async with SessionStore(home=home) as store:
        for sid in made:
            await store.delete_session(sid)
    return grown / 100 / 1024


async def ends(home: Path) -> tuple[str, str]:
    async with SessionStore(home=home) as store:
        listed = await store.list_sessions()
        return listed[0].session_id, listed[-1].session_id


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "soong-scale")
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.build_only:
        _home, built = cached_home(args.cache, args.sessions, args.nodes)
        print(json.dumps({"sessions": args.sessions, "nodes": args.nodes, **built}))
        return 0
    homes = {
        size: cached_home(args.cache, size, args.nodes) for size in sorted({SMALL, args.sessions})
    }
    figures: dict[int, dict[str, list[float]]] = {size: defaultdict(list) for size in homes}
    for size, (_home, built) in homes.items():
        figures[size]["build s"].append(float(built["seconds"]))
    for _ in range(args.rounds):
        for size, (home, _built) in homes.items():
            newest, oldest = asyncio.run(ends(home))
            got = figures[size]
            got["open+path"].append(child(home, newest)["ms"])
            got["open+idle"].append(child(home, oldest)["ms"])
            asyncio.run(in_store(home, got))
            got["cli sessions"].append(wall(["--home", str(home), "sessions"]))
            got["cli path"].append(wall(["--home", str(home), "path", newest]))
    for size, (home, _built) in homes.items():
        figures[size]["empty KB"].append(asyncio.run(empty_kb(home)))
        newest, _oldest = asyncio.run(ends(home))
        figures[size]["rss MB"].append(child(home, newest, touch=1000)["rss"])
    big = max(homes)
    print(f"| figure | {SMALL:,} sessions | {big:,} sessions | ratio |")
    print("| --- | --- | --- | --- |")
    for name in figures[big]:
        small = statistics.median(figures[SMALL][name])
        large = statistics.median(figures[big][name])
        ratio = f"{large / small:.1f}x" if small else "-"
        print(f"| {name} | {small:.2f} | {large:.2f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
