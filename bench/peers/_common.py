"""What every side of the peer comparison shares: the items, the workload, the JSON it prints.

A peer script (``peer_*.py`` beside this file) runs inside the peer's own venv, never in the
store's process, and imports nothing of ``soong_store``: it defines a :class:`Peer` and calls
:func:`main`, which runs one mode and prints one JSON object on stdout.

Modes (``python peer_x.py MODE --db PATH [--items N] [--reads R]``):

- ``workload``: a new database; ``N`` sequential writes to one session, then ``N`` writes by 8
  coroutines to 8 sessions (``N / 8`` each), then reads of the first session (all items, the
  last 50), then a 50-item session for ``open_read``. Times in seconds.
- ``open_read``: run in a new process on the database ``workload`` left: the time from after
  the imports (and :meth:`Peer.recall`) to the first read of the 50-item session (every item).
- ``open_write``: the same for one write of one more item to that session (committed), after
  ``open_read`` (which expects the 50 items ``workload`` left).
- ``tail``: a new database holding one session of ``N`` items (one bulk write); the median time
  of ``R`` reads of its last 20 items.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

CONCURRENCY = 8
SMALL_ITEMS = 50
LAST = 50
TAIL = 20
TEXT_BYTES = 400


def item_text(i: int) -> str:
    """The text of item ``i``: about 400 bytes of ordinary prose, different for every item."""
    head = f"message {i}: "
    body = "the quick brown fox jumps over the lazy dog while the agent thinks; "
    return (head + body * 8)[:TEXT_BYTES]


def item_role(i: int) -> str:
    """Items alternate between the user and the assistant."""
    return "user" if i % 2 == 0 else "assistant"


class Peer:
    """One peer library's session backend, reduced to what the workload needs."""

    name = "peer"
    tail_api = True
    """Whether the library can read only the last N items of a session."""
    notes: list[str]
    """What the figures should be read with (set by the peer, printed with them)."""

    def __init__(self) -> None:
        self.notes = []

    def recall(self, db: str) -> None:
        """Load what a caller holds before it opens ``db`` (the harness's own names), unclocked.

        A peer whose sessions are named by the caller holds nothing; one that makes its own ids
        keeps the workload's names beside the database, as an application keeps its ids.
        """

    async def open(self, db: str) -> None:
        """Open (and create when new) the database at ``db``."""
        raise NotImplementedError

    async def session(self, session_id: str) -> Any:
        """A handle on a session, created when new."""
        raise NotImplementedError

    async def write(self, handle: Any, i: int) -> None:
        """Persist item ``i`` in the session (one write, committed)."""
        raise NotImplementedError

    async def bulk(self, handle: Any, count: int) -> None:
        """Persist items 0..count-1 at once (the fastest way the library offers)."""
        for i in range(count):
            await self.write(handle, i)

    async def read_all(self, handle: Any) -> list[Any]:
        """Every item of the session, oldest first."""
        raise NotImplementedError

    async def read_last(self, handle: Any, n: int) -> list[Any]:
        """The last ``n`` items of the session."""
        raise NotImplementedError

    async def pragmas(self) -> dict[str, Any]:
        """The journal mode and synchronous setting of the library's connection."""
        return {}

    async def close(self) -> None:
        """Release the database."""


def _median_time(samples: list[float]) -> float:
    return statistics.median(samples)


async def _timed(awaitable: Any) -> tuple[float, Any]:
    begin = time.perf_counter()
    result = await awaitable
    return time.perf_counter() - begin, result


async def timed_writes(
    write: Callable[[Any, int], Awaitable[None]], first: Any, handles: list[Any], items: int
) -> dict[str, Any]:
    """The workload's writes: ``items`` awaited to ``first``, then ``items`` by one coroutine a
    handle of ``handles`` (``items // len(handles)`` each); ``write(handle, i)`` writes item ``i``.
    """
    begin = time.perf_counter()
    for i in range(items):
        await write(first, i)
    write_seq = time.perf_counter() - begin
    per_session = items // len(handles)

    async def worker(handle: Any) -> None:
        for i in range(per_session):
            await write(handle, i)

    begin = time.perf_counter()
    await asyncio.gather(*(worker(h) for h in handles))
    write_8way = time.perf_counter() - begin
    return {
        "write_seq": write_seq,
        "write_8way": write_8way,
        "written_8way": per_session * len(handles),
    }


async def workload(peer: Peer, db: str, items: int, reads: int) -> dict[str, Any]:
    """Writes (sequential, 8-way), reads (all, last 50) and a small session for ``open_read``."""
    await peer.open(db)
    first = await peer.session("seq")
    handles = [await peer.session(f"conc{k}") for k in range(CONCURRENCY)]
    written = await timed_writes(peer.write, first, handles, items)
    read_all: list[float] = []
    read_last: list[float] = []
    for _ in range(reads):
        took, got = await _timed(peer.read_all(first))
        if len(got) != items:
            raise RuntimeError(f"{peer.name}: read {len(got)} items, wrote {items}")
        read_all.append(took)
        if peer.tail_api:
            took, got = await _timed(peer.read_last(first, LAST))
            if len(got) != LAST:
                raise RuntimeError(f"{peer.name}: last {LAST} gave {len(got)} items")
            read_last.append(took)
    small = await peer.session("small")
    for i in range(SMALL_ITEMS):
        await peer.write(small, i)
    out = {
        "items": items,
        **written,
        "read_all": _median_time(read_all),
        "read_last50": _median_time(read_last) if read_last else None,
        "pragmas": await peer.pragmas(),
        "notes": peer.notes,
    }
    await peer.close()
    return out


async def open_read(peer: Peer, db: str) -> dict[str, Any]:
    """A new process's open of an existing database and first read of one small session."""
    peer.recall(db)
    begin = time.perf_counter()
    await peer.open(db)
    got = await peer.read_all(await peer.session("small"))
    took = time.perf_counter() - begin
    if len(got) != SMALL_ITEMS:
        raise RuntimeError(f"{peer.name}: the small session read {len(got)} items")
    await peer.close()
    return {"open_read": took}


async def open_write(peer: Peer, db: str) -> dict[str, Any]:
    """A new process's open of an existing database and first write to one small session."""
    peer.recall(db)
    begin = time.perf_counter()
    await peer.open(db)
    await peer.write(await peer.session("small"), SMALL_ITEMS)
    took = time.perf_counter() - begin
    await peer.close()
    return {"open_write": took}


async def tail(peer: Peer, db: str, items: int, reads: int) -> dict[str, Any]:
    """The median time to read the last 20 items of an ``items``-item session."""
    await peer.open(db)
    handle = await peer.session("tail")
    await peer.bulk(handle, items)
    await peer.read_last(handle, TAIL)  # warm-up
    samples = []
    for _ in range(reads):
        took, got = await _timed(peer.read_last(handle, TAIL))
        if len(got) != TAIL:
            raise RuntimeError(f"{peer.name}: last {TAIL} gave {len(got)} items")
        samples.append(took)
    await peer.close()
    return {"tail": _median_time(samples), "items": items, "notes": peer.notes}


def main(peer: Peer) -> None:
    """Run the mode named on the command line and print its figures as one JSON object."""
    parser = argparse.ArgumentParser(description=f"{peer.name} under the bench's workload")
    parser.add_argument("mode", choices=("workload", "open_read", "open_write", "tail"))
    parser.add_argument("--db", required=True)
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--reads", type=int, default=5)
    args = parser.parse_args()
    if args.mode == "workload":
        out = asyncio.run(workload(peer, args.db, args.items, args.reads))
    elif args.mode == "open_read":
        out = asyncio.run(open_read(peer, args.db))
    elif args.mode == "open_write":
        out = asyncio.run(open_write(peer, args.db))
    else:
        out = asyncio.run(tail(peer, args.db, args.items, args.reads))
    out["peer"] = peer.name
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
