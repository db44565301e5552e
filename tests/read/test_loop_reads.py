"""Small reads on the caller's event loop: taken there only when nothing can make the loop wait.

A read the store marks small (a row, a page, a path's tail) runs on the loop's thread, on a read
connection the reader threads leave idle, with SQLite's busy handler off meanwhile. Anything
the loop cannot do (a busy database, a driver error, a shard to attach, no idle connection)
sends the read to a reader thread, whose answer is the answer.
"""

from __future__ import annotations

import asyncio
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import OperationalError

from soong_store import NotFound, SessionStore
from soong_store.backends.sqlite import backend as sqlite_backend
from soong_store.catalog import lookup as catalog
from soong_store.read import record_reads
from soong_store.read import session_reads as reads
from soong_store.read.readers import ON_LOOP, SMALL_ROWS
from soong_store.store import runtime_of
from tests.conftest import idle_link
from tests.conftest import text as text_blocks
from tests.shard_support import limited, settle

pytestmark = pytest.mark.sqlite


def read_engine(store: SessionStore) -> Engine:
    engine = runtime_of(store).read_engine
    assert engine is not None
    return engine


def where(_connection: Connection) -> int:
    return threading.get_ident()


def busy_timeout(connection: Connection) -> int:
    return int(connection.execute(text("PRAGMA busy_timeout")).scalar_one())


async def test_a_small_read_runs_on_the_loop_without_waiting_for_locks(
    store: SessionStore,
) -> None:
    runtime, here = runtime_of(store), threading.get_ident()
    assert await runtime.read(where, ON_LOOP) == here  # on the connection the open left
    assert await runtime.read(where) != here  # not small: a reader thread
    assert await runtime.read(busy_timeout, ON_LOOP) == 0
    # The same connection (the only one), back with a reader thread: it waits again.
    assert await runtime.read(busy_timeout) == sqlite_backend.BUSY_TIMEOUT_MS


async def test_with_no_idle_connection_a_small_read_goes_to_a_thread(
    store: SessionStore,
) -> None:
    runtime, here = runtime_of(store), threading.get_ident()
    readers = runtime._readers
    assert readers is not None
    connects: list[Any] = []
    event.listen(read_engine(store), "connect", lambda *args: connects.append(args))
    taken = []
    while (connection := readers.lend()) is not None:
        taken.append(connection)
    assert taken
    try:
        assert await runtime.read(where, ON_LOOP) != here
        assert len(connects) == 1  # made by the reader thread, not on the loop
    finally:
        for connection in taken:
            readers.keep(connection)
    assert await runtime.read(where, ON_LOOP) == here


async def test_small_reads_through_the_api_answer_as_the_threads_do(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    for n in range(12):
        await store.append_node(sid, "user", "message", text_blocks(f"q{n}"), token_count=n)
        await store.append_event(sid, "mark", payload={"n": n})
    runtime, here = runtime_of(store), threading.get_ident()
    assert await runtime.read(where, ON_LOOP) == here
    whole = await store.timeline(sid)
    assert await store.timeline(sid, after_seq=whole[3].seq, limit=5) == whole[4:9]
    path = await store.active_path(sid)
    assert await store.active_path(sid, limit=3) == path[-3:]
    tail = await store.context(sid, limit=4)
    assert tail.nodes == path[-4:]
    assert tail.token_count == sum(n.token_count or 0 for n in path[-4:])
    assert await store.get_node(sid, path[5].node_id) == path[5]
    assert (await store.get_session(sid)).active_node_id == path[-1].node_id
    with pytest.raises(NotFound):
        await store.get_session("0" * 26)


async def test_a_page_of_sessions_is_read_on_the_loop(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [(await store.create_session(cwd=".")).session_id for _ in range(5)]
    handed = count_thread_reads(store, monkeypatch)
    first = await store.list_sessions(limit=3)
    rest = await store.list_sessions(limit=3, after=first[-1])
    assert handed == []
    assert [s.session_id for s in first + rest] == made[::-1]
    assert await store.list_sessions() == first + rest and len(handed) == 1  # no limit: a thread


async def test_a_store_error_on_the_loop_keeps_the_connection(store: SessionStore) -> None:
    runtime, here = runtime_of(store), threading.get_ident()
    checkins: list[Any] = []
    event.listen(read_engine(store), "checkin", lambda *args: checkins.append(args))
    for _ in range(3):
        with pytest.raises(NotFound):
            await store.get_session("0" * 26)
    assert checkins == []
    assert await runtime.read(where, ON_LOOP) == here


async def test_a_driver_error_on_the_loop_sends_the_read_to_a_thread(store: SessionStore) -> None:
    runtime, here = runtime_of(store), threading.get_ident()
    dropped: list[Any] = []
    on_thread: list[int] = []

    def busy_on_the_loop(connection: Connection) -> str:
        if threading.get_ident() == here:
            dropped.append(connection.connection.driver_connection)
            raise OperationalError("SELECT 1", {}, Exception("database is locked"))
        on_thread.append(busy_timeout(connection))
        return "from a thread"

    assert await runtime.read(busy_on_the_loop, ON_LOOP) == "from a thread"
    assert len(dropped) == 1 and on_thread == [sqlite_backend.BUSY_TIMEOUT_MS]
    driver_error = read_engine(store).dialect.loaded_dbapi.ProgrammingError
    with pytest.raises(driver_error, match="closed"):  # never used again without its lock wait
        dropped[0].execute("SELECT 1")
    assert await runtime.read(where, ON_LOOP) == here  # the thread's connection, idle now
    assert await runtime.read(busy_timeout, ON_LOOP) == 0


async def test_a_small_read_of_a_session_in_a_shard_goes_to_a_thread(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with limited():
        async with SessionStore(home=home) as store:
            sids = []
            for i in range(6):
                sid = (await store.create_session(cwd=".")).session_id
                for n in range(3):
                    await store.append_node(sid, "user", "message", text_blocks(f"{i}.{n}"))
                sids.append(sid)
            placed = await settle(store)
        away = [sid for sid in sids if placed[sid][0] != catalog.MAIN]
        assert away
        async with SessionStore(home=home) as store:  # new connections: no shard attached
            runtime, here = runtime_of(store), threading.get_ident()
            assert await runtime.read(where, ON_LOOP) == here  # the engine, made on the loop
            handed = count_thread_reads(store, monkeypatch)
            await store.timeline(away[0], limit=2)
            assert len(handed) == 1  # the shard is attached on a reader thread
            for sid in away:  # the small reads first: nothing of the session cached yet
                page = await store.timeline(sid, limit=2)
                leaf = await store.active_path(sid, limit=1)
                assert page == (await store.timeline(sid))[:2]
                assert leaf == (await store.active_path(sid))[-1:]


async def test_small_reads_from_two_loops_at_once(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    for n in range(30):
        await store.append_event(sid, "mark", payload={"n": n})
    whole = await store.timeline(sid)

    async def pages() -> list[bool]:
        got = await asyncio.gather(
            *(store.timeline(sid, after_seq=whole[i].seq, limit=3) for i in range(25))
        )
        return [page == whole[i + 1 : i + 4] for i, page in enumerate(got)]

    checkouts: list[Any] = []
    event.listen(read_engine(store), "checkout", lambda *args: checkouts.append(args))
    other = asyncio.to_thread(lambda: asyncio.run(pages()))
    big = [store.timeline(sid) for _ in range(8)]  # on the threads meanwhile
    results: list[Any] = await asyncio.gather(other, *big, *(pages() for _ in range(4)))
    assert all(all(ok) for ok in results[:1] + results[9:])
    assert all(got == whole for got in results[1:9])
    assert (
        len(checkouts) < runtime_of(store).backend.capabilities.read_connections
    )  # the open made one


async def test_close_returns_every_read_connection(home: Path) -> None:
    store = SessionStore(home=home)
    await store.open()
    runtime = runtime_of(store)
    assert await runtime.read(where, ON_LOOP) == threading.get_ident()
    await asyncio.gather(*(runtime.read(where) for _ in range(8)))
    engine = read_engine(store)
    held = engine.pool.checkedout()  # type: ignore[attr-defined]
    checkins: list[Any] = []
    event.listen(engine, "checkin", lambda *args: checkins.append(args))
    await store.close()
    assert len(checkins) == held >= 1


def count_thread_reads(store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Each read handed to a reader thread from now on."""
    readers = runtime_of(store)._readers
    assert readers is not None
    handed: list[object] = []
    submit = readers.submit

    def counted(work: Any) -> Any:
        handed.append(work)
        return submit(work)

    monkeypatch.setattr(readers, "submit", counted)
    return handed


async def test_a_whole_path_is_read_on_the_loop_while_little_of_it_is_new(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SessionStore(home=home) as store:
        short = (await store.create_session(cwd=".")).session_id
        long = (await store.create_session(cwd=".")).session_id
        for n in range(SMALL_ROWS + 40):
            if n < 100:
                await store.append_node(short, "user", "message", text_blocks(f"s{n}"))
            await store.append_node(long, "user", "message", text_blocks(f"l{n}"))
    async with SessionStore(home=home) as store:  # nothing cached
        handed = count_thread_reads(store, monkeypatch)
        assert len((await store.context(short)).nodes) == 100
        assert handed == []  # 100 nodes to read: on the loop
        path = await store.active_path(long)
        assert [n.content[0].text for n in path[:2]] == ["l0", "l1"]  # type: ignore[union-attr]
        assert len(path) == SMALL_ROWS + 40 and len(handed) == 1  # past the budget: a thread
        assert await store.active_path(long) == path and len(handed) == 1  # cached: the loop
        leaf = await store.append_node(long, "user", "message", text_blocks("more"))
        view = await store.context(long)
        assert view.nodes == [*path, leaf] and len(handed) == 1


async def test_a_sessions_listings_are_read_on_the_loop_within_the_budget(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    main = (await store.get_session(sid)).root_agent_id
    assert main is not None
    await store.create_agent(sid, "sub", parent_agent_id=main)
    await store.start_run(sid, main)
    await store.put_artifact(sid, b"some bytes", filename="a.txt")
    root = await store.append_node(sid, "user", "message", text_blocks("q"))
    for n in range(3):
        await store.append_node(
            sid, "user", "message", text_blocks(f"a{n}"), parent_id=root.node_id
        )
    runtime = runtime_of(store)
    threads = [  # each listing as a reader thread answers it
        await runtime.read(partial(query, session_id=sid))
        for query in (record_reads.list_agents, record_reads.list_runs, record_reads.list_artifacts)
    ]
    kids = await runtime.read(partial(reads.children, session_id=sid, node_id=root.node_id))
    handed = count_thread_reads(store, monkeypatch)
    assert await store.list_agents(sid) == threads[0] and len(threads[0]) == 2
    assert await store.list_runs(sid) == threads[1] and len(threads[1]) == 1
    assert await store.list_artifacts(sid) == threads[2] and len(threads[2]) == 1
    assert await store.children(sid, root.node_id) == kids and len(kids) == 3
    assert handed == []
    with pytest.raises(NotFound):
        await store.list_runs("0" * 26)
    assert handed == []


async def test_a_listing_past_the_budget_is_read_on_a_thread(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    root = await store.append_node(sid, "user", "message", text_blocks("q"))
    async with store.transaction(sid) as tx:
        for n in range(SMALL_ROWS + 1):
            tx.add_node("user", "message", text_blocks(f"a{n}"), parent_id=root.node_id)
    handed = count_thread_reads(store, monkeypatch)
    kids = await store.children(sid, root.node_id)
    assert len(kids) == SMALL_ROWS + 1 and len(handed) == 1
    assert [n.content[0].text for n in kids[:2]] == ["a0", "a1"]  # type: ignore[union-attr]


async def test_a_store_error_on_the_link_keeps_it(home: Path) -> None:
    sid = (await make_sessions(home, 1))[0]
    async with SessionStore(home=home) as store:
        link = idle_link(store)
        with pytest.raises(NotFound):
            await store.get_session("0" * 26)
        assert await store.get_session(sid) and idle_link(store) is link
        assert runtime_of(store).read_engine is None


async def test_a_driver_error_on_the_link_drops_it_and_a_thread_reads(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = (await make_sessions(home, 1))[0]
    async with SessionStore(home=home) as store:
        link = idle_link(store)
        link.connection.driver_connection.close()  # its next statement fails
        handed = count_thread_reads(store, monkeypatch)
        assert [n.content[0].text for n in (await store.context(sid)).nodes] == ["n0"]  # type: ignore[union-attr]
        assert len(handed) == 1 and link.closed
        assert runtime_of(store).read_engine is not None  # made anew: nothing to take over


async def test_a_session_in_a_shard_read_first_on_the_link_goes_to_a_thread(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with limited():
        sids = await make_sessions(home, 6)
        async with SessionStore(home=home) as store:
            placed = await settle(store)
        away = [sid for sid in sids if placed[sid][0] != catalog.MAIN]
        assert away
        async with SessionStore(home=home) as store:
            link = idle_link(store)
            handed = count_thread_reads(store, monkeypatch)
            assert [n.content[0].text for n in (await store.context(away[0])).nodes] == ["n0"]  # type: ignore[union-attr]
            assert len(handed) == 1 and link.closed  # the engine took it over, on the thread
            assert (await store.get_session(away[0])).session_id == away[0]
            assert len(handed) == 1  # the session's row is in the main file: the loop


async def make_sessions(home: Path, count: int) -> list[str]:
    """``count`` sessions of one node each, in a store closed again."""
    async with SessionStore(home=home) as store:
        sids = [(await store.create_session(cwd=".")).session_id for _ in range(count)]
        for sid in sids:
            await store.append_node(sid, "user", "message", text_blocks("n0"))
    return sids
