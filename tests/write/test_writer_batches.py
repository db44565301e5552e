"""Group commit in the writer: jobs queued while it works run as one batch, each still isolated.

SQLite-only, as ``test_writer.py``: the Writer is driven directly on an engine of the SQLite
backend. A first job holds the writer until the test has queued the others, so that those
others are known to form one batch.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from soong_store.backends.sqlite.backend import make_engine
from soong_store.errors import InvalidArgument
from soong_store.migrate.upgrade import upgrade
from soong_store.write.writer import Writer

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Any]:
    url = f"sqlite:///{tmp_path / 'w.sqlite'}"
    upgrade(url)
    engine = make_engine(url, "write")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE log (n INTEGER NOT NULL UNIQUE)")
    yield engine
    engine.dispose()


def insert(n: int) -> Callable[[Connection], int]:
    def job(conn: Connection) -> int:
        conn.execute(text("INSERT INTO log (n) VALUES (:n)"), {"n": n})
        return n

    return job


def refuse_after_writing(n: int) -> Callable[[Connection], None]:
    def job(conn: Connection) -> None:
        conn.execute(text("INSERT INTO log (n) VALUES (:n)"), {"n": n})
        raise InvalidArgument(f"job {n} refused after writing")

    return job


def logged(engine: Any) -> list[int]:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(text("SELECT n FROM log ORDER BY rowid"))]


class Held:
    """A job that keeps the writer busy until :meth:`release` (the next jobs pile up)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()

    def __call__(self, conn: Connection) -> str:
        self.started.set()
        assert self.go.wait(10)
        return "held"

    def release(self) -> None:
        self.go.set()


async def queued_behind(
    writer: Writer, jobs: list[Callable[[Connection], Any]]
) -> list[asyncio.Future[Any]]:
    """Submit ``jobs`` while the writer is held, so that they form one batch once released."""
    held = Held()
    first = asyncio.ensure_future(writer.submit(held))
    await asyncio.to_thread(held.started.wait, 10)
    futures = [asyncio.ensure_future(writer.submit(job)) for job in jobs]
    await asyncio.sleep(0)  # each submit has queued its job
    held.release()
    assert await first == "held"
    return futures


def count_writer_wakeups(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record each ``call_soon_threadsafe`` the writer's thread makes on the running loop."""
    loop = asyncio.get_running_loop()
    original = loop.call_soon_threadsafe
    calls: list[object] = []

    def spy(callback: Callable[..., object], *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "soong-store-writer":
            calls.append(callback)
        return original(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", spy)
    return calls


async def test_a_batch_wakes_its_callers_loop_once_and_settles_every_future(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = Writer(engine)
    writer.start()
    wakeups = count_writer_wakeups(monkeypatch)
    jobs: list[Callable[[Connection], Any]] = [insert(i) for i in range(8)]
    jobs[3] = refuse_after_writing(103)
    futures = await queued_behind(writer, jobs)
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    await writer.close()
    assert len(wakeups) == 2  # the held job's batch, then the eight queued behind it
    assert isinstance(outcomes[3], InvalidArgument)
    assert [o for i, o in enumerate(outcomes) if i != 3] == [0, 1, 2, 4, 5, 6, 7]
    assert logged(engine) == [0, 1, 2, 4, 5, 6, 7]


async def test_jobs_with_savepoints_of_their_own_stay_isolated_in_a_batch(engine: Any) -> None:
    def nested_then_fail(conn: Connection) -> None:
        with conn.begin_nested():
            conn.execute(text("INSERT INTO log (n) VALUES (201)"))
        raise InvalidArgument("refused after its own savepoint was released")

    def nested_partly(conn: Connection) -> int:
        conn.execute(text("INSERT INTO log (n) VALUES (301)"))
        inner = conn.begin_nested()
        conn.execute(text("INSERT INTO log (n) VALUES (302)"))
        inner.rollback()
        return 301

    writer = Writer(engine)
    writer.start()
    futures = await queued_behind(writer, [insert(1), nested_then_fail, nested_partly, insert(2)])
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    await writer.close()
    assert outcomes[0] == 1 and outcomes[2] == 301 and outcomes[3] == 2
    assert isinstance(outcomes[1], InvalidArgument)
    assert logged(engine) == [1, 301, 2]


async def test_a_failing_first_job_of_a_batch_harms_none_after_it(engine: Any) -> None:
    writer = Writer(engine)
    writer.start()
    futures = await queued_behind(writer, [refuse_after_writing(9), insert(1), insert(1)])
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    await writer.close()
    assert isinstance(outcomes[0], InvalidArgument)
    assert outcomes[1] == 1
    assert "UNIQUE" in str(outcomes[2])  # the duplicate fails alone
    assert logged(engine) == [1]


async def test_one_batch_from_two_event_loops_answers_each_in_its_own(engine: Any) -> None:
    writer = Writer(engine)
    writer.start()
    held = Held()
    first = asyncio.ensure_future(writer.submit(held))
    await asyncio.to_thread(held.started.wait, 10)
    submitted = threading.Barrier(2)

    def other_loop() -> list[Any]:
        async def main() -> list[Any]:
            futures = [asyncio.ensure_future(writer.submit(insert(n))) for n in (10, 11)]
            await asyncio.sleep(0)
            submitted.wait(10)
            return await asyncio.gather(*futures)

        return asyncio.run(main())

    other = asyncio.ensure_future(asyncio.to_thread(other_loop))
    mine = [asyncio.ensure_future(writer.submit(insert(n))) for n in (20, 21)]
    await asyncio.sleep(0)
    await asyncio.to_thread(submitted.wait, 10)
    held.release()
    assert await first == "held"
    assert await asyncio.gather(*mine) == [20, 21]
    assert await other == [10, 11]
    await writer.close()
    assert sorted(logged(engine)) == [10, 11, 20, 21]


async def test_the_jobs_of_one_turn_reach_the_thread_as_one_batch(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import soong_store.write.writer as writer_module

    sizes: list[int] = []
    run = writer_module.run_to_outcome

    def counted(link: Any, dialect: Any, retry: Any, batch: list[Any]) -> None:
        sizes.append(len(batch))
        run(link, dialect, retry, batch)

    async def stall() -> None:
        time.sleep(0.05)  # the turn goes on; a thread woken by the first job alone takes it now

    monkeypatch.setattr(writer_module, "run_to_outcome", counted)
    writer = Writer(engine, max_batch=5)  # not on the loop: every job runs on the thread
    writer.start()
    for turn in range(3):
        jobs = [writer.submit(insert(turn * 8 + i)) for i in range(8)]
        steps = [asyncio.ensure_future(jobs[0]), asyncio.ensure_future(stall())]
        steps += [asyncio.ensure_future(job) for job in jobs[1:]]
        done = await asyncio.gather(*steps)
        assert [n for n in done if n is not None] == [turn * 8 + i for i in range(8)]
    await writer.close()
    assert sizes == [5, 3] * 3  # one hand-over a turn, cut at max_batch
    assert logged(engine) == list(range(24))
