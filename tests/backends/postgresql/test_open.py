"""Opening a store on PostgreSQL: what a new process pays before its first read.

A database at head is opened on one connection (the read pool's first, which reads the schema's
revision and then serves the first read); the writer connects at its first write and no admin
connection is made. Each engine's first connection asks the server one question where
SQLAlchemy's dialect asks four.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, event

from soong_store import SessionStore, upgrade
from soong_store.backends.base import Role
from soong_store.backends.postgresql.backend import PostgreSQLBackend
from tests.conftest import text

pytestmark = pytest.mark.postgresql


def count_connections(monkeypatch: pytest.MonkeyPatch) -> list[Role]:
    """The role of every new server connection a store's engines make from now on."""
    made: list[Role] = []
    original = PostgreSQLBackend.engine

    def engine(self: PostgreSQLBackend, role: Role) -> Engine:
        built = original(self, role)
        event.listen(built, "connect", lambda *_: made.append(role))
        return built

    monkeypatch.setattr(PostgreSQLBackend, "engine", engine)
    return made


async def test_a_database_at_head_opens_and_reads_on_one_connection(
    pg_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home, url=pg_database_url) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("hello"))
    made = count_connections(monkeypatch)
    async with SessionStore(home=home, url=pg_database_url) as store:
        assert [node.node_seq for node in await store.active_path(sid)] == [1]
        assert made == ["read"]
        await store.append_node(sid, "assistant", "message", text("hi"))
        assert made == ["read", "write"]
        assert [node.node_seq for node in await store.active_path(sid)] == [1, 2]
    assert made == ["read", "write"]


async def test_an_empty_database_is_upgraded_on_an_admin_connection(
    pg_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = count_connections(monkeypatch)
    async with SessionStore(home=tmp_path / "home", url=pg_database_url) as store:
        assert made[0] == "read"
        assert set(made) == {"read", "admin"}
        sid = (await store.create_session(cwd=".")).session_id
        assert (await store.get_session(sid)).session_id == sid


@pytest.mark.parametrize("role", ["read", "write", "admin"])
def test_an_engine_learns_what_sqlalchemy_would_in_one_query(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch, role: Role
) -> None:
    upgrade(pg_database_url)
    reference = create_engine(PostgreSQLBackend(pg_database_url).url)
    ours = PostgreSQLBackend(pg_database_url).engine(role)
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def recording(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    try:
        with reference.connect():
            pass
        monkeypatch.setattr(psycopg.Cursor, "execute", recording)
        with ours.connect():
            pass
        monkeypatch.undo()
        assert len(sent) == 1, sent
        assert "current_schema()" in sent[0]
        for name in (
            "server_version_info",
            "default_schema_name",
            "default_isolation_level",
            "_backslash_escapes",
        ):
            assert getattr(ours.dialect, name) == getattr(reference.dialect, name), name
    finally:
        ours.dispose()
        reference.dispose()
