"""The floor of the store's write design: raw's statements run by one writer thread, awaited.

The store's specification has every write go through one FIFO queue into a write connection
owned by a thread of its own, callers awaiting futures, queued jobs committed together.
:class:`ThreadedRaw` is the least that design can be: :class:`_raw.RawWriter`'s statements (no
validation, no records, no search row, no Python bookkeeping), a ``SimpleQueue`` into one
thread, the jobs waiting when it wakes run in one ``BEGIN IMMEDIATE`` transaction with a
savepoint each, and their futures set by one ``call_soon_threadsafe`` per batch. Whatever the
store costs over this figure is its own; what this figure costs over raw is the design's (the
thread hand-offs both ways), on this machine.
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
        connection = self._raw.connection
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
            connection.execute("BEGIN IMMEDIATE")
            single = len(batch) == 1
            for sid, role, content_json, _future, _loop in batch:
                if not single:
                    connection.execute("SAVEPOINT job")
                self._raw.statements(sid, role, content_json)
                if not single:
                    connection.execute("RELEASE job")
            connection.execute("COMMIT")
            by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            for *_, future, loop in batch:
                by_loop.setdefault(loop, []).append(future)
            for loop, futures in by_loop.items():
                loop.call_soon_threadsafe(_settle, futures)
            if stop:
                return


def _settle(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)
