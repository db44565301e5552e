"""Revision 0009: ``sessions.owner`` and ``sessions.key``, up and down; the plans use its indexes.

SQLite files are opened raw to read ``sqlite_master``, the columns and the query plans.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, event

import soong_store
from soong_store import SessionStore
from soong_store.backends.sqlite.backend import make_engine
from soong_store.migrate.upgrade import alembic_config
from soong_store.read import record_reads
from tests.conftest import connect_raw, db_path, text

pytestmark = pytest.mark.sqlite

INDEXES = {
    "ix_sessions_owner_updated_at",
    "ix_sessions_cwd_updated_at",
    "uq_sessions_owner_key",
    "uq_sessions_key_without_owner",
}


def query(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    con = connect_raw(path)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def alembic(path: Path, action: str, target: str) -> None:
    engine = make_engine(f"sqlite:///{path}", "admin")
    try:
        with engine.connect() as connection, connection.begin():
            getattr(command, action)(alembic_config(connection), target)
    finally:
        engine.dispose()


def columns(path: Path) -> list[str]:
    return [row[1] for row in query(path, "PRAGMA table_info(sessions)")]


def indexes(path: Path) -> set[str]:
    rows = query(path, "SELECT name FROM sqlite_master WHERE type = 'index'")
    return {name for (name,) in rows}


async def test_down_and_up_again_keeps_the_sessions(home: Path) -> None:
    async with SessionStore(home=home) as store:
        keyed = await store.create_session("/p", owner="alice", key="k")
        plain = await store.create_session("/p")
        await store.append_node(plain.session_id, "user", "message", text("hi"))
    path = db_path(home)
    alembic(path, "downgrade", "0008")
    assert "owner" not in columns(path) and "key" not in columns(path)
    assert not INDEXES & indexes(path)
    assert query(path, "SELECT count(*) FROM sessions") == [(2,)]
    assert query(path, "PRAGMA foreign_key_check") == []
    alembic(path, "upgrade", "0009")
    assert columns(path)[-2:] == ["owner", "key"]
    assert indexes(path) >= INDEXES
    async with SessionStore(home=home) as store:  # the owner went with the downgrade
        again = await store.get_session(keyed.session_id)
        assert (again.owner, again.key) == (None, None)
        assert [s.session_id for s in await store.list_sessions(owner="alice")] == []
        assert (await store.get_session(plain.session_id)).session_id == plain.session_id


def test_two_sessions_without_an_owner_cannot_share_a_key(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite"
    soong_store.upgrade(f"sqlite:///{path}")
    con = connect_raw(path)
    try:
        con.execute("PRAGMA foreign_keys = OFF")
        insert = (
            "INSERT INTO sessions (session_id, cwd, root_agent_id, status, created_at,"
            " updated_at, owner, \"key\") VALUES (?, '/', 'agent_x', 'active', 't', 't', ?, ?)"
        )
        con.execute(insert, ("sess_a", None, "k"))
        con.execute(insert, ("sess_b", None, None))
        con.execute(insert, ("sess_c", None, None))  # no key: no clash
        con.execute(insert, ("sess_d", "alice", "k"))  # another owner's: no clash
        with pytest.raises(Exception, match="UNIQUE"):
            con.execute(insert, ("sess_e", None, "k"))
        with pytest.raises(Exception, match="UNIQUE"):
            con.execute(insert, ("sess_f", "alice", "k"))
    finally:
        con.close()


@pytest.fixture
def captured(tmp_path: Path) -> Iterator[tuple[Connection, list[tuple[str, Any]]]]:
    """A connection to a fresh database at head, and the statements it runs."""
    path = tmp_path / "plans.sqlite"
    soong_store.upgrade(f"sqlite:///{path}")
    engine = make_engine(f"sqlite:///{path}", "admin")
    seen: list[tuple[str, Any]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _keep(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        seen.append((sql, params))

    try:
        with engine.connect() as connection:
            yield connection, seen
    finally:
        engine.dispose()


def plan_of(connection: Connection, statement: tuple[str, Any]) -> str:
    sql, params = statement
    raw = connection.connection.driver_connection
    assert raw is not None
    rows = raw.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
    return " | ".join(str(row[-1]) for row in rows)


AFTER = ("2026-01-01T00:00:00.000000+00:00", "sess_x")
WHEN = datetime(2026, 1, 1, tzinfo=UTC).isoformat(timespec="microseconds")


@pytest.mark.parametrize(
    ("read", "index"),
    [
        (lambda c: record_reads.find_session(c, "alice", "k"), "uq_sessions_owner_key"),
        (lambda c: record_reads.find_session(c, None, "k"), "uq_sessions_key_without_owner"),
        (
            lambda c: record_reads.list_sessions(
                c, None, 10, AFTER, record_reads.SessionFilter(owner="alice")
            ),
            "ix_sessions_owner_updated_at",
        ),
        (
            lambda c: record_reads.list_sessions(
                c, None, 10, AFTER, record_reads.SessionFilter(cwd="/p")
            ),
            "ix_sessions_cwd_updated_at",
        ),
        (
            lambda c: record_reads.list_sessions(
                c, None, 10, None, record_reads.SessionFilter(updated_after=WHEN)
            ),
            "ix_sessions_updated_at",
        ),
        (
            lambda c: record_reads.list_sessions(
                c, None, 10, None, record_reads.SessionFilter(updated_before=WHEN)
            ),
            "ix_sessions_updated_at",
        ),
        (
            lambda c: record_reads.list_sessions(
                c, None, 10, None, record_reads.SessionFilter(owner="a", updated_after=WHEN)
            ),
            "ix_sessions_owner_updated_at",
        ),
    ],
)
def test_finding_and_listing_use_the_indexes(
    captured: tuple[Connection, list[tuple[str, Any]]], read: Any, index: str
) -> None:
    connection, seen = captured
    read(connection)
    plan = plan_of(connection, seen[-1])
    assert f"USING INDEX {index}" in plan or f"USING COVERING INDEX {index}" in plan, plan
    assert "SCAN sessions" not in plan and "TEMP B-TREE FOR ORDER BY" not in plan, plan
