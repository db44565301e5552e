"""``append_node`` of a short text node, against the same statements in raw ``sqlite3``.

Run: ``python bench/bench_append.py [--rounds N] [--batch N]``. Each round awaits ``batch``
appends of a one-block text node (the store validates it and, in one transaction, reads the
session row, inserts the node, its ``node_created`` event and its search row, and moves the
session's active node), and, in turn, runs ``batch`` raw transactions of those five statements
on a file with the store's own table shapes (copied from the store's database: see
``_raw.py``), WAL, ``synchronous=NORMAL``. Which side goes first alternates per round; the
report gives the median time per append of each side and their ratio. ``bench/run.py`` runs
this as its "sequential append" row.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from _floor import LoopRaw
from _raw import RawWriter

from soong_store import SessionStore

CONTENT = [{"type": "text", "text": "a short message of an ordinary length, one block"}]


@dataclass(frozen=True)
class Result:
    """Seconds per append of each side, one figure per round."""

    store: list[float]
    raw: list[float]
    floor: list[float]
    """Raw's statements committed at the end of the loop's turn, as the store commits at
    durability normal (``_floor.py``); empty unless asked for."""

    def report(self) -> str:
        store, raw = statistics.median(self.store), statistics.median(self.raw)
        return "\n".join(
            [
                f"append_node, {len(self.store)} rounds (medians per append)",
                f"  raw sqlite3 (5 statements) : {raw * 1e6:8.1f} us",
                f"  store.append_node          : {store * 1e6:8.1f} us "
                f"({1 / store:,.0f} per second)",
                f"  ratio                      : {store / raw:8.2f}x",
            ]
        )


async def run(
    rounds: int,
    batch: int,
    content: list[dict[str, Any]] | None = None,
    warmup: int | None = None,
    *,
    floor: bool = False,
) -> Result:
    """Interleaved rounds of ``batch`` awaited appends and ``batch`` raw transactions.

    With ``floor``, a third side awaits ``batch`` appends of raw's statements committed at the
    end of the loop's turn (:class:`_floor.LoopRaw`, on a file of its own).
    """
    content = content if content is not None else CONTENT
    content_json = orjson.dumps(content).decode()
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        home = Path(tmp) / "home"
        store_times: list[float] = []
        raw_times: list[float] = []
        floor_times: list[float] = []
        async with SessionStore(home=home) as store:
            sid = (await store.create_session(cwd=tmp)).session_id
            await store.append_event(sid, "bench_ready")  # a pair exists from the 1st write
            raw = RawWriter.clone(home, [sid], Path(tmp) / "raw.sqlite", "NORMAL")
            threaded = None
            sides = ["raw", "store"]
            if floor:
                floor_raw = RawWriter.clone(home, [sid], Path(tmp) / "floor.sqlite", "NORMAL")
                threaded = LoopRaw(floor_raw)
                sides.append("floor")
            for _ in range(batch if warmup is None else warmup):
                await store.append_node(sid, "user", "message", content)
                raw.append(sid, "user", content_json)
                if threaded is not None:
                    await threaded.append(sid, "user", content_json)
            for i in range(rounds):
                shift = i % len(sides)
                for side in sides[shift:] + sides[:shift]:
                    begin = time.perf_counter()
                    if side == "store":
                        for _ in range(batch):
                            await store.append_node(sid, "user", "message", content)
                        store_times.append((time.perf_counter() - begin) / batch)
                    elif side == "raw":
                        for _ in range(batch):
                            raw.append(sid, "user", content_json)
                        raw_times.append((time.perf_counter() - begin) / batch)
                    else:
                        assert threaded is not None
                        for _ in range(batch):
                            await threaded.append(sid, "user", content_json)
                        floor_times.append((time.perf_counter() - begin) / batch)
            raw.close()
            if threaded is not None:
                threaded.close()
                floor_raw.close()
        return Result(store_times, raw_times, floor_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    print(asyncio.run(run(args.rounds, args.batch)).report())


if __name__ == "__main__":
    main()
