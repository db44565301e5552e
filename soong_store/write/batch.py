"""One transaction of the writer: a batch of jobs, a savepoint each, their outcomes handed back.

:class:`~soong_store.write.writer.Writer` decides when a batch runs and where (its thread, or the
callers' event loop); this module is one attempt at it (:func:`attempt`), what happens when it
fails as a whole (:func:`run_to_outcome`: busy, lost connection, a failed ``COMMIT``) and the
way its outcomes reach the callers (:func:`deliver`, :func:`settle_here`).

Two costs are cut here, both paid once per job before:

- **Savepoints on the driver.** ``SAVEPOINT``/``RELEASE`` are plain SQL on the DB-API cursor of
  the connection SQLAlchemy holds, inside the transaction SQLAlchemy began (as the hot
  statements of :mod:`soong_store.backends.prepared` are): ``begin_nested`` costs SQLAlchemy's whole
  execution path twice per job. Driver errors come out as SQLAlchemy's classes, so the
  backend classifies them as before.
- **One wake-up per event loop per batch.** Every outcome of a batch is set by one callback in
  each caller's loop, not one ``call_soon_threadsafe`` (a write to the loop's wake-up pipe) per
  job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection
from sqlalchemy.engine.interfaces import DBAPICursor
from sqlalchemy.exc import DBAPIError, OperationalError

from soong_store.backends.base import Backend
from soong_store.backends.retry import Attempts, RetryPolicy
from soong_store.backends.values import BeforeBegin
from soong_store.errors import StorageError

if TYPE_CHECKING:  # the writer's connection, on which the batches of this module run
    from soong_store.write.writer import WriteConnection

T = TypeVar("T")
Job = Callable[[Connection], T]

log = logging.getLogger(__name__)

SAVEPOINT = "soong_job"
"""The name of a job's savepoint (one at a time: each is released before the next begins)."""


@dataclass(slots=True)
class Pending:
    """A submitted job, its caller's future and loop, and (once run) its outcome."""

    job: Job[Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    on_abort: Callable[[], None] | None = None
    outcome: tuple[bool, Any] = field(default=(False, None))
    """``(True, result)`` or ``(False, error)``."""


class BatchBusy(Exception):
    """The write lock could not be had; the whole batch is tried again."""


class CommitUnknown(Exception):
    """The connection was lost at COMMIT: whether it took effect is asked by the token."""

    def __init__(self, token: str | None, done: int) -> None:
        super().__init__(token, done)
        self.token = token
        self.done = done


class JobAborted(Exception):
    """A job's failure ended the whole transaction (SQLite rolls back on a full disk)."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(index, cause)
        self.index = index
        self.cause = cause


class _Savepoints:
    """``SAVEPOINT``, ``RELEASE`` and ``ROLLBACK TO`` on the driver's cursor."""

    __slots__ = ("_connection", "_cursor", "_error")

    def __init__(self, connection: Connection) -> None:
        raw = connection.connection.dbapi_connection
        assert raw is not None
        self._connection = connection
        self._cursor: DBAPICursor = raw.cursor()
        self._error: type[Exception] = connection.dialect.loaded_dbapi.Error

    def _run(self, sql: str) -> None:
        try:
            self._cursor.execute(sql, ())
        except self._error as exc:
            dialect = self._connection.dialect
            raise DBAPIError.instance(sql, (), exc, self._error, dialect=dialect) from exc

    def begin(self) -> None:
        self._run(f"SAVEPOINT {SAVEPOINT}")

    def release(self) -> None:
        self._run(f"RELEASE SAVEPOINT {SAVEPOINT}")

    def rollback(self) -> None:
        self._run(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
        self._run(f"RELEASE SAVEPOINT {SAVEPOINT}")


def attempt(connection: Connection, backend: type[Backend], batch: list[Pending]) -> int:
    """Run the jobs in one transaction and commit; return how many of them it covered.

    Fewer than all when a later job found its lock held elsewhere: that job and the ones after
    it are left for a new transaction. Raises :class:`BatchBusy` when the batch as a whole must
    wait, :class:`JobAborted` when a job's failure ended the transaction, and
    :class:`CommitUnknown` when the answer to ``COMMIT`` was lost.
    """
    single = len(batch) == 1
    done = len(batch)
    token: str | None = None
    committing = False
    try:
        with connection.begin() as transaction:
            savepoints = None if single else _Savepoints(connection)
            for index, item in enumerate(batch):
                if savepoints is not None:
                    savepoints.begin()
                try:
                    result = item.job(connection)
                except Exception as exc:
                    if isinstance(exc, BeforeBegin):
                        if savepoints is None or index == 0:
                            raise
                        savepoints.rollback()
                        done = index
                        break
                    if isinstance(exc, OperationalError) and backend.is_transient(exc):
                        if savepoints is None or index == 0 or backend.is_lost(exc):
                            raise BatchBusy from exc
                        savepoints.rollback()
                        done = index
                        break
                    if savepoints is None:
                        transaction.rollback()
                        item.outcome = (False, exc)
                        return done
                    if not backend.driver_in_transaction(connection):
                        raise JobAborted(index, exc) from exc
                    try:
                        savepoints.rollback()
                    except Exception:
                        raise JobAborted(index, exc) from exc
                    item.outcome = (False, exc)
                else:
                    if savepoints is not None:
                        savepoints.release()
                    item.outcome = (True, result)
            token = backend.commit_token(connection)
            committing = True  # leaving the block commits
    except OperationalError as exc:
        if committing and backend.is_lost(exc):
            raise CommitUnknown(token, done) from exc
        raise
    return done


def fail_all(batch: Iterable[Pending], error: BaseException) -> None:
    """Give every job of ``batch`` the same error."""
    for item in batch:
        item.outcome = (False, error)


def abort(item: Pending) -> None:
    """Run the job's ``on_abort`` (its work did not commit); a hook that raises is logged."""
    if item.on_abort is not None:
        try:
            item.on_abort()
        except Exception:
            log.exception("on_abort hook of a failed write raised")


def deliver(items: Iterable[Pending]) -> None:
    """Hand each outcome to its caller: one callback per event loop for all of them.

    A loop that has closed meanwhile is skipped (nobody waits there); a caller that was
    cancelled finds its future done, and the write stands regardless.
    """
    by_loop: dict[asyncio.AbstractEventLoop, list[Pending]] = {}
    for item in items:
        by_loop.setdefault(item.loop, []).append(item)
    for loop, group in by_loop.items():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, group)


def settle_here(items: list[Pending]) -> None:
    """Hand outcomes to callers on this thread, their loop's (the batch ran on it).

    A job whose work did not commit has its ``on_abort`` run first, as :func:`abort` says.
    """
    for item in items:
        if not item.outcome[0]:
            abort(item)
    _settle(items)


def _settle(group: list[Pending]) -> None:
    for item in group:
        if item.future.done():
            continue
        ok, value = item.outcome
        if ok:
            item.future.set_result(value)
        else:
            item.future.set_exception(value)


log = logging.getLogger(__name__)

_PREPARES = 100
"""How many times one batch may stop to prepare its connection (attach a file) before the job
that keeps asking fails: a session moved that often meanwhile is a bug, not contention."""


def run_to_outcome(
    link: WriteConnection, backend: type[Backend], policy: RetryPolicy, batch: list[Pending]
) -> None:
    """Run ``batch`` to an outcome for every job, on the thread (its callers are told after)."""
    retry = policy.start()
    pending = list(batch)
    in_doubt = False  # asking whether a COMMIT whose answer was lost took effect
    doubtful: list[Pending] = []  # failed, but their rows may have committed
    prepares = 0
    try:
        while pending:
            try:
                done = attempt(link.for_thread(), backend, pending)
                # A later job met a lock another transaction holds (or needs its connection
                # prepared): the jobs before it have committed, the rest run in a new one.
                pending = pending[done:]
            except BeforeBegin as needed:  # the first job needs a file attached, say
                link.recover()
                prepares += 1
                try:
                    if prepares > _PREPARES:
                        raise StorageError(f"the write could not be prepared: {needed}")
                    needed.prepare(link.for_thread())
                except Exception as exc:
                    link.recover()
                    pending[0].outcome = (False, exc)
                    del pending[0]
            except JobAborted as aborted:
                # The failing job took the others' work down with it: fail it alone and run
                # the rest again in a fresh transaction.
                link.recover()
                pending[aborted.index].outcome = (False, aborted.cause)
                del pending[aborted.index]
            except CommitUnknown as unknown:
                link.recover()
                in_doubt = True
                committed = _commit_outcome(link, backend, unknown.token, retry)
                in_doubt = False
                if committed:
                    pending = pending[unknown.done :]
                    continue
                if committed is None:
                    fail_all(
                        pending,
                        StorageError(
                            "the connection was lost at COMMIT and the database could not say "
                            f"within {policy.deadline:g} s whether the write took effect"
                        ),
                    )
                    doubtful = pending
                    break
                retry.wait()  # nothing of it committed: the same jobs run again
            except (BatchBusy, OperationalError) as exc:
                if isinstance(exc, OperationalError) and not backend.is_transient(exc):
                    link.recover()
                    fail_all(pending, exc)
                    break
                if retry.expired:
                    fail_all(pending, _gave_up(backend, policy, exc))
                    break
                link.recover()
                retry.wait()
            except Exception as exc:  # commit failed: disk full, I/O error, damaged file
                link.recover()
                fail_all(pending, exc)
                break
    except Exception as exc:  # a bug in the handling itself: what did not commit fails
        log.exception("write batch failed unexpectedly")
        fail_all(pending, StorageError(f"unexpected {type(exc).__name__}: {exc}"))
        link.drop()
        if in_doubt:
            doubtful = pending
    kept = {id(item) for item in doubtful}  # files that rows may name stay (gc decides)
    for item in batch:
        if not item.outcome[0] and id(item) not in kept:
            abort(item)


def _gave_up(backend: type[Backend], policy: RetryPolicy, exc: BaseException) -> StorageError:
    waited = policy.deadline
    cause = exc.__cause__ if isinstance(exc, BatchBusy) else exc
    if cause is not None and backend.is_lost(cause):
        return StorageError(f"the database could not be reached for {waited:g} s")
    return StorageError(f"the database stayed locked for {waited:g} s")


def _commit_outcome(
    link: WriteConnection, backend: type[Backend], token: str | None, retry: Attempts
) -> bool | None:
    """Whether the transaction whose COMMIT lost its answer took effect (``None``: unknown).

    Asked on a new connection, waiting (under the batch's retry deadline) while the
    database cannot be reached or the transaction is still finishing.
    """
    if token is None:  # it wrote nothing: its jobs' results stand either way
        return True
    while True:
        try:
            connection = link.for_thread()
            with connection.begin():
                outcome = backend.commit_outcome(connection, token)
            if outcome is not None:
                return outcome
        except Exception as exc:
            if not backend.is_transient(exc):
                log.warning("could not ask whether a commit took effect", exc_info=True)
                return None
            link.recover()
        if retry.expired:
            return None
        retry.wait()
