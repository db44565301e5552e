"""Spilling a 1 MB JSON block to an artifact, against writing the same bytes with open+fsync.

Run: ``python bench/bench_artifacts.py [--rounds N] [--size BYTES] [--nulls]``. Each round
appends one tool node whose JSON block is about ``size`` bytes (the store validates it, spills it
to a file written atomically — temp file, fsync, rename, fsync of the folder — and commits the
row, the node and its event), and, in turn, writes the very same JSON bytes with
``open().write()`` + ``os.fsync`` to a file in the same folder. Each round runs both, which one
first alternating, so that drift in fsync latency and order effects hit both alike; the report
gives the ratio of the medians and the median of the ratios within rounds. The target is a ratio
within 1.5x.

``--nulls`` gives every row a ``null`` field, as real tool output often has: a ``null`` in the
output makes the store check the value for NaN and Infinity (which orjson would silently write as
``null``), the slower path of its encoder.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from soong_store import SessionStore


def payload(size: int, nulls: bool = False) -> dict[str, object]:
    row = {"id": 0, "name": "a row of data", "values": [1.5, 2.5, 3.5], "ok": True}
    if nulls:
        row["note"] = None
    per_row = len(orjson.dumps(row)) + 1
    return {"rows": [dict(row, id=i) for i in range(size // per_row)]}


@dataclass(frozen=True)
class Result:
    """Seconds per round of each side; round ``i`` ran both, in alternating order."""

    size: int
    spill: list[float]
    raw: list[float]

    def report(self, nulls: bool) -> str:
        pairs = sorted(s / r for s, r in zip(self.spill, self.raw, strict=True))
        quartiles = statistics.quantiles(pairs, n=4)
        spill, raw = statistics.median(self.spill), statistics.median(self.raw)
        with_nulls = ", with nulls" if nulls else ""
        return "\n".join(
            [
                f"JSON payload: {self.size} bytes{with_nulls}, {len(pairs)} rounds (medians)",
                f"  raw open().write() + fsync : {raw * 1000:8.2f} ms",
                f"  append_node with spill     : {spill * 1000:8.2f} ms",
                f"  ratio of the medians       : {spill / raw:8.2f}x (target <= 1.5x)",
                f"  ratio within each round    : {statistics.median(pairs):8.2f}x median "
                f"({quartiles[0]:.2f}-{quartiles[2]:.2f} between the quartiles)",
            ]
        )


def write_raw(path: Path, data: object) -> None:
    with open(path, "wb") as file:
        file.write(orjson.dumps(data))
        file.flush()
        os.fsync(file.fileno())


async def run(rounds: int, size: int, nulls: bool) -> Result:
    data = payload(size, nulls)
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        home = Path(tmp)
        raw_dir = home / "raw"
        raw_dir.mkdir()
        spill: list[float] = []
        raw: list[float] = []
        async with SessionStore(home=home) as store:
            sid = (await store.create_session(cwd=tmp)).session_id

            async def called(call_id: str) -> list[dict[str, Any]]:
                """The result's content, its call appended first (off the clock)."""
                call = {"type": "tool_call", "tool_call_id": call_id, "name": "q", "arguments": {}}
                await store.append_node(sid, "assistant", "message", [call])
                result = {"type": "json", "data": data}
                return [{"type": "tool_result", "tool_call_id": call_id, "content": [result]}]

            warm = await called("c")
            await store.append_node(sid, "tool", "message", warm)  # warm-up
            write_raw(raw_dir / "warm-up.json", data)
            for i in range(rounds):
                for side in ("spill", "raw") if i % 2 else ("raw", "spill"):
                    content = await called(f"c{i}") if side == "spill" else []
                    start = time.perf_counter()
                    if side == "spill":
                        await store.append_node(sid, "tool", "message", content)
                    else:
                        write_raw(raw_dir / f"{i}.json", data)
                    (spill if side == "spill" else raw).append(time.perf_counter() - start)
        return Result(len(orjson.dumps(data)), spill, raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--nulls", action="store_true", help="a null field in every row")
    args = parser.parse_args()
    print(asyncio.run(run(args.rounds, args.size, args.nulls)).report(args.nulls))


if __name__ == "__main__":
    main()
