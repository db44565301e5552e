"""What erasure costs: appends and ``delete_session`` with the store's erasure against without.

Run: ``python bench/bench_erasure.py [--rounds N] [--appends N] [--sessions N] [--background N]``.

Erasure (docs/operations.md, "Erasure") is three things: ``PRAGMA secure_delete`` on every
connection (freed cells and pages are zeroed: this is what an append can pay, when the session
row it updates is rewritten), and, at the close of a store that deleted or redacted, FTS5's
``optimize`` and a ``TRUNCATE`` checkpoint. The baseline is the same store with the three turned
off (the pragma set off on its connections, the close's two steps skipped), measured
in the same run, sides interleaved (``bench/_harness.py``). Figures:

- **append**: the median seconds of one ``append_node`` (a short text), ``--appends`` per side
  and round, on a store open for the side (its home kept from round to round);
- **delete + close**: ``--sessions`` sessions of 20 nodes deleted, then the store closed, in a
  home that also holds ``--background`` nodes of other sessions (the index the close rewrites);
- **delete**: the same deletions without the close.

The target is the issue's: appends under 1.2x. Deletion has no target: its figures say what the
rewrite at close costs, which grows with the index.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _harness import compare, interleave, table, timed

from soong_store import SessionStore
from soong_store.backends.sqlite import connect as sqlite_connect
from soong_store.store import runtime as store_runtime

_PRAGMAS = sqlite_connect._pragmas
_ERASE_INDEX = store_runtime._erase_index
_FINISH = store_runtime._finish_erasure


@contextmanager
def without_erasure() -> Iterator[None]:
    """Stores opened (and closed) in the block keep no erasure: the baseline."""

    def pragmas(*args: Any) -> list[str]:  # off, not left out: a library may default to on
        return [p.replace("= ON", "= OFF") if "secure_delete" in p else p for p in _PRAGMAS(*args)]

    async def erase_index(writer: Any) -> None:
        return None

    def finish(backend: Any, engine: Any) -> None:
        return None

    sqlite_connect._pragmas = pragmas
    store_runtime._erase_index = erase_index  # type: ignore[assignment]
    store_runtime._finish_erasure = finish
    try:
        yield
    finally:
        sqlite_connect._pragmas = _PRAGMAS
        store_runtime._erase_index = _ERASE_INDEX
        store_runtime._finish_erasure = _FINISH


def text(i: int) -> list[dict[str, str]]:
    return [{"type": "text", "text": f"turn {i}: a sentence of ordinary words, number {i * 7}"}]


async def fill(store: SessionStore, nodes: int) -> str:
    sid = (await store.create_session(cwd=".")).session_id
    async with store.transaction(sid) as tx:
        for i in range(nodes):
            tx.add_node("user" if i % 2 == 0 else "assistant", "message", text(i))
    return sid


class Appends:
    """One side of the append figure: its own home, a store opened per round."""

    def __init__(self, root: Path, name: str, erasure: bool, count: int) -> None:
        self.home = root / name
        self.erasure = erasure
        self.count = count

    async def __call__(self) -> float:
        with _maybe(self.erasure):
            async with SessionStore(home=self.home) as store:
                sid = await fill(store, 1)
                i = iter(range(10**9))
                return await timed(
                    lambda: store.append_node(sid, "user", "message", text(next(i))), self.count
                )


class Deletes:
    """One side of the delete figures: a copy of a filled home per round, sessions deleted."""

    def __init__(self, root: Path, name: str, erasure: bool, args: argparse.Namespace) -> None:
        self.root = root / name
        self.erasure = erasure
        self.args = args
        self.rounds = 0
        self.deletes: list[float] = []

    async def __call__(self) -> float:
        self.rounds += 1
        home = self.root / str(self.rounds)
        with _maybe(self.erasure):
            store = SessionStore(home=home)
            await store.open()
            for _ in range(max(1, self.args.background // 1000)):
                await fill(store, min(1000, self.args.background))
            sids = [await fill(store, 20) for _ in range(self.args.sessions)]
            await store.search("ordinary")  # every row in the index's segments
            begin = time.perf_counter()
            for sid in sids:
                await store.delete_session(sid)
            self.deletes.append(time.perf_counter() - begin)
            await store.close()
            return time.perf_counter() - begin


@contextmanager
def _maybe(erasure: bool) -> Iterator[None]:
    if erasure:
        yield
    else:
        with without_erasure():
            yield


async def run(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory(prefix="soong-bench-erasure-") as tmp:
        root = Path(tmp)
        appends = await interleave(
            args.rounds,
            {
                "erasure": Appends(root, "a-on", True, args.appends),
                "none": Appends(root, "a-off", False, args.appends),
            },
        )
        on, off = Deletes(root, "d-on", True, args), Deletes(root, "d-off", False, args)
        closes = await interleave(args.rounds, {"erasure": on, "none": off})
    deletes = {"erasure": on.deletes, "none": off.deletes}
    workload = f"{args.sessions} sessions of 20 nodes, {args.background} other nodes"
    figures = [
        compare(
            "erasure",
            "append_node",
            f"{args.appends} appends per round",
            appends,
            "erasure",
            "none",
            target="<= 1.2x",
            max_time_ratio=1.2,
        ),
        compare("erasure", "delete_session", workload, deletes, "erasure", "none", target="-"),
        compare(
            "erasure",
            "delete_session + close",
            workload,
            closes,
            "erasure",
            "none",
            target="-",
        ),
    ]
    head = f"{args.rounds} rounds; baseline: the same store without erasure ('none')"
    return head + "\n\n" + table(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--background", type=int, default=10_000)
    print(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
