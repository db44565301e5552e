"""Opening a SQLite store connects no writer: the first read or the first write does what it needs.

A store that only reads (most CLI commands) makes no write connection at all, yet the file is in
WAL mode before anything is read or written, and an old home is still upgraded at open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.pool import QueuePool

from soong_store import SessionStore
from soong_store.migrate.upgrade import current_revision, head_revision, upgrade
from soong_store.store import runtime_of
from tests.conftest import connect_raw, db_path, text

pytestmark = pytest.mark.sqlite


def count_connects(store: SessionStore) -> list[Any]:
    """A list that grows by one for each new connection the store's write engine makes.

    Also checks that the write engine holds no connection yet (one made while opening).
    """
    engine = runtime_of(store).write_engine
    assert engine is not None
    pool = engine.pool
    assert isinstance(pool, QueuePool)
    assert pool.checkedin() + pool.checkedout() == 0
    made: list[Any] = []
    event.listen(engine, "connect", lambda dbapi_connection, _record: made.append(dbapi_connection))
    return made


def journal_mode(home: Path) -> str:
    connection = connect_raw(db_path(home))
    try:
        return str(connection.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        connection.close()


async def make_session(home: Path) -> str:
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("q"))
        return sid


async def test_a_store_that_only_reads_makes_no_write_connection(home: Path) -> None:
    sid = await make_session(home)
    store = SessionStore(home=home)
    await store.open()
    try:
        made = count_connects(store)
        assert len(await store.active_path(sid)) == 1
        assert [s.session_id for s in await store.list_sessions()] == [sid]
        assert made == []
        assert not runtime_of(store).writer_started
    finally:
        await store.close()


async def test_the_first_write_connects_the_writer_once(home: Path) -> None:
    store = SessionStore(home=home)
    await store.open()
    try:
        made = count_connects(store)
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("q"))
        assert len(made) == 1
        assert len(await store.active_path(sid)) == 1
    finally:
        await store.close()


async def test_a_new_home_is_in_wal_mode_before_its_first_read(home: Path) -> None:
    async with SessionStore(home=home) as store:
        assert await store.list_sessions() == []
        assert journal_mode(home) == "wal"


async def test_an_old_home_is_upgraded_at_open_without_a_write_connection(home: Path) -> None:
    home.mkdir()
    url = f"sqlite:///{db_path(home)}"
    upgrade(url, "0004")
    assert journal_mode(home) == "delete"
    store = SessionStore(home=home)
    await store.open()
    try:
        made = count_connects(store)
        assert current_revision(url) == head_revision()
        assert await store.list_sessions() == []
        assert journal_mode(home) == "wal"
        assert made == []
    finally:
        await store.close()
