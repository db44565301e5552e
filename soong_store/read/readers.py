"""The reader threads, and the read connections they keep checked out between reads.

A read is small (a timeline page, a path's tail), so what it costs around its statements
matters: a ``ThreadPoolExecutor`` hand-off builds and chains two futures per call, and a pool
checkout per read builds a ``Connection`` and resets it on return. Here a read is queued with
its caller's loop and future, a waiting reader thread takes it, and the result goes back by one
``call_soon_threadsafe``. The connections stay checked out of the read engine's pool between
reads (the pool is as large as the thread count): a read takes an idle one, or checks one out
when none is idle, and leaves it idle again when it ends; a read that fails lets its connection
go back to the pool, which resets it, so the next read starts on a clean one. An event loop may
borrow an idle one for a read of its own (:meth:`ReaderThreads.lend`, :class:`LoopReads`); no
connection is ever made for it. A store's open that does not run on its caller's loop runs as
the first job of its reader threads, before their engine is bound, so that the thread it starts
serves the first read too; either way it leaves its connection idle for that read. An open on
the caller's loop leaves a :class:`~soong_store.backends.link.DriverLink` instead, and no
engine: the first read that needs one makes it (on a thread, or on a loop:
:meth:`ReaderThreads.take_over`), taking the link's driver connection over as the pool's first.
Closing ends every thread and returns every connection.

Where a read runs (:class:`LoopReads`): small reads on the caller's event loop thread, with
every wait sent to a reader thread.

A timeline page or a path's tail takes a few hundred µs of SQLite and Python; handing it to a
reader thread and back cost ~0.15 ms more on the machine ``docs/performance.md`` measures (a
thread woken on the other CPU, then the loop in turn). Where the backend allows it
(:attr:`~soong_store.backends.base.Capabilities.reads_on_loop`), a read the store marks small runs
on the loop's thread, on a read connection the reader threads leave idle, as the writer runs
its batches there at durability ``normal``. The loop must not wait, so:

- while the loop has it, the connection's busy handler does not wait (``busy_timeout`` 0): a
  busy database, like any driver error, hands the read to a reader thread, which waits and
  retries as every read does. (SQLite's own short retries while another connection changes the
  WAL index are not the busy handler's; the writer's batches on the loop meet them too.) The
  wait is switched as the connection changes hands, as the writer's is: off when a loop's read
  first takes it (:data:`NO_WAIT`), on again when a reader thread takes it, so that loop reads
  one after another switch nothing.
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

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Any, Final, TypeVar

from sqlalchemy import Connection, Engine

from soong_store.backends.link import DriverLink, Link
from soong_store.backends.values import BeforeBegin, ReadOnAThread
from soong_store.errors import SoongStoreError, StoreClosed

T = TypeVar("T")

_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]
_Idle = Connection | DriverLink


class ReaderThreads:
    """Up to ``size`` threads serving reads FIFO, started as reads need them.

    Threading contract: :meth:`submit` is called on an event loop's thread and returns a future
    of that loop; the work runs on a reader thread, where :meth:`connection` is the connection
    of its read. :meth:`shutdown` (not on a reader thread) lets queued reads finish, then ends
    the threads. A read whose caller's loop is gone by the time it ends is dropped. Made
    without an engine, the threads run only work that needs no connection until
    :meth:`bind` gives them one. :meth:`lend`, :meth:`keep` and :meth:`discard` may be called
    on any thread.
    """

    def __init__(self, engine: Engine | None, size: int, name: str) -> None:
        self._engine = engine
        self._make: Callable[[DriverLink | None], Engine] | None = None
        self._making = threading.Lock()  # an event loop only tries it: it never waits
        self._size = size
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._connections = _Connections(size)
        self._closed = False
        self._wait_for_locks: Callable[[Link, bool], None] | None = None

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

    def bind(self, engine: Engine, first: Connection) -> None:
        """Give the threads the engine they connect on and its first connection, left idle.

        Once, before any read is queued.
        """
        self._engine = engine
        self._connections.add(first)

    def bind_link(self, first: DriverLink, make: Callable[[DriverLink | None], Engine]) -> None:
        """Leave ``first`` idle, and make the engine with ``make`` when a read first needs it.

        ``make`` takes over the link it is given (it closes it if it fails). Once, before any
        read is queued.
        """
        self._make = make
        self._connections.add(first)

    @property
    def engine(self) -> Engine | None:
        """The engine the threads connect on, once made."""
        return self._engine

    def connection(self) -> Connection:
        """The connection of the calling thread's read: an idle one, else checked out now.

        With every connection of the pool taken, it waits for one to be kept again: only an
        event loop's read can hold one while every thread has its own, and that never waits.
        """
        held: Connection | None = getattr(self._local, "connection", None)
        if held is None or held.closed or held.invalidated:
            taken = self._connections.take(self._connect)
            if taken.info.get(NO_WAIT):
                self._wait_again(taken)
            held = self._local.connection = taken
        return held

    def _wait_again(self, connection: Connection) -> None:
        """Turn the lock wait of a connection a loop read last back on (a thread's read waits)."""
        try:
            assert self._wait_for_locks is not None, "only a loop's read turns it off"
            self._wait_for_locks(connection, True)
        except BaseException:  # its lock wait may still be off: never used again
            self.discard(connection)
            raise
        del connection.info[NO_WAIT]

    def lend_to_loops(self, wait_for_locks: Callable[[Link, bool], None]) -> None:
        """Let event loops borrow idle connections; ``wait_for_locks`` switches their lock wait."""
        self._wait_for_locks = wait_for_locks

    def _connect(self, link: DriverLink | None) -> Connection:
        """A new connection of the engine, made now if need be (taking ``link``'s over)."""
        with self._making:
            engine = self._engine
            if engine is None:
                if self._make is None:
                    raise StoreClosed("the store is not open")
                engine = self._engine = self._make(link)
                link = None
        if link is not None:  # the engine was made meanwhile, on another connection
            link.close()
        return engine.connect()

    def take_over(self, link: DriverLink) -> Connection | None:
        """``link`` as the first connection of the engine, made now (on a loop: no wait).

        Making the engine and taking the link over waits for no lock (the pool only turns the
        link's busy wait on). ``None``: the engine exists already or is being made, and
        ``link`` is idle again; or making it failed, and ``link`` is gone (a thread's
        :meth:`connection` then makes it, and reports the error).
        """
        if not self._making.acquire(blocking=False):
            self.keep(link)
            return None
        try:
            if self._engine is not None or self._make is None:
                self.keep(link)
                return None
            try:
                engine = self._engine = self._make(link)
                return engine.connect()
            except Exception:
                self._connections.drop(link)
                return None
        finally:
            self._making.release()

    def lend(self) -> _Idle | None:
        """An idle connection, until :meth:`keep` or :meth:`discard` (``None``: none is idle)."""
        return self._connections.lend()

    def keep(self, connection: _Idle) -> None:
        """Leave ``connection`` idle for the next read (back to the pool once closed)."""
        self._connections.keep(connection)

    def discard(self, connection: _Idle) -> None:
        """Close ``connection`` for good (the pool makes another when one is needed)."""
        connection.invalidate()
        self._connections.drop(connection)

    def _done(self) -> None:
        """The calling thread's read is over: its connection idle again."""
        held: Connection | None = getattr(self._local, "connection", None)
        if held is not None:
            self._local.connection = None
            self._connections.keep(held)

    def release(self) -> None:
        """Give the calling thread's connection back to the pool (reset there); after a failure."""
        held: Connection | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if held is not None:
            self._connections.drop(held)

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
                    self._done()
                    self._idle.release()
                    _hand_back(loop, _fail, future, exc)
                    del exc
                else:
                    # Idle before the caller hears of it: its next read must find this thread
                    # and its connection free, not start another.
                    self._done()
                    self._idle.release()
                    _hand_back(loop, _succeed, future, result)
                    del result
                del work, loop, future
        finally:
            self.release()

    def shutdown(self, wait: bool = True) -> None:
        """Run what is queued, end the threads, then return every read connection to the pool.

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
        self._connections.close()


class _Connections:
    """The read connections kept checked out between reads: at most the pool's size.

    Each is idle, or taken by one read (on a reader thread, or lent to an event loop). A thread
    that needs one takes an idle one, checks a new one out while fewer than ``size`` are kept,
    or waits for one to be kept again; a loop is lent an idle one or none.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._changed = threading.Condition()
        self._idle: list[_Idle] = []
        self._kept = 0
        self._closed = False

    def add(self, connection: _Idle) -> None:
        with self._changed:
            self._kept += 1
        self.keep(connection)

    def lend(self) -> _Idle | None:
        with self._changed:
            return self._idle_one()

    def take(self, connect: Callable[[DriverLink | None], Connection]) -> Connection:
        """An idle engine connection, else one ``connect`` makes (from an idle link, if any)."""
        with self._changed:
            while (found := self._idle_one()) is None:
                if self._kept < self._size:
                    self._kept += 1
                    break
                self._changed.wait()
        if isinstance(found, Connection):
            return found
        try:
            return connect(found)
        except BaseException:
            self._forget()
            raise

    def keep(self, connection: _Idle) -> None:
        with self._changed:
            if not self._closed:
                self._idle.append(connection)
                self._changed.notify()
                return
        self.drop(connection)

    def drop(self, connection: _Idle) -> None:
        connection.close()
        self._forget()

    def close(self) -> None:
        """Return the idle ones to the pool, and each one taken as it is kept again."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            self._changed.notify_all()
        for connection in idle:
            self.drop(connection)

    def _idle_one(self) -> _Idle | None:
        while self._idle:
            connection = self._idle.pop()
            if not (connection.closed or connection.invalidated):
                return connection
            self._kept -= 1
        return None

    def _forget(self) -> None:
        with self._changed:
            self._kept -= 1
            self._changed.notify()


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


NO_WAIT = "soong_store.loop_no_wait"
"""Set in a read connection's ``info`` (its pool record's) while its lock wait is off: a loop's
read turned it off, and the next reader thread to take it turns it on again. Kept in the pool
record so that it outlives a return to the pool; an invalidated connection loses it with its
driver connection."""

SMALL_ROWS = 256
"""The most rows a read run on the loop asks for (a page, a path's tail); more go to a thread."""


def small(limit: object) -> bool:
    """Whether a read of at most ``limit`` rows is small enough for the loop."""
    return type(limit) is int and 0 < limit <= SMALL_ROWS


@dataclass(frozen=True, slots=True)
class Runs:
    """Where a read may run besides a reader thread: declared with the read, by its caller.

    Every read can run on a reader thread (where it runs when the loop misses). ``loop``: it is
    small, so it is tried first on the caller's event loop (:class:`LoopReads`); ``link``: it
    runs on a :class:`~soong_store.backends.link.Link` too (a path, a session's row, a timeline
    page); ``budgeted``: it is small only while it reads at most :data:`SMALL_ROWS` rows, so on
    the loop it is given ``budget=SMALL_ROWS`` (it raises
    :class:`~soong_store.backends.values.ReadOnAThread` past that).
    """

    loop: bool = False
    link: bool = False
    budgeted: bool = False

    def on_loop(self, query: Callable[..., T]) -> Callable[..., T]:
        """The read as it runs on the loop (with its budget, if it has one)."""
        return partial(query, budget=SMALL_ROWS) if self.budgeted else query


ON_THREAD: Final = Runs()
"""A read of any size: on a reader thread only."""
ON_LOOP: Final = Runs(loop=True)
"""A read of one row, or a bounded few: on the loop first."""
ON_LOOP_BUDGETED: Final = Runs(loop=True, budgeted=True)
"""A read of a session's agents, runs or artifacts, a node's children: on the loop while small."""
ON_LINK: Final = Runs(loop=True, link=True)
"""A read of one row that runs on a link too (a session's row)."""
ON_LINK_BUDGETED: Final = Runs(loop=True, link=True, budgeted=True)
"""A read of the path cache: on the loop (a link too) while its walk reads few nodes."""


def page(limit: object, runs: Runs) -> Runs:
    """``runs`` for a page of at most ``limit`` rows when that is small, else :data:`ON_THREAD`."""
    return runs if small(limit) else ON_THREAD


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
        readers.lend_to_loops(wait_for_locks)

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
            if isinstance(connection, Connection) and not connection.info.get(NO_WAIT):
                self._wait_for_locks(connection, False)  # a link never waits (see the module)
                connection.info[NO_WAIT] = True
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
        """Leave ``connection`` idle; a reader thread that takes it turns its lock wait on."""
        self._readers.keep(connection)
