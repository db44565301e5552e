"""Small reads on the caller's event loop thread, with every wait sent to a reader thread.

A timeline page or a path's tail takes a few hundred µs of SQLite and Python; handing it to a
reader thread and back cost ~0.15 ms more on the machine ``docs/performance.md`` measures (a
thread woken on the other CPU, then the loop in turn). Where the backend allows it
(:attr:`~soong_store.backends.base.Backend.reads_on_loop`), a read the store marks small runs
on the loop's thread, on one read connection kept for that, as the writer runs its batches there
at durability ``normal``. The loop must not wait, so:

- the connection's busy handler does not wait (``busy_timeout`` 0): a busy database, like any
  driver error, hands the read to a reader thread, which waits and retries as every read does.
  (SQLite's own short retries while another connection changes the WAL index are not the busy
  handler's; the writer's batches on the loop meet them too.)
- a read that must first attach a shard (:class:`~soong_store.backends.values.BeforeBegin`)
  goes to a reader thread, which attaches it on its own connection;
- the connection is never made on the loop (connecting parses the schema and may switch the
  journal mode): a reader thread that has just run a small read hands its own connection over
  (:meth:`LoopReads.adopt`) while none is kept;
- one loop reads on it at a time; another loop's thread finding it taken goes to the threads.

A read handed to a thread runs there again from the start (reads change nothing), and what the
thread answers or raises is the result. A read that raises the store's own error on the loop (a
session not found, a damaged row) raises it from there: the thread would raise the same.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from enum import Enum
from typing import Final, TypeVar

from sqlalchemy import Connection

from soong_store.backends.values import BeforeBegin
from soong_store.errors import SoongStoreError

T = TypeVar("T")

SMALL_ROWS = 256
"""The most rows a read run on the loop asks for (a page, a path's tail); more go to a thread."""


def small(limit: object) -> bool:
    """Whether a read of at most ``limit`` rows is small enough for the loop."""
    return type(limit) is int and 0 < limit <= SMALL_ROWS


class _Missed(Enum):
    """What :meth:`LoopReads.run` answers when the read must go to a reader thread."""

    MISSED = "missed"


MISSED: Final = _Missed.MISSED


class LoopReads:
    """The loop's read connection, and the reads run on it (see the module docstring).

    Threading contract: :meth:`run` is called on an event loop's thread and never waits for a
    lock (it answers :data:`MISSED` instead); :meth:`adopt` on a reader thread; :meth:`close`
    once, when the store closes.
    """

    def __init__(self, wait_for_locks: Callable[[Connection, bool], None]) -> None:
        self._wait_for_locks = wait_for_locks
        self._lock = threading.Lock()
        self._connection: Connection | None = None
        self._closed = False

    @property
    def wanted(self) -> bool:
        """Whether the slot is empty (a reader thread may hand its connection over)."""
        return self._connection is None and not self._closed

    def run(self, query: Callable[[Connection], T]) -> T | _Missed:
        """``query`` in one snapshot on the loop's connection, or :data:`MISSED`."""
        if not self._lock.acquire(blocking=False):
            return MISSED
        try:
            connection = self._connection
            if connection is None:
                return MISSED
            try:
                with connection.begin():
                    return query(connection)
            except BeforeBegin:  # a shard to attach: the thread's connection attaches it
                return MISSED
            except SoongStoreError:
                raise
            except Exception:  # busy, or the driver failed: the thread reads with its retries
                self._drop()
                return MISSED
        finally:
            self._lock.release()

    def adopt(self, connection: Connection) -> bool:
        """Keep ``connection`` (a reader thread's, idle) for the loop's reads, if none is kept.

        False: it was not taken, and stays the caller's.
        """
        with self._lock:
            if self._connection is not None or self._closed:
                return False
            self._wait_for_locks(connection, False)
            self._connection = connection
            return True

    def close(self) -> None:
        """Give the connection back (its lock wait restored) and take no other."""
        with self._lock:
            self._closed = True
            self._drop()

    def _drop(self) -> None:
        """Let the connection go (lock held): back to the pool as the store's other readers."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            self._wait_for_locks(connection, True)
        except Exception:  # it is broken: the pool must not hand it out again
            connection.invalidate()
        connection.close()
