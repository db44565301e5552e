"""Revision 0002: the catalog tables, their backfill from stored pairs, the foreign-key indexes.

SQLite files are opened raw to read ``sqlite_master`` and the query plans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic import command

import soong_store
from soong_store import SessionStore
from soong_store.backends.sqlite.backend import make_engine
from soong_store.migrate.upgrade import alembic_config
from tests.conftest import connect_raw, db_path, text

pytestmark = pytest.mark.sqlite


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


def plan(path: Path, sql: str) -> str:
    return " ".join(str(row[-1]) for row in query(path, f"EXPLAIN QUERY PLAN {sql}", "x"))


def test_foreign_key_lookups_of_a_new_session_use_an_index(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite"
    soong_store.upgrade(f"sqlite:///{path}")
    assert "ix_sessions_root_agent_id" in plan(
        path, "SELECT 1 FROM sessions WHERE root_agent_id = ?"
    )
    assert "ix_agents_parent_agent_id" in plan(
        path, "SELECT 1 FROM agents WHERE parent_agent_id = ?"
    )


def test_catalog_tables_have_no_rowid(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite"
    soong_store.upgrade(f"sqlite:///{path}")
    for table in ("session_files", "session_moves", "shard_files"):
        (sql,) = query(path, "SELECT sql FROM sqlite_master WHERE name = ?", table)[0]
        assert sql.rstrip().endswith("WITHOUT ROWID"), sql


async def test_upgrade_records_every_stored_pair_in_the_main_database(home: Path) -> None:
    async with SessionStore(home=home) as store:
        written = await store.create_session("/tmp/a")
        await store.append_node(written.session_id, "user", "message", text("hi"))
        other = await store.create_session("/tmp/b")
        await store.append_node(other.session_id, "user", "message", text("hi"))
    path = db_path(home)
    alembic(path, "downgrade", "0001")
    assert "session_files" not in {n for (n,) in query(path, "SELECT name FROM sqlite_master")}
    con = connect_raw(path)
    with con:  # a session whose pair was never stored (damage an old home may hold)
        con.execute("PRAGMA foreign_keys = OFF")
        con.execute(
            "INSERT INTO sessions (session_id, cwd, root_agent_id, status, created_at, "
            "updated_at) VALUES ('sess_20260101_000000_dead', '/', 'agent_x', 'active', 't', 't')"
        )
    con.close()

    alembic(path, "upgrade", "0002")

    rows = query(path, "SELECT session_id, file, epoch FROM session_files ORDER BY session_id")
    assert rows == sorted([(written.session_id, "main", 0), (other.session_id, "main", 0)])


def test_downgrade_removes_the_catalog_and_the_indexes(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite"
    alembic(path, "upgrade", "0002")
    before = {n for (n,) in query(path, "SELECT name FROM sqlite_master")}
    alembic(path, "downgrade", "0001")
    after = {n for (n,) in query(path, "SELECT name FROM sqlite_master")}
    assert before - after == {
        "session_files",
        "session_moves",
        "shard_files",
        "ix_session_files_file",
        "ix_sessions_root_agent_id",
        "ix_agents_parent_agent_id",
    }
