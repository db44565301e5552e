"""The moves' text statements build, copy and drop exactly what the table factory does.

They open SQLite files of their own (the shape is compared in ``sqlite_master``), so they live
with the SQLite tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.dialects import sqlite

from soong_store import InvalidIdentifier
from soong_store.catalog import pair_text
from soong_store.schema.session_tables import session_tables

pytestmark = pytest.mark.sqlite

IDS = [
    "sess_20261201_101010_abcdef01",
    "a",
    "x" * pair_text.PLAIN_LENGTH,
    "y" * (pair_text.PLAIN_LENGTH + 1),
    "z" * 56,  # long enough for the factory to shorten index names with a digest
    "Sess_Mixed_Case",
    "pairtemplate",
]


@pytest.mark.parametrize("session_id", IDS)
def test_the_ddl_is_the_factorys(session_id: str) -> None:
    dialect = sqlite.dialect()
    assert pair_text.ddl(dialect, session_id) == pair_text.compiled(dialect, session_id)


def test_a_bad_id_is_refused_before_any_statement() -> None:
    with pytest.raises(InvalidIdentifier, match="x-y"):
        pair_text.ddl(sqlite.dialect(), "x-y")


def _engine(path: Path) -> Engine:
    return create_engine(f"sqlite:///{path}")


def _schema(engine: Engine) -> set[tuple[str, str, str, str]]:
    with engine.connect() as connection:
        rows = connection.exec_driver_sql("SELECT type, name, tbl_name, sql FROM sqlite_master")
        return {(str(a), str(b), str(c), str(d)) for a, b, c, d in rows}


@pytest.mark.parametrize("session_id", IDS)
def test_created_pairs_store_the_factorys_shape(tmp_path: Path, session_id: str) -> None:
    by_factory, by_text = _engine(tmp_path / "a.sqlite"), _engine(tmp_path / "b.sqlite")
    with by_factory.begin() as connection:
        session_tables(session_id).create(connection)
    with by_text.begin() as connection:
        pair_text.create(connection, session_id)
    assert _schema(by_text) == _schema(by_factory)
    assert len(_schema(by_text)) == 7


def test_a_copy_carries_every_row_and_a_drop_leaves_nothing(tmp_path: Path) -> None:
    sid = "sess_20261201_101010_abcdef01"
    engine = _engine(tmp_path / "main.sqlite")
    tables = session_tables(sid)
    node = {
        "node_id": "n1",
        "node_seq": 1,
        "parent_id": None,
        "agent_id": "a1",
        "run_id": None,
        "role": "user",
        "node_type": "message",
        "content_json": "[]",
        "metadata_json": '{"k": 1}',
        "token_count": 3,
        "created_at": "2026-12-01T10:10:10Z",
    }
    event = {
        "event_id": "e1",
        "seq": 1,
        "run_seq": None,
        "agent_id": "a1",
        "run_id": None,
        "level": "info",
        "event_type": "node_created",
        "node_id": "n1",
        "tool_call_id": None,
        "payload_json": None,
        "created_at": "2026-12-01T10:10:10Z",
    }
    with engine.begin() as connection:
        connection.exec_driver_sql(f"ATTACH DATABASE '{tmp_path / 'other.sqlite'}' AS other")
        pair_text.create(connection, sid)
        connection.execute(tables.nodes.insert(), node)
        connection.execute(tables.events.insert(), event)
        other = session_tables(sid, "other")
        other.create(connection)
        pair_text.copy(connection, sid, "main", "other")
        assert [dict(r._mapping) for r in connection.execute(select(other.nodes))] == [node]
        assert [dict(r._mapping) for r in connection.execute(select(other.events))] == [event]
        pair_text.drop(connection, sid, "other")
        pair_text.drop(connection, sid, "other")  # nothing left to drop: no error
        assert not other.exist(connection)
        assert tables.exist(connection)
