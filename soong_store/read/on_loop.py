"""Small reads on the caller's event loop thread, with every wait sent to a reader thread.

A timeline page or a path's tail takes a few hundred µs of SQLite and Python; handing it to a
reader thread and back cost ~0.15 ms more on the machine ``docs/performance.md`` measures (a
thread woken on the other CPU, then the loop in turn). Where the backend allows it
(:attr:`~soong_store.backends.base.Capabilities.reads_on_loop`), a read the store marks small runs
on the loop's thread, on a read connection the reader threads leave idle, as the writer runs
its batches there at durability ``normal``. The loop must not wait, so:

- while the loop has it, the connection's busy handler does not wait (``busy_timeout`` 0): a
  busy database, like any driver error, hands the read to a reader thread, which waits and
  retries as every read does. (SQLite's own short retries while another connection changes the
  WAL index are not the busy handler's; the writer's batches on the loop meet them too.)
- a read that must first attach a shard (:class:`~soong_store.backends.values.BeforeBegin`)
  goes to a reader thread, which attaches it;
- a read is small by its arguments (a row, a page of at most :data:`SMALL_ROWS` rows) or by a
  budget: a path is read on the loop while its walk reads at most
  :data:`SMALL_ROWS` nodes from the database (the path cache holds the rest), and a session's
  agents, runs, artifacts or a node's children while they are at most :data:`SMALL_ROWS`;
  else (:class:`~soong_store.backends.values.ReadOnAThread`) on a reader thread;
- no read makes a connection on the loop (connecting parses the schema and may switch the
  journal mode): with none idle, the read goes to a reader thread. (A store's open may make its
  first one there, under conditions of its own: :mod:`soong_store.store.runtime`.)
- that first connection may be a :class:`~soong_store.backends.link.DriverLink`, with no
  engine made yet: the reads that run on a :class:`~soong_store.backends.link.Link`
  (:meth:`LoopReads.run_on_link`: a path, a session's row, a timeline page) run on it as it
  is; any other read makes the engine there, whose pool takes the link's connection over
  without a statement that could wait (the link was set up as its connections are; only its
  busy wait is turned on), and then runs. A link is only ever read on a loop, so its busy
  handler stays off for its whole life.

A read handed to a thread runs there again from the start (reads change nothing), and what the
thread answers or raises is the result. A read that raises the store's own error on the loop (a
session not found, a damaged row) raises it from there: the thread would raise the same.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from functools import partial
from typing import Final, TypeVar

from sqlalchemy import Connection

from soong_store.backends.link import DriverLink, Link
from soong_store.backends.values import BeforeBegin, ReadOnAThread
from soong_store.errors import SoongStoreError
from soong_store.read.readers import ReaderThreads

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
    """Reads run on the calling event loop's thread, on an idle connection of ``readers``.

    Threading contract: :meth:`run` is called on an event loop's thread and waits for no lock
    the database holds (it answers :data:`MISSED` instead).
    """

    def __init__(
        self, readers: ReaderThreads, wait_for_locks: Callable[[Link, bool], None]
    ) -> None:
        self._readers = readers
        self._wait_for_locks = wait_for_locks

    def run(self, query: Callable[[Connection], T]) -> T | _Missed:
        """``query`` in one snapshot on an idle engine connection, or :data:`MISSED`.

        An idle link is taken over by the engine, made here (:meth:`ReaderThreads.take_over`).
        """
        lent = self._readers.lend()
        connection = self._readers.take_over(lent) if isinstance(lent, DriverLink) else lent
        if connection is None:
            return MISSED
        return self._run(connection, partial(query, connection))

    def run_on_link(self, query: Callable[[Link], T]) -> T | _Missed:
        """``query`` in one snapshot on any idle read connection (a link too), or :data:`MISSED`."""
        connection = self._readers.lend()
        if connection is None:
            return MISSED
        return self._run(connection, partial(query, connection))

    def _run(self, connection: Connection | DriverLink, query: Callable[[], T]) -> T | _Missed:
        try:
            if isinstance(connection, Connection):  # a link never waits (see the module)
                self._wait_for_locks(connection, False)
            with connection.begin():
                result = query()
        except (BeforeBegin, ReadOnAThread):  # a shard to attach, or more to read than here
            self._give_back(connection)
            return MISSED
        except SoongStoreError:
            self._give_back(connection)
            raise
        except Exception:  # busy, or the driver failed: a reader thread reads, with its retries
            self._readers.discard(connection)
            return MISSED
        except BaseException:
            self._readers.discard(connection)
            raise
        self._give_back(connection)
        return result

    def _give_back(self, connection: Connection | DriverLink) -> None:
        """Leave ``connection`` idle for the reader threads, waiting for locks again."""
        try:
            if isinstance(connection, Connection):
                self._wait_for_locks(connection, True)
        except Exception:  # its lock wait may still be off: never used again
            self._readers.discard(connection)
            return
        self._readers.keep(connection)
