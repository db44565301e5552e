"""The write rows: sequential and concurrent appends, durable appends, WAL frames per append.

Each row runs ``append_node`` of one ~400-byte text block (the node, its ``node_created``
event and its search row, the session's active node moved) against :class:`_raw.RawWriter`
running the same statements on a copy of the store's own table shapes, interleaved in rounds.
The three append rows have a third side, the same statements run the way the store runs a write
at that durability (``_floor.py``: at the end of the loop's turn at ``normal``, by a writer
thread at ``full``), shown as a row of its own without a verdict: the least the design costs
over raw here.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_append
import orjson
from _floor import LoopRaw, ThreadedRaw
from _harness import Figure, as_speed, compare, interleave, median
from _raw import RawWriter, truncate_wal, wal_frames
from peers._common import CONCURRENCY, item_role, item_text

from soong_store import SessionStore


@dataclass(frozen=True)
class Items:
    """The items every write row appends: block lists for the store, their JSON for raw."""

    content: list[list[dict[str, Any]]]
    content_json: list[str]

    @classmethod
    def make(cls, count: int) -> Items:
        """Items 0..count-1 (text as in the peers' workload)."""
        content = [[{"type": "text", "text": item_text(i)}] for i in range(count)]
        return cls(content, [orjson.dumps(c).decode() for c in content])


async def sequential_append(rounds: int, appends: int, warmup: int) -> list[Figure]:
    """``bench_append.py`` with the row's sizes and a ~400-byte text."""
    content = Items.make(1).content[0]
    result = await bench_append.run(rounds, appends, content=content, warmup=warmup, floor=True)
    samples = {"store": result.store, "raw": result.raw, "floor": result.floor}
    return [
        compare(
            "sequential_append",
            "sequential append",
            f"{appends:,} awaited append_node, durability normal (per append)",
            samples,
            "store",
            "raw",
            target="≤ 1.8x raw time",
            max_time_ratio=1.8,
        ),
        _floor_figure("sequential_append", "sequential append", samples),
    ]


def _floor_figure(
    group: str,
    name: str,
    samples: dict[str, list[float]],
    *,
    speed: bool = False,
    on_loop: bool = True,
) -> Figure:
    """What raw's statements cost run as the store runs them (``_floor.py``), against raw alone.

    No verdict: it is the least the store's design can cost on this machine, what the row's
    target is to be read against. ``speed`` shows it as the row does; ``on_loop``: the batches
    of a loop's turn (durability normal), else a writer thread (full).
    """
    how = (
        "committed at the end of the caller's loop turn, on its thread"
        if on_loop
        else "run by one writer thread, awaited through futures"
    )
    figure = compare(
        group,
        f"{name}: the design's floor",
        f"raw's statements {how}",
        samples,
        "floor",
        "raw",
        target="none: the least the design costs",
    )
    return as_speed(figure) if speed else figure


class _Pair:
    """A store with ``sessions`` sessions and a raw copy of their tables."""

    def __init__(self, tmp: Path, sessions: int, durability: str) -> None:
        self.home = tmp / "home"
        self.raw_path = tmp / "raw.sqlite"
        self.store = SessionStore(home=self.home, durability=durability)  # type: ignore[arg-type]
        self.sessions = sessions
        self.synchronous = "FULL" if durability == "full" else "NORMAL"
        self.sids: list[str] = []
        self.raw: RawWriter | None = None

    async def open(self) -> None:
        await self.store.open()
        for _ in range(self.sessions):
            sid = (await self.store.create_session(cwd=str(self.home))).session_id
            await self.store.append_event(sid, "bench_ready")  # a pair exists from the 1st write
            self.sids.append(sid)
        self.raw = RawWriter.clone(self.home, self.sids, self.raw_path, self.synchronous)

    async def close(self) -> None:
        await self.store.close()
        if self.raw is not None:
            self.raw.close()


async def _concurrent(
    rounds: int, appends: int, warmup: int, durability: str
) -> dict[str, list[float]]:
    """Seconds per round: 8 coroutines × appends/8 to 8 sessions; raw: appends one by one."""
    items = Items.make(appends // CONCURRENCY)
    per = len(items.content)
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        pair = _Pair(Path(tmp), CONCURRENCY, durability)
        await pair.open()
        store, raw = pair.store, pair.raw
        assert raw is not None
        floor_raw = RawWriter.clone(
            pair.home, pair.sids, Path(tmp) / "floor.sqlite", pair.synchronous
        )
        # The store's way at this durability: its batches on the loop, or its writer thread.
        threaded = LoopRaw(floor_raw) if durability == "normal" else ThreadedRaw(floor_raw)

        async def worker(sid: str, count: int) -> None:
            for i in range(count):
                await store.append_node(sid, item_role(i), "message", items.content[i % per])

        async def store_side(count: int = per) -> float:
            begin = time.perf_counter()
            await asyncio.gather(*(worker(sid, count) for sid in pair.sids))
            return time.perf_counter() - begin

        def raw_side(count: int = per) -> float:
            begin = time.perf_counter()
            for i in range(count):
                for sid in pair.sids:
                    raw.append(sid, item_role(i), items.content_json[i % per])
            return time.perf_counter() - begin

        async def floor_worker(sid: str, count: int) -> None:
            for i in range(count):
                await threaded.append(sid, item_role(i), items.content_json[i % per])

        async def floor_side(count: int = per) -> float:
            begin = time.perf_counter()
            await asyncio.gather(*(floor_worker(sid, count) for sid in pair.sids))
            return time.perf_counter() - begin

        await store_side(max(1, warmup // CONCURRENCY))
        raw_side(max(1, warmup // CONCURRENCY))
        await floor_side(max(1, warmup // CONCURRENCY))
        samples = await interleave(
            rounds, {"store": store_side, "raw": raw_side, "floor": floor_side}
        )
        threaded.close()
        floor_raw.close()
        await pair.close()
    return samples


async def concurrent_append(rounds: int, appends: int, warmup: int) -> list[Figure]:
    """8 coroutines × 625 appends to 8 sessions against raw's 5,000 sequential transactions."""
    samples = await _concurrent(rounds, appends, warmup, "normal")
    per = appends // CONCURRENCY
    return [
        compare(
            "concurrent_append",
            "concurrent append",
            f"{CONCURRENCY} coroutines × {per:,} to {CONCURRENCY} sessions, durability normal "
            f"(raw: the same {per * CONCURRENCY:,} transactions one by one)",
            samples,
            "store",
            "raw",
            target="≤ 1.2x raw sequential time",
            max_time_ratio=1.2,
        ),
        _floor_figure("concurrent_append", "concurrent append", samples),
    ]


async def concurrent_durable(rounds: int, appends: int, warmup: int) -> list[Figure]:
    """The same at ``durability="full"`` against raw at ``synchronous=FULL``: throughput."""
    samples = await _concurrent(rounds, appends, warmup, "full")
    per = appends // CONCURRENCY
    return [
        compare(
            "concurrent_durable",
            "concurrent, durable",
            f"{CONCURRENCY} coroutines × {per:,}, durability full (raw: one by one, "
            "synchronous=FULL)",
            samples,
            "store",
            "raw",
            target="≥ 2x raw throughput",
            min_speed_ratio=2.0,
        ),
        _floor_figure(
            "concurrent_durable", "concurrent, durable", samples, speed=True, on_loop=False
        ),
    ]


async def pages_written(rounds: int, appends: int) -> list[Figure]:
    """WAL frames per sequential append: the ``-wal`` file's frames after ``appends`` commits.

    Each side starts from an empty ``-wal`` (a ``TRUNCATE`` checkpoint while the store is idle)
    and appends few enough nodes that no checkpoint restarts the file: raw's automatic one comes
    at 1,000 frames; the store's writer checkpoints after 256 rows changed on its connection
    (four an append), so each round appends through a store opened for it, counting from zero.
    """
    items = Items.make(1)
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        pair = _Pair(Path(tmp), 1, "normal")
        await pair.open()
        raw, sid = pair.raw, pair.sids[0]
        assert raw is not None
        database = pair.home / "sessions.sqlite"

        async def store_side() -> float:
            truncate_wal(database)
            async with SessionStore(home=pair.home) as store:
                for i in range(appends):
                    await store.append_node(sid, item_role(i), "message", items.content[0])
                return wal_frames(database) / appends

        def raw_side() -> float:
            truncate_wal(raw.path)
            for i in range(appends):
                raw.append(sid, item_role(i), items.content_json[0])
            return wal_frames(raw.path) / appends

        await store_side()
        raw_side()
        samples = await interleave(rounds, {"store": store_side, "raw": raw_side})
        await pair.close()
    notes = []
    if median(samples["store"]) * appends >= 1000 or median(samples["raw"]) * appends >= 1000:
        notes.append("over 1,000 frames: an automatic checkpoint may have restarted the -wal")
    return [
        compare(
            "pages_written",
            "pages written",
            f"WAL frames per append_node (node + event), {appends} sequential appends",
            samples,
            "store",
            "raw",
            target="≤ 1.5x raw's",
            unit="frames",
            max_time_ratio=1.5,
            notes=notes,
        )
    ]
