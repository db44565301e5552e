"""A batch that fails as a whole, on the writer's thread: tried again until each job has an outcome.

:func:`~soong_store.write.batch.attempt` runs a batch once; :func:`run_to_outcome` is what the
writer's thread does around it when the batch fails as a whole (the writer's contract in
:class:`~soong_store.write.writer.Writer` says what each case means for its callers):

- another transaction holds the lock, or the connection was lost before ``COMMIT``: reset the
  connection and run the batch again with the retry policy's backoff, up to its deadline;
- the first job needs its connection prepared (a shard to attach): prepare it, then run again;
- a job's failure ended the whole transaction: fail that job alone, run the rest again;
- the answer to ``COMMIT`` was lost: ask on a new connection whether it took effect, and run
  the batch again only if it did not;
- anything else (a failed ``COMMIT``: disk full, I/O error): every job fails with it.

A job whose work did not commit has its ``on_abort`` run, except where its rows may have
committed after all (then its files stay, for ``gc`` to judge).
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import OperationalError

from soong_store.backends.base import Backend
from soong_store.backends.retry import Attempts, RetryPolicy
from soong_store.backends.values import BeforeBegin
from soong_store.errors import StorageError
from soong_store.write.batch import (
    BatchBusy,
    CommitUnknown,
    JobAborted,
    Pending,
    abort,
    attempt,
    fail_all,
)
from soong_store.write.connection import WriteConnection

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
