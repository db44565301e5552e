"""The writer: one FIFO queue into one write connection, owned by one thread.

Every write of a store is a *job*, a function of a SQLAlchemy ``Connection``. Jobs run in the
order they were submitted, each inside a transaction that begins by taking the write lock (the
backend's begin-write). Jobs that are already waiting when the writer picks up work are committed
together (group commit), each isolated by a savepoint, so one failing job rolls back only itself.
Where the backend allows it (:attr:`~soong_store.backends.base.Backend.commits_on_loop`), the
jobs an event loop submits in one turn are committed together on that loop's own thread while
the writer's thread is idle, with no hand-off between threads at all.

Its one connection (:class:`WriteConnection`) is made at first use, reset after a failure and
lent to a loop's batch. The writer runs every write on it. Its thread
makes it, uses it and closes it; a batch committed on an event loop's thread borrows it while
the thread is idle. Whoever uses it holds :attr:`WriteConnection.held`, so the two never
overlap. The thread waits for a database lock held elsewhere as the backend's busy handling
says; a borrower does not wait at all (it is refused at once and hands its batch to the
thread), so the connection's lock wait is switched as it changes hands.

Where commits run on event loops, the write connection leaves its checkpoints to the writer's
thread (:attr:`~soong_store.backends.base.Backend.commits_on_loop`): after a batch the user
asks :meth:`WriteConnection.claim_checkpoint`, and the thread runs :meth:`checkpoint` on a
second connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Engine

from soong_store.backends.base import backend_class_of
from soong_store.backends.retry import RetryPolicy
from soong_store.errors import SoongStoreError, StoreClosed
from soong_store.write.batch import (
    CommitUnknown,
    Job,
    Pending,
    abort,
    attempt,
    deliver,
    fail_all,
    run_to_outcome,
    settle_here,
)

T = TypeVar("T")

log = logging.getLogger(__name__)

_STOP = object()
_CHECKPOINT = object()
"""Wakes the writer's thread for the checkpoint a batch run on an event loop left owed."""
_MAINTAIN = object()
"""Wakes the writer's thread for the maintenance a batch run on an event loop left owed."""


class Maintenance(Protocol):
    """Work the writer does between batches when no job waits (moving pairs between files)."""

    def __call__(self, connection: Connection) -> bool:
        """One round of it; whether more is left."""

    marks: frozenset[str]
    """Keys a job leaves in its connection's ``info`` when it owes a round (a batch on a loop
    looks for them, as the thread does not run the maintenance after it)."""
    failed: bool
    """Whether the last round failed: the next batch owes one more."""

    def settle(self, connection: Connection) -> None:
        """Finish what the rounds left half-done, before the writer stops."""


class Prerequisite(Protocol):
    """Something a job waits for before it is queued (an artifact file being written)."""

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once it is over, in whatever thread finishes it."""

    def error(self) -> BaseException | None:
        """Why it failed, once over (``None`` if it succeeded)."""


class Writer:
    """Runs write jobs one after another on a single connection in a thread of its own.

    Contract:

    - **Ownership.** The writer thread opens and closes the only write connection. It uses it
      under a lock, which a batch on an event loop (below) holds instead while it runs; no
      other thread touches it. Callers never see it.
    - **Batches on the loop** (``on_loop``). The jobs one event loop submits in one turn of it
      form a batch, run at the end of that turn: on the loop's own thread, when the writer's
      thread is idle (no job queued or running, the connection made) and the write lock is free
      at once; else queued for the thread like any job. A batch on a loop never waits: a lock
      held elsewhere, a file to attach, any failure of the batch as a whole sends it to the
      thread, which runs it again as the contract below says (jobs are re-runnable). What that
      thread owes the connection between batches (a checkpoint, maintenance) it still does,
      woken after the loop's batch.
    - **Submitting.** :meth:`submit` is a coroutine: it enqueues the job and awaits its outcome.
      Jobs run in FIFO order. Without ``on_loop`` too, the jobs of a loop's turn are queued at
      its end, together, so that the thread takes them as one batch. A job's exception is
      raised in its own caller only (translated to a
      :class:`~soong_store.errors.SoongStoreError` as it leaves :meth:`submit`); other jobs of
      the same batch still commit.
    - **Prerequisites.** A job may wait for others' work (artifact files being written) before
      it is queued: the thread that finishes the last one queues it, with no round trip through
      the event loop. If one failed, the job is not run, ``on_abort`` runs and the caller gets
      that error.
    - **Cancellation.** Once submitted, a job runs and commits (or fails) as a whole whatever
      happens to the awaiting task: cancelling the caller only stops the waiting, never half a
      unit of work.
    - **Contention.** Another process holding the lock makes the writer wait (the database's
      busy timeout) and then retry the whole batch with the backoff of its
      :class:`~soong_store.backends.retry.RetryPolicy`, up to the policy's deadline; only then
      does the caller get a :class:`~soong_store.errors.StorageError`. Where locks are per
      session, a job after the first that finds its session's lock held elsewhere is not
      waited for inside the batch: the jobs before it commit, and it starts the next one.
    - **Lost connection.** A connection that fails before ``COMMIT`` is opened again and the
      batch retried, as for a busy error. One lost at ``COMMIT`` is resolved, not retried
      blindly: the backend tells on a new connection whether that transaction committed (then
      its results stand) or not (then it runs again); a caller never sees half a unit, nor one
      applied twice.
    - **Closing.** :meth:`close` lets every job already submitted (waiting or queued) finish,
      then stops the thread and closes the connection. Submitting after that raises
      :class:`~soong_store.errors.StoreClosed`.
    - **Event loops.** :meth:`submit` may be awaited from any event loop in any thread, from
      several at once: each job keeps its caller's loop, and the outcomes of a batch are handed
      to each loop by one ``call_soon_threadsafe``. If that loop has closed meanwhile, the job
      still runs and nobody is told. Jobs run in the order they reach the writer: a loop's batch
      runs on the loop only while nothing queued before it waits for the thread.
    - **Processes.** The thread and its connection live in the process that started the
      writer; a forked child has neither, so the store refuses calls there.
    - **Preparing the connection.** A job that raises
      :class:`~soong_store.backends.values.BeforeBegin` (its session's pair is in a shard not
      attached yet) is run again after the writer has ended the transaction (the jobs before it
      commit) and called the exception's ``prepare`` on the connection.
    - **Maintenance.** While no job waits, the writer calls its ``maintenance`` (moving pairs
      between files, :mod:`soong_store.catalog.moves`) once before the first job and again after
      batches, for as long as it says more is left; a job submitted meanwhile waits for one
      round at most. Its failure is logged and harms no job.
    - **Jobs must be re-runnable**: a batch retried after a busy error runs its jobs again, so a
      job reads what it needs inside its transaction and changes nothing outside the database
      (``on_abort`` is called when a job's work did not commit, to undo side effects).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        retry: RetryPolicy | None = None,
        max_batch: int = 64,
        maintenance: Maintenance | None = None,
        on_loop: bool = False,
    ) -> None:
        self._on_loop = on_loop
        self._maintenance = maintenance
        self._maintenance_due = maintenance is not None
        self._dialect = backend_class_of(engine)
        self._retry = retry if retry is not None else RetryPolicy()
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._main, name="soong-store-writer", daemon=True)
        self._link = WriteConnection(engine)
        self._counting = threading.Lock()
        self._queued = 0  # jobs queued for the thread and not yet answered by it
        self._batches: dict[asyncio.AbstractEventLoop, list[Pending]] = {}
        self._waiting = 0
        self._waiting_done = threading.Condition()

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the writer's thread is running."""
        return self._thread.is_alive()

    @property
    def closed(self) -> bool:
        """Whether the writer takes no more jobs."""
        return self._closed

    async def submit(
        self,
        job: Job[T],
        *,
        on_abort: Callable[[], None] | None = None,
        after: Sequence[Prerequisite] = (),
    ) -> T:
        """Run ``job`` in the writer and return its result (or raise its error).

        The job is queued once everything in ``after`` is over. ``on_abort`` runs when the
        job's work did not commit.
        """
        if self._closed:
            raise StoreClosed("the store is closed: no more writes")
        loop = asyncio.get_running_loop()
        pending = Pending(job, loop.create_future(), loop, on_abort)
        if after:
            self._queue_after(pending, after)
        else:
            batch = self._batches.get(loop)
            if batch is None:
                batch = self._batches[loop] = []
                loop.call_soon(self._end_turn, loop)
            batch.append(pending)
        try:
            if self._on_loop and not after:
                # The turn ends; its batch runs first (scheduled before this task's next step),
                # so a batch run on the loop is answered in one turn, not two.
                await asyncio.sleep(0)
                if pending.future.done():
                    done: T = pending.future.result()
                    return done
            result: T = await pending.future
        except Exception as exc:  # translated here, as it leaves (not entered on every write)
            if isinstance(exc, SoongStoreError):
                raise
            raise self._dialect.translate(exc) from exc
        return result

    def _queue_after(self, pending: Pending, after: Sequence[Prerequisite]) -> None:
        remaining = len(after)
        lock = threading.Lock()
        with self._waiting_done:
            self._waiting += 1

        def one_over() -> None:
            nonlocal remaining
            with lock:
                remaining -= 1
                if remaining:
                    return
            failed = next((e for p in after if (e := p.error()) is not None), None)
            if failed is None:
                self._put([pending])
            else:
                pending.outcome = (False, failed)
                abort(pending)
                deliver([pending])
            with self._waiting_done:
                self._waiting -= 1
                self._waiting_done.notify_all()

        for prerequisite in after:
            prerequisite.when_done(one_over)

    def _put(self, items: list[Pending]) -> None:
        """Queue jobs for the thread as one item (counted until it has answered them).

        One item, so that the thread, which may be awake already, takes them together.
        """
        with self._counting:
            self._queued += len(items)
        self._queue.put(items)

    def _end_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        """The end of a loop's turn: its batch runs here if it can, the rest goes to the thread.

        Not on the loop (``on_loop`` off), the turn's jobs still reach the thread together: it
        takes them as one batch, one commit and one sync, instead of waking for the first.
        """
        batch = self._batches.pop(loop)
        if self._closed and not self._thread.is_alive():  # submitted on a loop as it closed
            fail_all(batch, StoreClosed("the store closed before this write ran"))
            settle_here(batch)
            return
        done = self._run_here(batch) if self._on_loop else 0
        if done:
            settle_here(batch[:done])
        if done < len(batch):
            self._put(batch[done:])

    def _run_here(self, batch: list[Pending]) -> int:
        """Run ``batch`` on this thread if the writer is idle; how many jobs it answered.

        0 when the thread owes jobs queued before these, holds the connection or has not made
        it yet, or when the batch failed as a whole: those go to the thread.
        """
        link = self._link
        if not link.held.acquire(blocking=False):
            return 0
        try:
            connection = None if self._queued else link.for_loop()
            if connection is None:
                return 0
            try:
                done = attempt(connection, self._dialect, batch)
            except CommitUnknown as unknown:  # such a backend keeps no commit token: the
                link.recover()  # thread too takes the jobs' results as standing then
                done = unknown.done
            except Exception:
                link.recover()
                return 0
            if link.claim_checkpoint():
                self._queue.put(_CHECKPOINT)
            maintenance = self._maintenance
            if maintenance is not None and (
                maintenance.failed or not maintenance.marks.isdisjoint(connection.info)
            ):
                self._queue.put(_MAINTAIN)
            return done
        except Exception:  # the recovery itself failed: the thread starts on a new connection
            log.warning("a batch on the loop could not be reset", exc_info=True)
            link.drop()
            return 0
        finally:
            link.held.release()

    def _wait_for_waiting(self) -> None:
        with self._waiting_done:
            self._waiting_done.wait_for(lambda: self._waiting == 0)

    async def close(self) -> None:
        """Finish every submitted job, then stop the thread and release the connection."""
        if self._closed:
            return
        self._closed = True
        while self._batches:  # a loop's batch of this turn or another loop's: it runs first
            for loop in [loop for loop in list(self._batches) if loop.is_closed()]:
                self._put(self._batches.pop(loop))  # its turn never ends: the thread runs them
            await asyncio.sleep(0.0005)
        await asyncio.to_thread(self._wait_for_waiting)
        self._queue.put(_STOP)
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join)

    def _main(self) -> None:
        try:
            self._maintain()  # before the first job: settle moves a crash left under way
            while True:
                first = self._next_job()
                if first is _STOP:
                    self._settle()
                    return
                jobs: list[Pending] = [] if first is _CHECKPOINT or first is _MAINTAIN else first
                stop = False
                while len(jobs) < self._max_batch:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop = True
                        break
                    if item is not _CHECKPOINT and item is not _MAINTAIN:
                        jobs.extend(item)
                for start in range(0, len(jobs), self._max_batch):
                    self._run_batch(jobs[start : start + self._max_batch])
                if self._link.checkpoint_owed:
                    self._link.checkpoint()
                if stop:
                    self._settle()
                    return
        finally:
            self._link.close()
            self._fail_leftovers()

    def _run_batch(self, batch: list[Pending]) -> None:
        with self._link.held:
            run_to_outcome(self._link, self._dialect, self._retry, batch)
            with self._counting:
                self._queued -= len(batch)
            self._link.claim_checkpoint()
        deliver(batch)  # the connection is free: the callers' next batch may run

    def _next_job(self) -> Any:
        """The next queued item; while none waits, the maintenance's work runs first."""
        while self._maintenance_due:
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                self._maintain()
        item = self._queue.get()
        self._maintenance_due = self._maintenance is not None and item is not _CHECKPOINT
        return item

    def _maintain(self) -> None:
        """One round of the maintenance's work (it runs again after the next batch if it fails)."""
        if self._maintenance is None:
            return
        with self._link.held:
            try:
                self._maintenance_due = self._maintenance(self._link.for_thread())
            except Exception:
                log.warning("writer maintenance failed", exc_info=True)
                self._link.recover()
                self._maintenance_due = False

    def _settle(self) -> None:
        """Let the maintenance finish what its rounds left half-done before the thread stops."""
        if self._maintenance is None:
            return
        with self._link.held:
            try:
                self._maintenance.settle(self._link.for_thread())
            except Exception:  # left to the next open's recovery, as after a crash
                log.warning("writer maintenance could not settle before stopping", exc_info=True)
                self._link.recover()

    def _fail_leftovers(self) -> None:
        left: list[Pending] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP and item is not _CHECKPOINT and item is not _MAINTAIN:
                left.extend(item)
        fail_all(left, StoreClosed("the store closed before this write ran"))
        deliver(left)


log = logging.getLogger(__name__)


class WriteConnection:
    """The write connection of one writer, and the lock its user holds (see the module)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._dialect = backend_class_of(engine)
        self.held = threading.Lock()
        """Held by the connection's user: the writer's thread, or one loop's batch."""
        self._connection: Connection | None = None
        self._checkpointer: Connection | None = None
        self._waits_for_locks = True
        self.checkpoint_owed = False
        """A batch's commits owe a checkpoint, which the writer's thread runs."""

    def for_thread(self) -> Connection:
        """The connection, made (again) if it is not usable; it waits for locks held elsewhere."""
        connection = self._connection
        if connection is None or connection.invalidated or connection.closed:
            if connection is not None:
                self._connection = None
                connection.close()
            connection = self._engine.connect()  # may fail: the server is not back yet
            self._connection, self._waits_for_locks = connection, True
        elif not self._waits_for_locks:  # a loop's batch borrowed it last
            self._dialect.wait_for_locks(connection, True)
            self._waits_for_locks = True
        return connection

    def for_loop(self) -> Connection | None:
        """The connection for a loop's batch (``held`` held), refused locks failing at once.

        ``None`` until the thread has made it, or when it is not usable: the thread's work.
        """
        connection = self._connection
        if connection is None or connection.closed or connection.invalidated:
            return None
        if self._waits_for_locks:
            self._dialect.wait_for_locks(connection, False)
            self._waits_for_locks = False
        return connection

    def recover(self) -> None:
        """Leave no transaction open after a failed attempt, whatever state the failure left.

        A failure raised around COMMIT can leave the driver inside its transaction while
        SQLAlchemy believes it ended; the next begin-write would then fail forever.
        """
        connection = self._connection
        if connection is None or connection.closed:
            return
        if connection.invalidated:  # lost: the next attempt connects anew
            self._connection = None
            with contextlib.suppress(Exception):
                connection.close()
            return
        try:
            if connection.in_transaction():
                connection.rollback()
            raw = connection.connection.dbapi_connection
            if raw is not None and self._dialect.driver_in_transaction(connection):
                raw.rollback()
        except Exception:
            log.warning("write connection could not be reset; reconnecting", exc_info=True)
            self.drop()

    def drop(self) -> None:
        """Let go of the connection whatever its state: the next attempt connects anew."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.invalidate()
                connection.close()

    def claim_checkpoint(self) -> bool:
        """After a batch (``held`` held): whether its commits now owe a checkpoint."""
        connection = self._connection
        if connection is None or not self._dialect.claim_checkpoint(connection):
            return False
        self.checkpoint_owed = True
        return True

    def checkpoint(self) -> None:
        """The checkpoint owed, on the thread's own second connection (``held`` not held).

        Once while writes go on (it copies what was committed when it began); when the backend
        says the log has grown long, once more holding ``held`` (it copies the little committed
        meanwhile). A log copied whole is started again from its beginning by the next write;
        one never copied whole while writes go on would only grow. The second step keeps every
        writer of the store waiting for its syncs, hence only now and then.
        """
        self.checkpoint_owed = False
        try:
            checkpointer = self._checkpointer
            if checkpointer is None or checkpointer.closed or checkpointer.invalidated:
                checkpointer = self._checkpointer = self._engine.connect()
            if self._dialect.checkpoint(checkpointer):
                with self.held:
                    self._dialect.checkpoint(checkpointer)
        except Exception:  # the next commits' checkpoint tries again
            log.warning("WAL checkpoint failed", exc_info=True)
            checkpointer, self._checkpointer = self._checkpointer, None
            if checkpointer is not None:
                with contextlib.suppress(Exception):
                    checkpointer.close()

    def close(self) -> None:
        """Close both connections (the writer's thread, at its end)."""
        with self.held:
            if self._connection is not None:
                self._connection.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
