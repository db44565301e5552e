"""Batches on the caller's event loop: a writer made with ``on_loop`` on a SQLite write engine.

The jobs a loop submits in one turn commit together on the loop's own thread while the writer's
thread is idle; whatever would make the loop wait (a lock held elsewhere, jobs queued for the
thread before them) sends them to the thread, and the WAL's checkpoints run there too. Each job
records the thread it ran on. What the store does through the API is in ``tests/store``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, text

from soong_store import SessionStore
from soong_store.backends.sqlite import connect as sqlite_connect
from soong_store.backends.sqlite.backend import SQLiteBackend, make_engine
from soong_store.errors import InvalidArgument
from soong_store.migrate.upgrade import upgrade
from soong_store.store import runtime_of
from soong_store.write import writer as writer_module
from soong_store.write.writer import WriteConnection, Writer
from tests.conftest import LoopTicker, connect_raw

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]

WRITER_THREAD = "soong-store-writer"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'w.sqlite'}"
    upgrade(url)
    engine = make_engine(url, "write")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE log (n INTEGER NOT NULL UNIQUE, thread TEXT NOT NULL)")
    yield engine
    engine.dispose()


def insert(n: int) -> Callable[[Connection], str]:
    """A job that logs ``n`` with the name of the thread it runs on, and returns that name."""

    def job(conn: Connection) -> str:
        thread = threading.current_thread().name
        conn.execute(text("INSERT INTO log (n, thread) VALUES (:n, :t)"), {"n": n, "t": thread})
        return thread

    return job


def refuse_after_writing(n: int) -> Callable[[Connection], None]:
    def job(conn: Connection) -> None:
        insert(n)(conn)
        raise InvalidArgument(f"job {n} refused after writing")

    return job


def logged(engine: Engine) -> list[tuple[int, str]]:
    """The log, read on a connection of its own (the writer may hold the engine's one)."""
    assert engine.url.database is not None
    reader = connect_raw(engine.url.database)
    try:
        return [(r[0], r[1]) for r in reader.execute("SELECT n, thread FROM log ORDER BY rowid")]
    finally:
        reader.close()


def count_commits(engine: Engine) -> list[str]:
    """The name of the thread of each commit on ``engine`` from now on."""
    commits: list[str] = []

    @event.listens_for(engine, "commit")
    def _commit(_conn: Connection) -> None:
        commits.append(threading.current_thread().name)

    return commits


class Done:
    """A prerequisite that is over at once: its job is queued for the writer's thread."""

    def when_done(self, callback: Callable[[], None]) -> None:
        callback()

    def error(self) -> BaseException | None:
        return None


async def started(engine: Engine) -> Writer:
    """A writer on the loop whose connection is made (its first job runs on its thread)."""
    writer = Writer(engine, on_loop=True)
    writer.start()
    assert await writer.submit(insert(0)) == WRITER_THREAD  # no connection yet: the thread
    return writer


async def test_jobs_of_one_turn_commit_once_on_the_loops_thread_each_isolated(
    engine: Engine,
) -> None:
    writer = await started(engine)
    commits = count_commits(engine)
    jobs: list[Callable[[Connection], Any]] = [insert(n) for n in range(1, 6)]
    jobs[2] = refuse_after_writing(3)
    outcomes = await asyncio.gather(*(writer.submit(j) for j in jobs), return_exceptions=True)
    await writer.close()
    here = threading.current_thread().name
    assert isinstance(outcomes[2], InvalidArgument)
    assert [o for i, o in enumerate(outcomes) if i != 2] == [here] * 4
    assert commits == [here]  # one transaction for the five, on the caller's thread
    assert logged(engine) == [(0, WRITER_THREAD)] + [(n, here) for n in (1, 2, 4, 5)]


async def test_a_lock_held_elsewhere_sends_the_batch_to_the_thread_and_the_loop_runs_on(
    engine: Engine, tmp_path: Path
) -> None:
    writer = await started(engine)
    holder = connect_raw(tmp_path / "w.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        async with LoopTicker() as ticker:
            job = asyncio.ensure_future(writer.submit(insert(1)))
            await asyncio.sleep(0.3)
            assert not job.done()
            assert ticker.ticks >= 5  # the loop went on while the job waited for the lock
        holder.execute("COMMIT")
        assert await asyncio.wait_for(job, 10) == WRITER_THREAD
    finally:
        holder.close()
        await writer.close()
    assert logged(engine)[-1] == (1, WRITER_THREAD)


async def test_a_batch_waits_behind_jobs_queued_for_the_thread_before_it(engine: Engine) -> None:
    writer = await started(engine)
    go = threading.Event()
    running = threading.Event()

    def held(conn: Connection) -> str:
        running.set()
        assert go.wait(10)
        return insert(1)(conn)

    first = asyncio.ensure_future(writer.submit(held, after=[Done()]))
    await asyncio.to_thread(running.wait, 10)
    later = [asyncio.ensure_future(writer.submit(insert(n))) for n in (2, 3)]
    await asyncio.sleep(0.05)
    assert not any(f.done() for f in later)  # not run on the loop past the held job
    go.set()
    assert await first == WRITER_THREAD
    assert await asyncio.gather(*later) == [WRITER_THREAD] * 2
    assert [n for n, _ in logged(engine)] == [0, 1, 2, 3]
    assert await writer.submit(insert(4)) == threading.current_thread().name  # idle again
    await writer.close()


async def checkpointed(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, commits: int
) -> tuple[list[tuple[str, bool]], int, int, int]:
    """``commits`` one-row commits; each checkpoint's thread and answer, the -wal's frames, how
    often the log was started again and ``wal_autocheckpoint`` on the write connection."""
    checkpoints: list[tuple[str, bool]] = []
    original = SQLiteBackend.checkpoint

    def spy(connection: Connection) -> bool:
        answer = original(connection)
        checkpoints.append((threading.current_thread().name, answer))
        return answer

    monkeypatch.setattr(SQLiteBackend, "checkpoint", staticmethod(spy))
    writer = await started(engine)
    pragma = await writer.submit(
        lambda conn: conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()
    )
    for n in range(1, commits + 1):
        await writer.submit(insert(n))
    assert engine.url.database is not None
    wal = Path(engine.url.database + "-wal").read_bytes()
    await writer.close()
    assert len(logged(engine)) == commits + 1
    # The log's header counts the times a write started it again from its beginning.
    restarts = int.from_bytes(wal[12:16], "big")
    return checkpoints, (len(wal) - 32) // (24 + 4096), restarts, pragma


async def test_checkpoints_run_on_the_writers_thread_and_never_in_a_commit(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_connect, "RESTART_FRAMES", 600)
    checkpoints, frames, restarts, pragma = await checkpointed(engine, monkeypatch, 2000)
    assert pragma == 0  # SQLite's own checkpoint, inside a COMMIT, is off
    assert {thread for thread, _ in checkpoints} == {WRITER_THREAD}
    first_steps = restarted(checkpoints)
    assert len(first_steps) >= 7  # 2,000 rows changed: one per 256
    assert sum(first_steps) >= 2  # the log passed 600 frames: copied whole with writes held
    assert restarts >= sum(first_steps)  # each whole copy let the next write start it again
    # So the file holds the frames of the longest stretch between two starts, not of all 2,000
    # commits (about 4,100 frames unrestarted; the stretch is longer while the writer's thread
    # waits for a busy machine's cores: 1,070-1,150 frames idle, up to 1,530 under load).
    assert frames < 2000


async def test_writes_are_held_for_a_checkpoint_only_once_the_log_is_long(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    owed: list[int] = []
    run = WriteConnection.checkpoint

    def counted(self: WriteConnection) -> None:
        owed.append(1)
        run(self)

    monkeypatch.setattr(WriteConnection, "checkpoint", counted)
    checkpoints, frames, restarts, _ = await checkpointed(engine, monkeypatch, 1500)
    assert len(owed) >= 5  # one per 256 rows changed
    assert len(checkpoints) == len(owed)  # ~3,000 frames, below RESTART_FRAMES: no second step
    assert not any(answer for _, answer in checkpoints)
    # The log is never started again by a held step. SQLite itself starts it again when a
    # passive checkpoint copied all of it before the next write: that takes a busy machine,
    # whose loop wrote nothing while the writer's thread checkpointed, and shortens the log.
    assert frames < sqlite_connect.RESTART_FRAMES
    if restarts == 0:
        assert frames > 2000  # ~3,000 frames of 1,500 commits, all still in the log


def restarted(checkpoints: list[tuple[str, bool]]) -> list[bool]:
    """The answers of the checkpoints run while writes went on (a true one is followed by the
    step that holds them, whose own answer is not asked)."""
    answers = [answer for _, answer in checkpoints]
    firsts, index = [], 0
    while index < len(answers):
        firsts.append(answers[index])
        index += 2 if answers[index] else 1
    return firsts


async def test_a_batch_whose_reset_fails_on_the_loop_goes_to_the_thread_on_a_new_connection(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = await started(engine)

    def refused(*args: object) -> int:
        raise RuntimeError("the loop's attempt broke")

    def recovery_breaks(self: WriteConnection) -> None:
        raise RuntimeError("recovery broke")

    monkeypatch.setattr(writer_module, "attempt", refused)  # the loop's attempt only
    monkeypatch.setattr(WriteConnection, "recover", recovery_breaks)
    assert await asyncio.wait_for(writer.submit(insert(1)), 10) == WRITER_THREAD
    monkeypatch.undo()
    assert await writer.submit(insert(2)) == threading.current_thread().name
    await writer.close()
    assert [n for n, _ in logged(engine)] == [0, 1, 2]


async def test_a_cancelled_caller_of_a_batch_on_the_loop_still_commits(engine: Engine) -> None:
    writer = await started(engine)
    job = asyncio.ensure_future(writer.submit(insert(1)))
    await asyncio.sleep(0)  # it has joined this turn's batch
    job.cancel()
    await asyncio.sleep(0.01)
    await writer.close()
    assert logged(engine)[-1] == (1, threading.current_thread().name)


async def test_close_runs_the_batch_of_the_turn_first(engine: Engine) -> None:
    writer = await started(engine)
    job = asyncio.ensure_future(writer.submit(insert(1)))
    await asyncio.sleep(0)
    await writer.close()
    assert await job == threading.current_thread().name
    assert logged(engine)[-1][0] == 1


async def test_close_runs_the_batch_of_a_loop_closed_before_its_turn_ended(
    engine: Engine,
) -> None:
    writer = await started(engine)

    def other_loop() -> None:
        async def submit_then_stop() -> None:
            pending = writer.submit(insert(7))
            pending.send(None)  # joined this turn's batch, whose run is queued on the loop
            asyncio.get_running_loop().stop()  # the turn never ends
            pending.close()

        loop = asyncio.new_event_loop()
        loop.run_until_complete(submit_then_stop())
        loop.close()

    await asyncio.to_thread(other_loop)
    await asyncio.wait_for(writer.close(), 10)  # it does not wait for that turn for ever
    assert logged(engine)[-1] == (7, WRITER_THREAD)  # the job still ran; nobody was told


async def test_only_normal_durability_commits_on_a_loop(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.sqlite'}"
    assert SQLiteBackend(url).commits_on_loop
    assert not SQLiteBackend(url, durability="full").commits_on_loop


@pytest.mark.parametrize(("durability", "on_loop"), [("normal", True), ("full", False)])
async def test_a_stores_appends_commit_on_the_loop_only_at_normal_durability(
    tmp_path: Path, durability: str, on_loop: bool
) -> None:
    async with SessionStore(home=tmp_path / "home", durability=durability) as store:  # type: ignore[arg-type]
        sid = (await store.create_session(cwd=str(tmp_path))).session_id
        await store.append_node(sid, "user", "message", [{"type": "text", "text": "first"}])
        await asyncio.sleep(0.2)  # the maintenance the pair's creation owes is done meanwhile
        engine = runtime_of(store).write_engine
        assert engine is not None
        commits = count_commits(engine)
        for n in range(3):
            await store.append_node(sid, "user", "message", [{"type": "text", "text": f"{n}"}])
        assert len(await store.active_path(sid)) == 4
    here = threading.current_thread().name
    assert commits == [here if on_loop else WRITER_THREAD] * 3
