"""What an open store runs on: its backend's engines, the writer, the reader threads, the file pool.

:class:`StoreRuntime` is the plumbing under :class:`~soong_store.store.SessionStore`. Opening
creates the home, makes the read engine, reads the schema's revision on the read pool's first
connection (kept for the first read) and brings the schema to head when it is not there (once,
even with several processes starting together, on an admin connection); that first connection
switches the file to WAL once the revision is known. On SQLite a database already at head and
in WAL opens on the caller's loop, waiting for no lock, on a connection of the driver alone (a
:class:`~soong_store.backends.link.DriverLink`): the read engine is made when a read first
needs it, and takes that connection over. Anything else opens on a reader thread.
Closing drains the writer and releases everything. :meth:`StoreRuntime.write` hands a job to
the writer, which the first write starts with its engine (a store that only reads, as most CLI
commands do, never starts its thread, makes its engine nor runs its maintenance);
:meth:`StoreRuntime.read` runs a query in one snapshot on a reader thread, retried while the
database is busy and with its errors translated.

Event loops and threads: nothing here is tied to the loop that opened it; each result is handed
back to its caller's loop. Opening and closing from several loops at once open and close once.
Processes: a runtime belongs to the process that opened it; after ``os.fork()`` every call in
the child raises :class:`~soong_store.errors.StorageError`, and closing in the child only lets go
of what it inherited (the parent still uses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection, Engine

from soong_store.backends.base import Backend
from soong_store.backends.link import DriverLink
from soong_store.backends.values import BeforeBegin
from soong_store.errors import SoongStoreError, StorageError, StoreClosed
from soong_store.files.folder import ArtifactFiles
from soong_store.home import ensure_home
from soong_store.migrate.upgrade import (
    HEAD_REVISION,
    current_revision,
    link_at_head,
    refuse_shards_past_head,
    shards_marked_at_head,
)
from soong_store.read.readers import MISSED, ON_THREAD, LoopReads, ReaderThreads, Runs

if TYPE_CHECKING:
    from soong_store.catalog.moves import Maintenance
    from soong_store.write.file_pool import FilePool, FileWrite
    from soong_store.write.writer import Prerequisite, Writer

T = TypeVar("T")

log = logging.getLogger(__name__)

_PREPARES = 100
"""How many times one read may stop to attach a file or look again (a session moving meanwhile)."""

_INHERITED: list[object] = []
"""What a forked child's stores held: kept alive, never closed (the parent still uses it)."""


class StoreRuntime:
    """The engines, writer, reader threads and file pool of one store (see the module docstring).

    ``generation`` counts the opens, so that what was handed out under one open (a task DAG)
    can tell that the store it came from was closed.
    """

    def __init__(
        self, home: Path, backend: Backend, files: ArtifactFiles, *, makes_home: bool = True
    ) -> None:
        self.home = home
        self.makes_home = makes_home
        """Whether an open makes the home (not where only artifacts would use it, made then)."""
        self.backend = backend
        self.files = files
        self.generation = 0
        self._open = False
        self._writer: Writer | None = None
        self._maintenance: Maintenance | None = None
        self._file_pool: FilePool | None = None
        self._write_engine: Engine | None = None
        self._readers: ReaderThreads | None = None
        self._loop_reads: LoopReads | None = None
        self._pid = os.getpid()
        self._opening = threading.Lock()  # held while opening; a loop only tries it, never waits
        self._claim = threading.Lock()  # held only to start the writer or take what closing ends
        self.erased = False
        """Set by a redaction or a deletion: closing then rewrites the search index and cuts
        the write-ahead log, so that what was removed is in no file of the home."""

    @property
    def in_own_process(self) -> bool:
        """Whether this is the process that made the runtime (not a forked child)."""
        return os.getpid() == self._pid

    @property
    def is_open(self) -> bool:
        """Whether the store is open (between a finished open and the start of a close)."""
        return self._open

    @property
    def write_engine(self) -> Engine | None:
        """The engine of the writer's connection, while open (tests listen to its events).

        Made at its first use, the first write's or this one: it connects at the first write.
        """
        with self._claim:
            return self._engine_for_writer() if self._open else None

    def _engine_for_writer(self) -> Engine:
        """The write engine of this open, made now if it is not yet (``_claim`` held)."""
        if self._write_engine is None:
            self._write_engine = self.backend.engine("write")
        return self._write_engine

    @property
    def read_engine(self) -> Engine | None:
        """The engine of the reader threads' connections, once made (tests count checkouts).

        An open on the caller's loop makes none: the first read that needs it does.
        """
        readers = self._readers
        return None if readers is None else readers.engine

    @property
    def writer_alive(self) -> bool:
        """Whether the writer's thread runs (once started by a write, a dead writer is a bug)."""
        return self._writer is not None and self._writer.alive

    @property
    def writer_started(self) -> bool:
        """Whether a write has started the writer since the store was opened."""
        return self._writer is not None

    async def open(self) -> None:
        """Create the home and bring the schema to head (once); a write starts the writer.

        Where the backend allows it, a database at head opens on the caller's loop without
        waiting for anything (:meth:`_open_on_loop`), and no thread starts nor engine is made
        until a read needs one. Otherwise the open runs on the thread that then serves the
        first read (the first of the reader threads, whose engine it binds): a new process
        starts one thread for both.
        """
        self.check_process()
        if self._open:
            return
        readers = ReaderThreads(
            None, self.backend.capabilities.read_connections, "soong-store-read"
        )
        if not self._open_on_loop(readers):
            await readers.submit(partial(self._open_once, readers))

    def _open_on_loop(self, readers: ReaderThreads) -> bool:
        """Open here, on the caller's loop, where that waits for nothing (``opens_on_loop``).

        The database must exist, be at head (no shard's mark past it) and have nothing left to
        settle, and its first connection (the backend's
        :meth:`~soong_store.backends.base.Backend.link`) must take no lock another holds (it
        waits for none meanwhile); and no other open may be under way. False: the open is the
        thread's (nothing made here is kept). What it may still cost the loop is SQLite's own:
        the schema's parse at the first statement (~5 µs an object) and, after a crash, the
        rebuild of the WAL's index.
        """
        backend = self.backend
        if not backend.capabilities.opens_on_loop or not backend.database_exists():
            return False
        if not self._opening.acquire(blocking=False):
            return False
        try:
            if self._open:  # another open came first
                readers.shutdown(wait=False)
                return True
            link: DriverLink | None = None
            try:
                if self.makes_home:
                    ensure_home(self.home)
                link = backend.link()
                if link is not None and link_at_head(link) and shards_marked_at_head(backend):
                    readers.bind_link(link, self._read_engine_taking)
                    self._bind(readers)
                    return True
            except Exception:  # busy, or anything else: the thread's open tries (and reports)
                pass
            if link is not None:
                with contextlib.suppress(Exception):
                    link.close()
            return False
        finally:
            self._opening.release()

    def _read_engine_taking(self, link: DriverLink | None) -> Engine:
        """The read engine, made when a read first needs it (taking ``link`` over, if given)."""
        if link is None:
            return self.backend.engine("read")
        return self.backend.engine_taking(link)

    def _open_once(self, readers: ReaderThreads) -> None:
        """Open with ``readers`` as the store's reader threads, or end them (on their thread).

        Ended here, not by the caller: a caller cancelled meanwhile does not wait for the open,
        which goes on and keeps them if it succeeds.
        """
        kept = False
        try:
            with self._opening:
                if not self._open:
                    self._open_sync(readers)
                    kept = True
        finally:
            if not kept:  # it failed, or another open came first
                readers.shutdown(wait=False)

    def check_process(self) -> None:
        """Refuse a call in a forked child: the writer's thread and connections stayed behind."""
        if os.getpid() != self._pid:
            raise StorageError(
                f"this store was opened in process {self._pid}, not in this one "
                f"({os.getpid()}, a fork of it): open a new store in the child",
                pid=self._pid,
            )

    def _open_sync(self, readers: ReaderThreads) -> None:
        backend = self.backend
        # Each engine refuses an unusable driver (too old a SQLite, no psycopg) before anything
        # is created.
        read_engine = backend.engine("read") if backend.capabilities.opens_on_reader else None
        try:
            if self.makes_home:
                ensure_home(self.home)
            at_head = False
            if read_engine is not None:
                # The revision is read on the read pool's first connection, which the first
                # read then uses; it changes nothing stored until the revision is known.
                with backend.connecting_untouched():
                    at_head = _at_head(read_engine)
            if not at_head:
                from soong_store.migrate.upgrade import ensure_schema

                backend.check_writable()
                admin = backend.engine("admin")
                try:
                    ensure_schema(admin, backend.retry)
                finally:
                    admin.dispose()
            # A crash in a newer version's upgrade can leave shards past the database's revision.
            refuse_shards_past_head(backend)
            # The write engine is made at the first write. The first read connection is kept by
            # its pool, and is what makes the file WAL (settled, or connected after the upgrade):
            # the file is in WAL from the open on, as it must be before another process writes.
            if read_engine is None:
                read_engine = backend.engine("read")
            else:
                backend.settle_reader(read_engine)
            first = read_engine.connect()  # idle among the readers' for the first read
        except BaseException:
            if read_engine is not None:
                read_engine.dispose()
            raise
        readers.bind(read_engine, first)
        self._bind(readers)

    def _bind(self, readers: ReaderThreads) -> None:
        """The store is open, its reads on ``readers`` (bound, their first connection idle)."""
        self._readers = readers
        if self.backend.capabilities.reads_on_loop:
            self._loop_reads = LoopReads(readers, self.backend.wait_for_locks)
        self.generation += 1
        self._open = True

    def _started_writer(self) -> Writer:
        """The writer, started by the first write of this open (its maintenance with it)."""
        with self._claim:
            if not self._open:
                raise StoreClosed("the store is not open")
            if self._writer is None:
                from soong_store.catalog.moves import Maintenance
                from soong_store.write.writer import Writer

                backend, engine = self.backend, self._engine_for_writer()
                maintenance = Maintenance(backend) if backend.capabilities.places_pairs else None
                writer = Writer(
                    engine,
                    retry=backend.retry,
                    maintenance=maintenance,
                    on_loop=backend.commits_on_loop,
                )
                writer.start()
                self._writer, self._maintenance = writer, maintenance
            return self._writer

    async def close(self) -> None:
        """Finish queued writes, then release the connections. Closing twice is harmless."""
        if os.getpid() != self._pid:
            self._let_go_in_child()
            return
        with self._claim:
            if not self._open:
                return
            self._open = False
            writer, self._writer = self._writer, None
            file_pool, self._file_pool = self._file_pool, None
            readers, self._loop_reads = self._readers, None
            write_engine, self._write_engine = self._write_engine, None
            maintenance, self._maintenance = self._maintenance, None
        erased, self.erased = self.erased, False
        if writer is not None:
            if erased:
                await _erase_index(writer)
            await writer.close()
        if maintenance is not None:  # its shard connection, once the writer's thread is over
            maintenance.close()
        if file_pool is not None:  # after the writer: its waiting jobs need their files
            await asyncio.to_thread(file_pool.close)
        if readers is not None:
            readers.shutdown()
            if readers.engine is not None:  # made by a thread, if any: all ended now
                readers.engine.dispose()
        if write_engine is not None:
            if erased:  # the store's last connection: the log is cut with no reader of ours
                step = partial(_finish_erasure, self.backend, write_engine)
                await asyncio.to_thread(_let_fail, step)  # it may wait for another's reader
            write_engine.dispose()

    def _let_go_in_child(self) -> None:
        """Forget the parent's store without closing its connections or joining its threads."""
        held = (self._writer, self._file_pool, self._readers, self._write_engine)
        _INHERITED.append((*held, self._maintenance))
        self._writer = self._file_pool = self._readers = self._maintenance = None
        self._loop_reads = None
        self._write_engine = None
        self._open = False

    async def write(
        self,
        job: Callable[[Connection], T],
        on_abort: Callable[[], None] | None = None,
        after: Sequence[Prerequisite] = (),
    ) -> T:
        """Run ``job`` in the writer, in its transaction (``on_abort``: it did not commit)."""
        self.check_process()
        return await self._started_writer().submit(job, on_abort=on_abort, after=after)

    async def read(self, query: Callable[..., T], runs: Runs = ON_THREAD) -> T:
        """Run ``query`` on a reader thread in one snapshot, retried while the database is busy.

        ``runs``: where else the read may run, declared with it (:class:`~soong_store.read.
        readers.Runs`): a small read is tried first on the caller's event loop where the backend
        allows it, on a link too if it takes one.
        """
        self.check_process()
        readers = self._readers
        if readers is None or not self._open:
            raise StoreClosed("the store is not open")
        loop_reads = self._loop_reads
        if loop_reads is not None and runs.loop:
            on_loop = runs.on_loop(query)
            got = loop_reads.run_on_link(on_loop) if runs.link else loop_reads.run(on_loop)
            if got is not MISSED:
                return got
        return await readers.submit(partial(self._read_sync, readers, query))

    def _read_sync(self, readers: ReaderThreads, query: Callable[[Connection], T]) -> T:
        def attempt() -> T:
            connection = readers.connection()  # the reader thread's own, kept between reads
            try:
                for _ in range(_PREPARES):
                    try:
                        with connection.begin():
                            return query(connection)
                    except BeforeBegin as needed:  # a shard to attach, or the pair moved
                        last = str(needed)
                        needed.prepare(connection)
            except BaseException:
                readers.release()  # the pool resets it; the next read takes a clean one
                raise
            raise StorageError(f"a read kept finding its session moved: {last}")

        backend = self.backend
        with backend.translated():
            return backend.retry.run(attempt, backend.is_transient)

    def start_file(self, path: str, data: bytes) -> FileWrite:
        """Begin writing an artifact file in the file pool (a unit of work adds it)."""
        with self._claim:
            if not self._open:
                raise StoreClosed("the store is not open")
            if self._file_pool is None:
                from soong_store.write.file_pool import FilePool

                self._file_pool = FilePool(self.files)
            pool = self._file_pool
        return pool.start(path, data)


async def _erase_index(writer: Writer) -> None:
    """The search index rewritten without what was deleted from it (a last job, at close)."""
    from soong_store.backends.base import searcher_of

    def erase(connection: Connection) -> None:
        searcher_of(connection).erase(connection)

    try:
        await writer.submit(erase)
    except SoongStoreError:  # closing goes on; the next erasure's close rewrites it
        log.warning("rewriting the search index at close failed", exc_info=True)


def _finish_erasure(backend: Backend, engine: Engine) -> None:
    """Drop the shard copies of deleted pairs the maintenance has not dropped yet, cut the log.

    A pair deleted in a shard leaves a journal row that the writer's maintenance settles
    between batches; at close it may not have run yet, so it is settled here (the next open
    would, later). Then the log of the main file and of every shard attached is cut.
    """
    with backend.translated(), engine.connect() as connection:
        if backend.capabilities.places_pairs:
            from soong_store.catalog import moves

            moves.recover(connection)
        backend.truncate_log(connection)


def _let_fail(step: Callable[[], None]) -> None:
    """Run a step of closing that must not stop it (logged)."""
    try:
        step()
    except SoongStoreError:
        log.warning("finishing an erasure at close failed", exc_info=True)


def _at_head(engine: Engine) -> bool:
    """Whether the database is at head, asked on one of ``engine``'s connections (kept pooled).

    Anything else, an error included, takes the admin path, which upgrades or reports it.
    """
    try:
        return current_revision(engine) == HEAD_REVISION
    except SoongStoreError:
        return False
