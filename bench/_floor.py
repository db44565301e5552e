"""The floors of the store's write design: raw's statements run the way the store runs a write.

Every write goes through one FIFO queue into one write connection, queued jobs committed
together. Two ways run it, and each has a floor here: :class:`_raw.RawWriter`'s statements (no
validation, no records, no Python bookkeeping) run that way and nothing else. Whatever the store
costs over a floor is its own; what the floor costs over raw is the design's, on this machine.

- :class:`ThreadedRaw`: a writer thread of its own (the store at ``durability="full"``): a
  ``SimpleQueue`` into one thread, the jobs waiting when it wakes run in one ``BEGIN
  IMMEDIATE`` transaction with a savepoint each, their futures set by one
  ``call_soon_threadsafe`` per batch (the thread hand-offs both ways).
- :class:`LoopRaw`: the batch of one event loop's turn committed at the end of that turn on the
  loop's own thread (the store at ``durability="normal"`` while its writer's thread is idle),
  each caller answered in the next turn: the loop's turns, no hand-off.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

from _raw import RawWriter

_STOP = object()
_MAX_BATCH = 64


class ThreadedRaw:
    """``RawWriter`` behind a writer thread: ``await append(...)`` as a store caller would."""

    def __init__(self, raw: RawWriter) -> None:
        self._raw = raw
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name="floor-writer", daemon=True)
        self._thread.start()

    async def append(self, sid: str, role: str, content_json: str) -> None:
        """One append in the writer thread (committed with whatever else waits there)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((sid, role, content_json, future, loop))
        await future

    def close(self) -> None:
        """Stop the thread once every queued append ran."""
        self._queue.put(_STOP)
        self._thread.join()

    def _main(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch = [first]
            stop = False
            while len(batch) < _MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)
            _commit(self._raw, [(sid, role, text) for sid, role, text, *_ in batch])
            by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            for *_, future, loop in batch:
                by_loop.setdefault(loop, []).append(future)
            for loop, futures in by_loop.items():
                loop.call_soon_threadsafe(_settle, futures)
            if stop:
                return


def _commit(raw: RawWriter, appends: list[tuple[str, str, str]]) -> None:
    """Raw's appends in one ``BEGIN IMMEDIATE`` transaction, a savepoint each when several."""
    connection = raw.connection
    connection.execute("BEGIN IMMEDIATE")
    single = len(appends) == 1
    for sid, role, content_json in appends:
        if not single:
            connection.execute("SAVEPOINT job")
        raw.statements(sid, role, content_json)
        if not single:
            connection.execute("RELEASE job")
    connection.execute("COMMIT")


def _settle(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class LoopRaw:
    """``RawWriter``'s appends of one loop turn, committed together at its end on its thread."""

    def __init__(self, raw: RawWriter) -> None:
        self._raw = raw
        self._batch: list[tuple[str, str, str, asyncio.Future[None]]] | None = None

    async def append(self, sid: str, role: str, content_json: str) -> None:
        """One append in this turn's batch (run at the turn's end, answered in the next)."""
        loop = asyncio.get_running_loop()
        if self._batch is None:
            self._batch = []
            loop.call_soon(self._run)
        future = loop.create_future()
        self._batch.append((sid, role, content_json, future))
        await asyncio.sleep(0)
        if not future.done():
            await future

    def close(self) -> None:
        """Nothing is left behind: every batch ran at the end of its turn."""

    def _run(self) -> None:
        batch, self._batch = self._batch or [], None
        _commit(self._raw, [(sid, role, text) for sid, role, text, _ in batch])
        _settle([future for *_, future in batch])
