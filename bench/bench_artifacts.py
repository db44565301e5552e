"""Spilling a 1 MB JSON block to an artifact, against writing the same bytes with open+fsync.

Run: ``python bench/bench_artifacts.py [--rounds N] [--size BYTES] [--nulls]``. Each round
appends one tool node whose JSON block is about ``size`` bytes (the store validates it, spills it
to a file written atomically — temp file, fsync, rename, fsync of the folder — and commits the
row, the node and its event), and, in turn, writes the very same JSON bytes with
``open().write()`` + ``os.fsync`` to a file in the same folder. Rounds alternate so that drift in
fsync latency hits both alike. The target is a ratio within 1.5x.

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
from pathlib import Path

import orjson

from soong_store import SessionStore


def payload(size: int, nulls: bool = False) -> dict[str, object]:
    row = {"id": 0, "name": "a row of data", "values": [1.5, 2.5, 3.5], "ok": True}
    if nulls:
        row["note"] = None
    per_row = len(orjson.dumps(row)) + 1
    return {"rows": [dict(row, id=i) for i in range(size // per_row)]}


async def run(rounds: int, size: int, nulls: bool) -> tuple[float, float, int]:
    data = payload(size, nulls)
    raw_bytes = orjson.dumps(data)
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        home = Path(tmp)
        raw_dir = home / "raw"
        raw_dir.mkdir()
        spill: list[float] = []
        raw: list[float] = []
        async with SessionStore(home=home) as store:
            sid = (await store.create_session(cwd=tmp)).session_id
            content = [
                {
                    "type": "tool_result",
                    "tool_call_id": "c",
                    "content": [{"type": "json", "data": data}],
                }
            ]
            await store.append_node(sid, "tool", "message", content)  # warm-up
            for i in range(rounds):
                start = time.perf_counter()
                await store.append_node(sid, "tool", "message", content)
                spill.append(time.perf_counter() - start)

                start = time.perf_counter()
                with open(raw_dir / f"{i}.json", "wb") as file:
                    file.write(orjson.dumps(data))
                    file.flush()
                    os.fsync(file.fileno())
                raw.append(time.perf_counter() - start)
        return statistics.median(spill), statistics.median(raw), len(raw_bytes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--nulls", action="store_true", help="a null field in every row")
    args = parser.parse_args()
    spill, raw, size = asyncio.run(run(args.rounds, args.size, args.nulls))
    nulls = ", with nulls" if args.nulls else ""
    print(f"JSON payload: {size} bytes{nulls}, {args.rounds} rounds (medians)")
    print(f"  raw open().write() + fsync : {raw * 1000:8.2f} ms")
    print(f"  append_node with spill     : {spill * 1000:8.2f} ms")
    print(f"  ratio                      : {spill / raw:8.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
