"""The writer queue on a SQLite engine: order, isolation of failures, closing, lock waits.

SQLite-only: the Writer is driven directly on an engine of the SQLite backend (``rowid`` order,
its busy timeout patched), and another connection holds ``BEGIN IMMEDIATE`` to take the file's
write lock. What the store's writer does through the API is in ``tests/store``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from soong_store import StoreClosed
from soong_store.backends.retry import RetryPolicy
from soong_store.backends.sqlite.backend import make_engine
from soong_store.errors import InvalidArgument, StorageError
from soong_store.migrate.upgrade import upgrade
from soong_store.write.writer import Writer
from tests.conftest import connect_raw

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(
        "soong_store.backends.sqlite.backend.BUSY_TIMEOUT_MS", 50
    )  # a lock is seen at once
    url = f"sqlite:///{tmp_path / 'w.sqlite'}"
    upgrade(url)
    engine = make_engine(url, "write")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE log (n INTEGER NOT NULL UNIQUE)")
    yield engine
    engine.dispose()


def insert(n: int):
    def job(conn: Connection) -> int:
        conn.execute(text("INSERT INTO log (n) VALUES (:n)"), {"n": n})
        return n

    return job


def logged(engine) -> list[int]:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(text("SELECT n FROM log ORDER BY rowid"))]


async def test_jobs_run_in_submission_order(engine):
    writer = Writer(engine)
    writer.start()
    results = await asyncio.gather(*(writer.submit(insert(i)) for i in range(200)))
    await writer.close()
    assert results == list(range(200))
    assert logged(engine) == list(range(200))


async def test_failing_job_raises_in_its_caller_only(engine):
    writer = Writer(engine)
    writer.start()
    jobs = [insert(i) for i in range(20)]
    jobs[7] = insert(3)  # duplicate: violates UNIQUE

    def refuse(conn: Connection) -> None:
        conn.execute(text("INSERT INTO log (n) VALUES (1000)"))
        raise InvalidArgument("refused after writing")

    jobs[11] = refuse
    outcomes = await asyncio.gather(*(writer.submit(j) for j in jobs), return_exceptions=True)
    await writer.close()
    failed = [i for i, o in enumerate(outcomes) if isinstance(o, BaseException)]
    assert failed == [7, 11]
    assert isinstance(outcomes[11], InvalidArgument)
    assert logged(engine) == [i for i in range(20) if i not in (7, 11)]


async def test_close_drains_queue_then_refuses(engine):
    writer = Writer(engine)
    writer.start()
    pending = [asyncio.ensure_future(writer.submit(insert(i))) for i in range(50)]
    await asyncio.sleep(0)
    await writer.close()
    assert await asyncio.gather(*pending) == list(range(50))
    with pytest.raises(StoreClosed):
        await writer.submit(insert(99))
    assert len(logged(engine)) == 50


class Gate:
    """A prerequisite the test finishes, from another thread, when it chooses."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], None]] = []
        self._error: BaseException | None = None
        self._over = False

    def when_done(self, callback: Callable[[], None]) -> None:
        if self._over:
            callback()
        else:
            self._callbacks.append(callback)

    def error(self) -> BaseException | None:
        return self._error

    def finish(self, error: BaseException | None = None) -> None:
        def run() -> None:
            self._error, self._over = error, True
            for callback in self._callbacks:
                callback()

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()


async def test_job_is_queued_only_once_its_prerequisites_are_over(engine):
    writer = Writer(engine)
    writer.start()
    first, second = Gate(), Gate()
    submitted = asyncio.ensure_future(writer.submit(insert(1), after=[first, second]))
    assert await writer.submit(insert(2)) == 2  # a later job without prerequisites goes first
    first.finish()
    await asyncio.sleep(0.05)
    assert not submitted.done()
    second.finish()
    assert await submitted == 1
    done_already = Gate()
    done_already.finish()
    assert await writer.submit(insert(3), after=[done_already]) == 3
    await writer.close()
    assert logged(engine) == [2, 1, 3]


async def test_failed_prerequisite_skips_its_job_aborts_and_raises_translated(engine):
    writer = Writer(engine)
    writer.start()
    aborted: list[bool] = []
    ok, full = Gate(), Gate()
    submitted = asyncio.ensure_future(
        writer.submit(insert(1), after=[ok, full], on_abort=lambda: aborted.append(True))
    )
    ok.finish()
    full.finish(OSError(28, "No space left on device"))
    with pytest.raises(StorageError, match="No space left"):
        await submitted
    assert aborted == [True]  # the files that did get written are removed by on_abort
    assert await writer.submit(insert(2)) == 2
    await writer.close()
    assert logged(engine) == [2]


async def test_close_waits_for_jobs_still_waiting_for_prerequisites(engine):
    writer = Writer(engine)
    writer.start()
    gate = Gate()
    submitted = asyncio.ensure_future(writer.submit(insert(5), after=[gate]))
    await asyncio.sleep(0.01)
    closing = asyncio.ensure_future(writer.close())
    await asyncio.sleep(0.05)
    assert not closing.done()
    gate.finish()
    await closing
    assert await submitted == 5
    assert logged(engine) == [5]


async def test_cancelled_caller_of_a_waiting_job_still_commits(engine):
    writer = Writer(engine)
    writer.start()
    gate = Gate()
    submitted = asyncio.ensure_future(writer.submit(insert(6), after=[gate]))
    await asyncio.sleep(0.01)
    submitted.cancel()
    gate.finish()
    with pytest.raises(asyncio.CancelledError):
        await submitted
    await writer.close()
    assert logged(engine) == [6]


async def test_lock_held_by_another_connection_is_waited_out(engine, tmp_path: Path):
    holder = connect_raw(tmp_path / "w.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    writer = Writer(engine)
    writer.start()
    try:
        job = asyncio.ensure_future(writer.submit(insert(1)))
        await asyncio.sleep(0.3)
        assert not job.done()  # BEGIN IMMEDIATE answered "busy": the writer retries
        holder.execute("COMMIT")
        assert await asyncio.wait_for(job, 10) == 1
    finally:
        holder.close()
        await writer.close()
    assert logged(engine) == [1]


async def test_lock_held_past_lock_wait_fails_the_write_cleanly(engine, tmp_path: Path):
    holder = connect_raw(tmp_path / "w.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    writer = Writer(engine, retry=RetryPolicy(deadline=0.3))
    writer.start()
    try:
        with pytest.raises(StorageError, match="stayed locked"):
            await asyncio.wait_for(writer.submit(insert(1)), 10)
        holder.execute("COMMIT")
        assert await writer.submit(insert(2)) == 2  # the writer goes on once the lock is free
    finally:
        holder.close()
        await writer.close()
    assert logged(engine) == [2]
