"""The reader threads: each runs reads on a connection of its own, kept while the thread lives.

A read is small (a timeline page, a path's tail), so what it costs around its statements
matters: a ``ThreadPoolExecutor`` hand-off builds and chains two futures per call, and a pool
checkout per read builds a ``Connection`` and resets it on return. Here a read is queued with
its caller's loop and future, a waiting reader thread takes it, and the result goes back by one
``call_soon_threadsafe``. Each thread checks one connection out of the read engine's pool at
its first read and keeps it (the pool is as large as the thread count); a read that fails lets
its thread's connection go back to the pool, which resets it, so the next read starts on a clean
one. A store's open runs as the first job of its reader threads, before their engine is
bound, so that the thread it starts serves the first read too. Closing ends every thread, each
returning its connection before it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from soong_store.errors import StoreClosed

T = TypeVar("T")

_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class ReaderThreads:
    """Up to ``size`` threads serving reads FIFO, started as reads need them.

    Threading contract: :meth:`submit` is called on an event loop's thread and returns a future
    of that loop; the work runs on a reader thread, where :meth:`connection` is that thread's
    connection. :meth:`shutdown` (not on a reader thread) lets queued reads finish, then ends
    the threads. A read whose caller's loop is gone by the time it ends is dropped. Made
    without an engine, the threads run only work that needs no connection until
    :meth:`bind` gives them one.
    """

    def __init__(self, engine: Engine | None, size: int, name: str) -> None:
        self._engine = engine
        self._size = size
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._closed = False

    def submit(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``work`` for a reader thread; its result (or error) comes back on this loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:  # nothing is queued behind the shutdown's stops, where no thread takes it
            if self._closed:
                raise StoreClosed("the store is not open")
            self._jobs.put((work, loop, future))
        if not self._idle.acquire(blocking=False):
            self._grow()
        return future

    def _grow(self) -> None:
        with self._lock:
            if self._closed or len(self._threads) >= self._size:
                return
            thread = threading.Thread(
                target=self._serve, name=f"{self._name}_{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def bind(self, engine: Engine) -> None:
        """Give the threads the engine they connect on (once, before any read is queued)."""
        self._engine = engine

    def connection(self) -> Connection:
        """The calling reader thread's connection, checked out at its first read."""
        held: Connection | None = getattr(self._local, "connection", None)
        if held is None or held.closed or held.invalidated:
            engine = self._engine
            if engine is None:
                raise StoreClosed("the store is not open")
            held = self._local.connection = engine.connect()
        return held

    def hand_over(self, take: Callable[[Connection], bool]) -> None:
        """Offer the calling thread's connection to ``take`` (the next read checks out another)."""
        held: Connection | None = getattr(self._local, "connection", None)
        if held is not None and not held.closed and not held.invalidated and take(held):
            self._local.connection = None

    def release(self) -> None:
        """Give the calling thread's connection back to the pool (reset there); after a failure."""
        held: Connection | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if held is not None:
            held.close()

    def _serve(self) -> None:
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                work, loop, future = job
                del job
                if future.cancelled():
                    self._idle.release()
                    continue
                try:
                    result = work()
                except BaseException as exc:
                    self._idle.release()
                    _hand_back(loop, _fail, future, exc)
                    del exc
                else:
                    # Idle before the caller hears of it: its next read must find this thread
                    # free, not start another.
                    self._idle.release()
                    _hand_back(loop, _succeed, future, result)
                    del result
                del work, loop, future
        finally:
            self.release()

    def shutdown(self, wait: bool = True) -> None:
        """Run what is queued, then end the threads (each returns its connection).

        ``wait=False`` does not join them (what a reader thread itself may call).
        """
        with self._lock:
            self._closed = True
            threads = list(self._threads)
            for _ in threads:
                self._jobs.put(None)
        if wait:
            for thread in threads:
                thread.join()


def _hand_back(
    loop: asyncio.AbstractEventLoop,
    settle: Callable[[asyncio.Future[Any], Any], None],
    future: asyncio.Future[Any],
    value: Any,
) -> None:
    with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody awaits it
        loop.call_soon_threadsafe(settle, future, value)


def _succeed(future: asyncio.Future[Any], result: Any) -> None:
    if not future.cancelled():
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.cancelled():
        future.set_exception(exc)
