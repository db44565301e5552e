"""The speed targets of soong_store: every figure against its baseline, measured in one run.

Run: ``python bench/run.py [--only ROWS] [--rounds N] [--quick] [--no-peers] [--pg-url URL]
[--out FILE]``.
Prints a Markdown table (store, baseline, ratio, target, PASS/FAIL) and writes the same figures,
with every round's samples, the commit and the machine, to ``bench/results.json``. Each row
interleaves the store and its baseline in rounds and reports medians; the baseline is raw
``sqlite3`` running the store's statements on its own table shapes (``_raw.py``), or, for the
peers row, the OpenAI Agents SDK, LangGraph and Google ADK, each in a venv of its own under
``bench/.venvs/`` (made on first use; a peer that cannot be installed is skipped with one
line). The postgresql row runs the same calls on a PostgreSQL store (``--pg-url``, or
``$SOONG_STORE_BENCH_PG_URL``: a database it may fill) beside the SQLite store. The store is
measured only through its public API and its CLI. A benchmark prints facts: the exit status is
0 whatever the verdicts.

Rows (``--only`` takes these, comma-separated, or ``append``, ``writes``, ``reads``,
``context``): sequential_append, concurrent_append, concurrent_durable, pages_written,
active_path, context_tail, context_after_append, timeline_page, startup, peers, postgresql,
usage_sum, context_budget.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _peers
import _postgres
import _reads
import _startup
import _usage
import _writes
from _harness import Figure, as_json, environment, git_commit, table

import soong_store

BENCH = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Sizes:
    """The workload sizes of every row (the issue's, or ``--quick``'s for a smoke run)."""

    appends: int = 5000
    warmup: int = 500
    pages_appends: int = 40
    depths: tuple[int, ...] = (3000, 50_000)
    context_nodes: int = 2000
    timeline_events: int = 100_000
    sessions: int = 1000
    startup_samples: int = 5
    peer_items: int = 5000
    adk_items: int = 1000
    peer_reads: int = 5
    pg_appends: int = 2000
    usage_runs: int = 100_000


QUICK = Sizes(
    appends=400,
    warmup=40,
    pages_appends=20,
    depths=(300, 3000),
    context_nodes=500,
    timeline_events=5000,
    sessions=50,
    startup_samples=1,
    peer_items=400,
    adk_items=80,
    peer_reads=3,
    pg_appends=200,
    usage_runs=5000,
)

ROWS = (
    "sequential_append",
    "concurrent_append",
    "concurrent_durable",
    "pages_written",
    "active_path",
    "context_tail",
    "context_after_append",
    "timeline_page",
    "startup",
    "peers",
    "postgresql",
    "usage_sum",
    "context_budget",
)
ALIASES = {
    "append": ("sequential_append", "concurrent_append"),
    "writes": ROWS[:4],
    "reads": (*ROWS[4:8], "context_budget"),
    "context": ("context_tail", "context_after_append", "context_budget"),
}


class Log(list[str]):
    """Progress lines: printed to stderr as they come, kept for the JSON."""

    def append(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        super().append(line)


def selected(only: str | None) -> list[str]:
    """The rows ``--only`` names, in the table's order (all without it)."""
    if not only:
        return list(ROWS)
    wanted: set[str] = set()
    for name in (part.strip() for part in only.split(",") if part.strip()):
        if name in ROWS:
            wanted.add(name)
        elif name in ALIASES:
            wanted.update(ALIASES[name])
        else:
            choices = ", ".join([*ROWS, *ALIASES])
            raise SystemExit(f"run.py: unknown row {name!r} (choose from: {choices})")
    return [row for row in ROWS if row in wanted]


def plan(
    args: argparse.Namespace, sizes: Sizes, log: Log, skipped: list[str], details: dict[str, Any]
) -> dict[str, Callable[[], Awaitable[list[Figure]]]]:
    """Each row's coroutine factory, bound to the run's sizes and rounds."""
    n = args.rounds

    async def context_tail() -> list[Figure]:
        if args.no_peers:
            sdk, missing = None, "the SDK side was not run (--no-peers)"
        else:
            sdk, missing = _peers.sdk_tail(log, sizes.context_nodes, 20)
            if sdk is None and missing not in skipped:
                skipped.append(missing)
        return await _reads.context_tail(n, sizes.context_nodes, sdk, missing)

    async def peers() -> list[Figure]:
        if args.no_peers:
            skipped.append("peers: not run (--no-peers)")
            return []
        figures, info = _peers.peers(
            n, sizes.peer_items, sizes.adk_items, sizes.peer_reads, log, skipped
        )
        details["peers"] = info
        return figures

    async def postgresql() -> list[Figure]:
        if not args.pg_url:
            skipped.append("postgresql: not run (give --pg-url or SOONG_STORE_BENCH_PG_URL)")
            return []
        return await _postgres.postgresql(
            n, args.pg_url, sizes.pg_appends, sizes.depths[0], sizes.context_nodes
        )

    return {
        "sequential_append": lambda: _writes.sequential_append(n, sizes.appends, sizes.warmup),
        "concurrent_append": lambda: _writes.concurrent_append(n, sizes.appends, sizes.warmup),
        "concurrent_durable": lambda: _writes.concurrent_durable(n, sizes.appends, sizes.warmup),
        "pages_written": lambda: _writes.pages_written(n, sizes.pages_appends),
        "active_path": lambda: _reads.active_path(n, list(sizes.depths)),
        "context_tail": context_tail,
        "context_after_append": lambda: _reads.context_after_append(n, sizes.context_nodes),
        "timeline_page": lambda: _reads.timeline(n, sizes.timeline_events),
        "startup": lambda: _startup.startup(n, sizes.sessions, sizes.startup_samples, log),
        "peers": peers,
        "postgresql": postgresql,
        "usage_sum": lambda: _usage.usage_sum(n, sizes.usage_runs),
        "context_budget": lambda: _reads.context_budget(n, sizes.context_nodes),
    }


async def run(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else Sizes()
    log = Log()
    skipped: list[str] = []
    details: dict[str, Any] = {}
    rows = selected(args.only)
    factories = plan(args, sizes, log, skipped, details)
    repo = Path(soong_store.__file__).resolve().parents[1]
    started = time.perf_counter()
    machine_before = environment()
    figures: list[Figure] = []
    timings: dict[str, float] = {}
    for row in rows:
        log.append(f"{row} ...")
        begin = time.perf_counter()
        figures += await factories[row]()
        timings[row] = round(time.perf_counter() - begin, 1)
        log.append(f"{row}: {timings[row]} s")
    elapsed = time.perf_counter() - started
    commit = git_commit(repo)
    machine = environment()
    print(table(figures))
    if "peers" in details:
        print()
        print(_peers.details(details["peers"]))
    for line in skipped:
        print(f"skipped: {line}")
    changed = " (the package differs from it)" if commit["package_changed"] else ""
    print(
        f"\ncommit {commit['commit']}{changed}; Python {machine['python']}, SQLite "
        f"{machine['sqlite']}, {machine['cpus']} of {machine['cpus_online']} CPUs, load average "
        f"{machine_before['load_average'][0]:.2f} before, {machine['load_average'][0]:.2f} "
        f"after; {args.rounds} rounds{', --quick' if args.quick else ''}; {elapsed:.0f} s"
    )
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        **commit,
        "machine": machine,
        "load_average_before": machine_before["load_average"],
        "rounds": args.rounds,
        "quick": args.quick,
        "rows": rows,
        "sizes": asdict(sizes),
        "elapsed_s": round(elapsed, 1),
        "row_seconds": timings,
        "figures": [as_json(f) for f in figures],
        "skipped": skipped,
        "details": details,
        "log": list(log),
    }
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated rows (default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--no-peers", action="store_true", help="leave the peer libraries out")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("SOONG_STORE_BENCH_PG_URL"),
        help="a PostgreSQL database for the postgresql row (it fills it)",
    )
    parser.add_argument("--out", type=Path, default=BENCH / "results.json", help="JSON file")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
