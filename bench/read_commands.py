"""The read commands of issue 54 as new processes: a home of 100 sessions against a big one.

Run: ``python bench/read_commands.py [--sessions 100000] [--nodes 5] [--rounds 7] [--cache DIR]``.
The homes are :mod:`scale_api`'s (built through ``SessionStore`` and kept under ``--cache``: only
the first run pays the build, about 45 minutes for 100,000 sessions). Every round runs each line
once, in turn, each a new process started in an empty folder: the interpreter alone
(``python -c pass``), a bare process that opens the home's file with ``sqlite3`` and reads its
newest session's row (the floor the issue compares a read command with), and ``soong-store
sessions``, ``show SID``, ``path SID`` and ``tree SID`` (SID: the newest session) on each home.
Printed: each line's median and fastest wall time, the big home's median over the small one's
(target ≤ 1.3x, and ≤ 200 ms at 100,000 sessions) and over the bare process's (target ≤ 1.5x).
The package's bytecode is compiled first, as installing a wheel does (see :mod:`_startup`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _startup import _cli, _compiled
from scale_api import SMALL, cached_home

from soong_store import SessionStore

BARE = (
    "import sqlite3, sys\n"
    "connection = sqlite3.connect(sys.argv[1])\n"
    "connection.execute('SELECT * FROM sessions ORDER BY updated_at DESC LIMIT 1').fetchall()\n"
)
COMMANDS = ("sessions", "show", "path", "tree")


async def newest(home: Path) -> str:
    async with SessionStore(home=home) as store:
        return (await store.list_sessions(limit=1))[0].session_id


def wall(command: list[str], folder: str) -> float:
    """Milliseconds a new process takes to run ``command`` to its end (it must exit 0)."""
    begin = time.perf_counter()
    subprocess.run(command, cwd=folder, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - begin) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "soong-scale")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    if not _compiled():
        print("some modules of the package did not compile to bytecode", file=sys.stderr)
    sizes = sorted({SMALL, args.sessions})
    homes = {size: cached_home(args.cache, size, args.nodes)[0] for size in sizes}
    lines: dict[str, list[str]] = {"python -c pass": [sys.executable, "-c", "pass"]}
    for size, home in homes.items():
        sid = asyncio.run(newest(home))
        lines[f"bare sqlite3 {size}"] = [
            sys.executable, "-c", BARE, str(home / "sessions.sqlite")
        ]  # fmt: skip
        for name in COMMANDS:
            given = [sid] if name != "sessions" else []
            lines[f"{name} {size}"] = [*_cli(), "--home", str(home), name, *given]
    took: dict[str, list[float]] = {line: [] for line in lines}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as folder:
        for command in lines.values():  # once untimed: the file system's caches warm
            wall(command, folder)
        for _ in range(args.rounds):
            for name, command in lines.items():
                took[name].append(wall(command, folder))
            loads.append(os.getloadavg()[0])
    print(f"load (1 minute) over the rounds: {min(loads):.2f}-{max(loads):.2f}")
    for name in ("python -c pass", *(f"bare sqlite3 {size}" for size in sizes)):
        print(f"{name}: {statistics.median(took[name]):.1f} ms")
    small, big = sizes[0], sizes[-1]
    print(f"| command | {small:,} sessions | {big:,} sessions | {big:,} / {small:,} | / bare |")
    print("| --- | --- | --- | --- | --- |")
    for name in COMMANDS:
        low, high = (statistics.median(took[f"{name} {size}"]) for size in (small, big))
        bare = statistics.median(took[f"bare sqlite3 {big}"])
        fastest = min(took[f"{name} {big}"])
        print(
            f"| {name} | {low:.1f} ms | {high:.1f} ms (fastest {fastest:.1f}) "
            f"| {high / low:.2f}x | {high / bare:.1f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
