"""The reader threads: each keeps one read connection, a failed read gives it back, close ends them.

A read is handed to a thread of the store's own that runs it on the connection it checked out at
its first read; these tests hold that to what callers rely on: every read still starts a fresh
snapshot (it sees what was committed before it), a read that fails leaves nothing open behind it,
and closing leaves no thread and no connection checked out.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, text

from soong_store import SessionStore, StorageError, StoreClosed
from soong_store.read.readers import ReaderThreads
from soong_store.store import run_read, runtime_of
from tests.conftest import text as text_blocks

pytestmark = pytest.mark.sqlite


def read_engine(store: SessionStore) -> Engine:
    engine = runtime_of(store).read_engine
    assert engine is not None
    return engine


def count(engine: Engine, name: str) -> list[Any]:
    seen: list[Any] = []
    event.listen(engine, name, lambda *args: seen.append(args))
    return seen


def reader_threads_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("soong-store-read")]


async def test_sequential_reads_reuse_one_connection(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    checkouts = count(read_engine(store), "checkout")
    for _ in range(20):
        await store.timeline(sid)
    assert len(checkouts) <= 1


async def test_concurrent_reads_use_at_most_the_pool_of_threads(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_node(sid, "user", "message", text_blocks("q"))
    checkouts = count(read_engine(store), "checkout")
    size = runtime_of(store).backend.capabilities.read_connections
    paths = await asyncio.gather(*(store.active_path(sid) for _ in range(5 * size)))
    assert all(len(path) == 1 for path in paths)
    assert len(checkouts) <= size
    assert len(reader_threads_alive()) <= size


async def test_each_read_sees_what_was_committed_before_it(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    for n in range(1, 6):
        await store.append_node(sid, "user", "message", text_blocks(f"q{n}"), parent_id=None)
        assert len(await store.timeline(sid)) == 1 + n


async def test_a_failed_read_gives_its_connection_back(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    checkins = count(read_engine(store), "checkin")

    def failing(connection: Connection) -> None:
        connection.execute(text("SELECT count(*) FROM sessions")).scalar()
        raise ValueError("the query broke")

    with pytest.raises(StorageError, match="the query broke"):
        await run_read(store, failing)
    assert len(checkins) == 1
    await store.append_node(sid, "user", "message", text_blocks("after"))
    assert [n.content[0].text for n in await store.active_path(sid)] == ["after"]  # type: ignore[union-attr]


async def test_close_ends_the_threads_and_returns_their_connections(home: Path) -> None:
    store = SessionStore(home=home)
    await store.open()
    sid = (await store.create_session(cwd=".")).session_id
    engine = read_engine(store)
    await asyncio.gather(*(store.timeline(sid) for _ in range(8)))
    checkins = count(engine, "checkin")
    held = engine.pool.checkedout()  # type: ignore[attr-defined]
    assert held >= 1
    await store.close()
    assert len(checkins) == held
    assert reader_threads_alive() == []
    with pytest.raises(StoreClosed):
        await store.timeline(sid)


async def test_a_read_queued_after_shutdown_is_refused(home: Path) -> None:
    store = SessionStore(home=home)
    await store.open()
    readers = ReaderThreads(read_engine(store), 2, "soong-store-read-test")
    try:
        assert await readers.submit(lambda: 41 + 1) == 42
        readers.shutdown()
        with pytest.raises(StoreClosed):
            readers.submit(lambda: 0)
    finally:
        await store.close()


async def test_reads_from_another_loop_come_back_to_it(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id

    def in_other_loop() -> int:
        return len(asyncio.run(store.timeline(sid)))

    assert await asyncio.to_thread(in_other_loop) == 1
    assert len(await store.timeline(sid)) == 1


async def test_a_read_cancelled_before_it_starts_never_runs(home: Path) -> None:
    store = SessionStore(home=home)
    await store.open()
    readers = ReaderThreads(read_engine(store), 1, "soong-store-read-test")
    gate = threading.Event()
    ran: list[str] = []
    try:
        first = readers.submit(lambda: gate.wait(10))
        second = readers.submit(lambda: ran.append("second"))
        second.cancel()
        gate.set()
        assert await first is True
        assert await readers.submit(lambda: "third") == "third"
        assert ran == []
    finally:
        readers.shutdown()
        await store.close()
