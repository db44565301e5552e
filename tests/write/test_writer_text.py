"""On SQLite the writer's first statements are SQL text: each reads and writes what Core's does.

The text is what a new process's first write runs instead of compiling Core (see
``soong_store/write/statements.py``); these run both on a store's own file and compare.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, select
from sqlalchemy.dialects import sqlite

from soong_store import SessionStore
from soong_store.backends.prepared import Prepared, Runner
from soong_store.catalog import lookup as catalog
from soong_store.schema.session_tables import session_tables
from soong_store.schema.tables import sessions_table
from soong_store.write import statements
from soong_store.write.session_writer import _pair_lookup
from soong_store.write.statements import ACTIVE_HAS_CHILD, MAX_NODE_SEQ, MAX_SEQ
from tests.conftest import db_path, text


async def _three_sessions(home: Path) -> tuple[str, str, str]:
    """Never written; a chain of two; a root whose child is not active (the active has one)."""
    async with SessionStore(home=home) as store:
        empty = (await store.create_session(cwd="/empty")).session_id
        chain = (await store.create_session(cwd="/chain")).session_id
        await store.append_node(chain, "user", "message", text("one"))
        await store.append_node(chain, "assistant", "message", text("two"))
        branched = (await store.create_session(cwd="/branched")).session_id
        root = await store.append_node(branched, "user", "message", text("root"))
        await store.append_node(branched, "assistant", "message", text("child"))
        await store.switch_node(branched, root.node_id)
    return empty, chain, branched


def _engine(home: Path) -> Engine:
    return create_engine(f"sqlite:///{db_path(home)}")


async def test_the_session_statement_reads_what_core_reads(home: Path) -> None:
    _, chain, branched = await _three_sessions(home)
    engine = _engine(home)
    try:
        with engine.connect() as connection:
            db = Runner(connection)
            got = {}
            for sid in (chain, branched):
                tables = session_tables(sid)
                written = statements._session(tables, connection.dialect)
                core = Prepared.compile(statements.session_select(tables), connection.dialect)
                assert written.sql != core.sql and written.columns == core.columns
                got[sid] = db.first(written, {"p_session": sid})
                assert got[sid] == db.first(core, {"p_session": sid})
                assert db.first(written, {"p_session": "sess_missing"}) is None
    finally:
        engine.dispose()
    assert got[chain][MAX_NODE_SEQ] == 2 and got[chain][MAX_SEQ] >= 3
    assert got[chain][ACTIVE_HAS_CHILD] == 0 and got[branched][ACTIVE_HAS_CHILD] == 1
    assert got[branched]["cwd"] == "/branched"


def _lookups(connection: Connection, sids: list[str]) -> list[tuple[object, object]]:
    written = _pair_lookup(connection.dialect)
    core = Prepared.compile(catalog.PAIR_LOOKUP, connection.dialect)
    assert written.sql != core.sql and written.columns == core.columns == ("session_id", "file")
    db = Runner(connection)
    out = []
    for sid in sids:
        row = db.first(written, {"p_session": sid})
        assert row == db.first(core, {"p_session": sid})
        out.append(None if row is None else (row["session_id"], row["file"]))
    return out


async def test_the_pair_lookup_reads_what_core_reads(home: Path) -> None:
    empty, chain, _ = await _three_sessions(home)
    engine = _engine(home)
    try:
        with engine.connect() as connection:
            assert _lookups(connection, [empty, chain, "sess_missing"]) == [
                (empty, None),
                (chain, catalog.MAIN),
                None,
            ]
            with connection.begin():  # a pair placed in a shard file, rolled back after
                connection.exec_driver_sql(
                    "INSERT INTO session_files (session_id, file, epoch) VALUES (?, ?, 1)",
                    (empty, "shards/0001.sqlite"),
                )
                assert _lookups(connection, [empty]) == [(empty, "shards/0001.sqlite")]
                connection.rollback()
    finally:
        engine.dispose()


async def test_moving_the_session_writes_what_core_writes(home: Path) -> None:
    _, chain, branched = await _three_sessions(home)
    engine = _engine(home)
    dialect = engine.dialect
    written = statements._move_session(dialect)
    core = Prepared.compile(statements.move_session_update(), sqlite.dialect(paramstyle="named"))
    assert written == core  # the text keeps its names, which SQLite's driver reads
    params = {"p_session": chain, "p_active": None, "p_now": "2026-12-03T00:00:00.000000Z"}
    try:
        with engine.begin() as connection:
            Runner(connection).execute(written, params)
        with engine.connect() as connection:
            rows = connection.execute(
                select(sessions_table.c.session_id, sessions_table.c.active_node_id)
                .where(sessions_table.c.session_id.in_([chain, branched]))
                .order_by(sessions_table.c.cwd)
            ).all()
    finally:
        engine.dispose()
    assert rows[1] == (chain, None) and rows[0][1] is not None  # the other session untouched
