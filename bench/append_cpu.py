"""Per append, the store against its write floor: wall time and CPU time, thread by thread.

Run: ``python bench/append_cpu.py [--items N] [--rounds R]``. Each round writes the peer
workload's items (``peers/_common.py``: ``N`` awaited appends to one session, then ``N`` by 8
coroutines to 8 sessions) through a ``SessionStore`` at ``durability="full"``, then the same
writes on the store's floor (``peers/floor_store.py``'s: ``_raw.RawWriter``'s statements on the
same sessions' DDL behind ``_floor.ThreadedRaw``'s writer thread, ``synchronous=FULL``), in one
process, the two in turns. It prints per append the wall time of the sequential and the 8-way
writes, the CPU time of the event loop's thread and of the writer thread (user and system, from
``/proc/self/task``; the process's total where that is missing), and the store's ratios to its
floor. The wall ratio is the issue's row ("per-append Python over the floor"); the CPU says
whose time it is: the floor does an append's SQL and nothing else, so what the store spends
over it is its own Python (checks, encoding, ids, records, SQLAlchemy's transaction, futures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH / "peers")]

from _common import CONCURRENCY, item_role, item_text, timed_writes  # noqa: E402
from _floor import ThreadedRaw  # noqa: E402
from _raw import RawWriter  # noqa: E402

from soong_store import SessionStore  # noqa: E402

_WARM = 20
"""Appends before the clock: the writer thread, its connection and prepared statements up."""


def _cpu_by_thread() -> dict[str, float]:
    """CPU seconds of each live thread by role ("loop" or "writer"), or the process's total."""
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        stat = Path(f"/proc/self/task/{thread.native_id}/schedstat")
        if not stat.exists():
            times = os.times()
            return {"process": times.user + times.system}
        role = "loop" if thread is threading.main_thread() else "writer"
        if role == "writer" and "writer" not in (thread.name or ""):
            continue
        out[role] = out.get(role, 0.0) + int(stat.read_text().split()[0]) / 1e9
    return out


async def _timed(
    write: Callable[[str, int], Awaitable[None]], names: dict[str, str], items: int
) -> tuple[dict[str, Any], dict[str, float]]:
    """The workload's writes after ``_WARM`` of them, with each thread's CPU seconds spent."""
    for i in range(_WARM):
        await write(names["seq"], i)
    handles = [names[f"conc{k}"] for k in range(CONCURRENCY)]
    before = _cpu_by_thread()
    out = await timed_writes(write, names["seq"], handles, items)
    after = _cpu_by_thread()
    return out, {key: after[key] - before.get(key, 0.0) for key in after}


async def _store_side(home: Path, items: int) -> tuple[dict[str, Any], dict[str, float]]:
    async with SessionStore(home=home, durability="full") as store:
        names = {"seq": (await store.create_session(cwd=str(home))).session_id}
        for k in range(CONCURRENCY):
            names[f"conc{k}"] = (await store.create_session(cwd=str(home))).session_id
        (home / "names.json").write_text(json.dumps(names))

        async def write(sid: str, i: int) -> None:
            content = [{"type": "text", "text": item_text(i)}]
            await store.append_node(sid, item_role(i), "message", content)

        return await _timed(write, names, items)


async def _floor_side(
    writer: ThreadedRaw, names: dict[str, str], items: int
) -> tuple[dict[str, Any], dict[str, float]]:
    async def write(sid: str, i: int) -> None:
        content = orjson.dumps([{"type": "text", "text": item_text(i)}]).decode()
        await writer.append(sid, item_role(i), content)

    return await _timed(write, names, items)


def one_round(items: int) -> dict[str, dict[str, float]]:
    """The store's and the floor's figures per append (seconds) for one round."""
    with tempfile.TemporaryDirectory(prefix="soong-bench-append-cpu-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        store, store_cpu = asyncio.run(_store_side(home, items))
        names = json.loads((home / "names.json").read_text())
        sids = list(names.values())
        raw = RawWriter.clone(home, sids, Path(tmp) / "floor.sqlite", "FULL")
        writer = ThreadedRaw(raw)
        try:
            floor, floor_cpu = asyncio.run(_floor_side(writer, names, items))
        finally:
            writer.close()
            raw.close()
    out = {}
    for side, wall, cpu in (("store", store, store_cpu), ("floor", floor, floor_cpu)):
        n = items + wall["written_8way"]
        out[side] = {
            "seq": wall["write_seq"] / items,
            "8way": wall["write_8way"] / wall["written_8way"],
            **{f"cpu_{key}": value / n for key, value in cpu.items()},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = [one_round(args.items) for _ in range(args.rounds)]
    print(f"per append, medians of {args.rounds} rounds of {args.items} + {args.items} appends")
    print(f"{'figure':<22}{'store':>12}{'floor':>12}{'store/floor':>13}{'range':>13}")
    for key in rounds[0]["store"]:
        store = statistics.median(r["store"][key] for r in rounds)
        floor = statistics.median(r["floor"][key] for r in rounds)
        ratios = sorted(r["store"][key] / r["floor"][key] for r in rounds)
        label = {"seq": "sequential wall", "8way": "8-way wall"}.get(key, key.replace("_", " "))
        spread = f"{ratios[0]:.2f}-{ratios[-1]:.2f}"
        ratio = f"{statistics.median(ratios):.2f}x"
        print(f"{label:<22}{store * 1e6:>9.0f} µs{floor * 1e6:>9.0f} µs{ratio:>13}{spread:>13}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load {load:.1f}")


if __name__ == "__main__":
    main()
