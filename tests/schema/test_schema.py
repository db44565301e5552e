"""Schema conformance with DESIGN.md §3 and §4, read back with raw sqlite3 from real files.

SQLite-only, on purpose: the columns, indexes, foreign keys and constraints are read with
PRAGMAs and ``sqlite_master``, duplicates are inserted on a raw connection to see SQLite's own
UNIQUE and CHECK errors, and the journal mode and ``synchronous`` are SQLite settings.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Table, UniqueConstraint

from soong_store import (
    AgentStatus,
    AgentType,
    EndReason,
    InvalidArgument,
    InvalidIdentifier,
    RunStatus,
    SessionStatus,
    SessionStore,
)
from soong_store.backends.sqlite.backend import make_engine
from soong_store.schema import session_tables as factory
from soong_store.store import run_read, run_write
from tests.conftest import RAW_SQLITE, connect_raw, db_path, snapshot, text

pytestmark = pytest.mark.sqlite

GLOBAL_TABLES = {
    "sessions": "session_id PK, cwd, root_agent_id, active_node_id?, parent_session_id?, status, "
    "metadata_json?, created_at, updated_at, owner?, key?",
    "agents": "agent_id PK, session_id, parent_agent_id?, agent_type, created_by_run_id?, "
    "fork_from_node_id?, status, result_json?, metadata_json?, created_at, updated_at",
    "runs": "run_id PK, session_id, agent_id, status, start_node_id?, end_node_id?, end_reason?, "
    "turn_count?, usage_json?, error_json?, metadata_json?, created_at, updated_at",
    "artifacts": "artifact_id PK, session_id, agent_id?, run_id?, node_id?, tool_call_id?, path, "
    "filename?, mime_type?, size_bytes?, summary?, metadata_json?, created_at",
}
NODES = (
    "node_id PK, node_seq, parent_id?, agent_id, run_id?, role, node_type, content_json, "
    "metadata_json?, token_count?, created_at"
)
EVENTS = (
    "event_id PK, seq, run_seq?, agent_id?, run_id?, level, event_type, node_id?, tool_call_id?, "
    "payload_json?, created_at"
)
INTEGER_COLUMNS = {"turn_count", "size_bytes", "node_seq", "token_count", "seq", "run_seq"}


def expected_columns(spec: str) -> list[tuple[str, str, bool, bool]]:
    """(name, declared type, NOT NULL, primary key) for each column of a DESIGN.md spec."""
    columns = []
    for item in spec.split(", "):
        pk = item.endswith(" PK")
        name = item.removesuffix(" PK").removesuffix("?")
        kind = "INTEGER" if name in INTEGER_COLUMNS else "TEXT"
        columns.append((name, kind, not item.endswith("?"), pk))
    return columns


def actual_columns(con: sqlite3.Connection, table: str) -> list[tuple[str, str, bool, bool]]:
    rows = con.execute(f'PRAGMA table_info("{table}")').fetchall()
    return [(name, kind, bool(notnull), bool(pk)) for _, name, kind, notnull, _, pk in rows]


def indexes(con: sqlite3.Connection, table: str) -> dict[tuple[str, ...], bool]:
    """Indexed column tuples of a table, each with whether the index is UNIQUE."""
    found: dict[tuple[str, ...], bool] = {}
    for _, name, unique, _, _ in con.execute(f'PRAGMA index_list("{table}")'):
        info = con.execute(f'PRAGMA index_info("{name}")').fetchall()
        found[tuple(column for _, _, column in sorted(info))] = bool(unique)
    return found


def foreign_keys(con: sqlite3.Connection, table: str) -> set[tuple[str, str, str]]:
    rows = con.execute(f'PRAGMA foreign_key_list("{table}")').fetchall()
    return {(row[3], row[2], row[4]) for row in rows}


@pytest.fixture
def raw(home: Path, store: SessionStore) -> Iterator[sqlite3.Connection]:
    con = connect_raw(db_path(home), timeout=10, isolation_level=None)
    try:
        yield con
    finally:
        con.close()


@pytest.fixture
async def populated(store: SessionStore) -> dict[str, Any]:
    session = await store.create_session("/tmp/project")
    run = await store.start_run(session.session_id, session.root_agent_id)
    node = await store.append_node(
        session.session_id, "user", "message", text("hello"), run_id=run.run_id
    )
    return {
        "sid": session.session_id,
        "agent_id": session.root_agent_id,
        "run_id": run.run_id,
        "node_id": node.node_id,
    }


@pytest.mark.parametrize("table", sorted(GLOBAL_TABLES))
def test_global_table_columns_match_design(raw: sqlite3.Connection, table: str) -> None:
    assert actual_columns(raw, table) == expected_columns(GLOBAL_TABLES[table])


async def test_session_tables_columns_match_design(
    raw: sqlite3.Connection, populated: dict[str, Any]
) -> None:
    sid = populated["sid"]
    assert actual_columns(raw, f"nodes_{sid}") == expected_columns(NODES)
    assert actual_columns(raw, f"events_{sid}") == expected_columns(EVENTS)


async def test_session_tables_are_created_with_the_first_write_only(
    raw: sqlite3.Connection, store: SessionStore
) -> None:
    def tables() -> set[str]:
        return {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    before = tables()
    session = await store.create_session("/tmp/project")
    assert tables() == before
    assert raw.execute("SELECT count(*) FROM session_files").fetchone() == (0,)
    await store.append_node(session.session_id, "user", "message", text("hi"))
    assert tables() - before == {f"nodes_{session.session_id}", f"events_{session.session_id}"}
    assert raw.execute("SELECT session_id, file, epoch FROM session_files").fetchall() == [
        (session.session_id, "main", 0)
    ]


async def test_session_tables_are_lean(raw: sqlite3.Connection, populated: dict[str, Any]) -> None:
    sid = populated["sid"]
    objects = raw.execute(
        "SELECT type, sql FROM sqlite_master WHERE tbl_name IN (?, ?)",
        (f"nodes_{sid}", f"events_{sid}"),
    ).fetchall()
    assert len(objects) == 7  # two tables, three unique and two lookup indexes
    tables = [sql for kind, sql in objects if kind == "table"]
    assert len(tables) == 2
    for sql in tables:
        assert sql.rstrip().endswith("WITHOUT ROWID")
        assert "CHECK" not in sql and "REFERENCES" not in sql


async def test_nodes_table_has_unique_node_seq_and_parent_index(
    raw: sqlite3.Connection, populated: dict[str, Any]
) -> None:
    found = indexes(raw, f"nodes_{populated['sid']}")
    assert found[("node_seq",)] is True
    assert found[("parent_id",)] is False


async def test_events_table_has_unique_seq_and_run_seq_and_node_index(
    raw: sqlite3.Connection, populated: dict[str, Any]
) -> None:
    found = indexes(raw, f"events_{populated['sid']}")
    assert found[("seq",)] is True
    assert found[("run_id", "run_seq")] is True
    assert found[("node_id",)] is False


async def test_unique_constraints_reject_duplicate_seqs(
    raw: sqlite3.Connection, populated: dict[str, Any]
) -> None:
    sid = populated["sid"]
    node_seq = raw.execute(f'SELECT node_seq FROM "nodes_{sid}"').fetchone()[0]
    with pytest.raises(RAW_SQLITE.IntegrityError, match="UNIQUE"):
        raw.execute(
            f'INSERT INTO "nodes_{sid}" (node_id, node_seq, agent_id, role, node_type, '
            "content_json, created_at) VALUES ('node_dup', ?, 'agent_x', 'user', 'message', "
            "'[]', '2026-01-01T00:00:00.000000+00:00')",
            (node_seq,),
        )
    seq, run_seq = raw.execute(
        f'SELECT seq, run_seq FROM "events_{sid}" WHERE run_id = ? ORDER BY seq LIMIT 1',
        (populated["run_id"],),
    ).fetchone()
    insert_event = (
        f'INSERT INTO "events_{sid}" (event_id, seq, run_seq, run_id, level, event_type, '
        "created_at) VALUES (?, ?, ?, ?, 'info', 'x', '2026-01-01T00:00:00.000000+00:00')"
    )
    with pytest.raises(RAW_SQLITE.IntegrityError, match="UNIQUE"):
        raw.execute(insert_event, ("evt_dup1", seq, 10_000, "run_other"))
    with pytest.raises(RAW_SQLITE.IntegrityError, match="UNIQUE"):
        raw.execute(insert_event, ("evt_dup2", 10_000, run_seq, populated["run_id"]))


def test_global_tables_have_listing_indexes(raw: sqlite3.Connection) -> None:
    def leading(table: str) -> set[str]:
        return {columns[0] for columns in indexes(raw, table)}

    assert "updated_at" in leading("sessions")
    assert "session_id" in leading("agents")
    assert "session_id" in leading("runs")
    assert "session_id" in leading("artifacts")


async def test_foreign_keys_exist_as_designed(
    raw: sqlite3.Connection, populated: dict[str, Any]
) -> None:
    expected = {
        "sessions": {("root_agent_id", "agents", "agent_id")},
        "agents": {
            ("session_id", "sessions", "session_id"),
            ("parent_agent_id", "agents", "agent_id"),
            ("created_by_run_id", "runs", "run_id"),
        },
        "runs": {("session_id", "sessions", "session_id"), ("agent_id", "agents", "agent_id")},
        "artifacts": {("session_id", "sessions", "session_id")},
        "session_files": {("session_id", "sessions", "session_id")},
    }
    for table, keys in expected.items():
        assert keys <= foreign_keys(raw, table), table
    assert raw.execute("PRAGMA foreign_key_check").fetchall() == []


CHECKED = [
    ("sessions", "status", SessionStatus, "deleted"),
    ("agents", "agent_type", AgentType, "worker"),
    ("agents", "status", AgentStatus, "paused"),
    ("runs", "status", RunStatus, "done"),
    ("runs", "end_reason", EndReason, "stop_hook_prevented"),
]
KEYS = {
    "sessions": ("session_id", "sid"),
    "agents": ("agent_id", "agent_id"),
    "runs": ("run_id", "run_id"),
    "nodes": ("node_id", "node_id"),
    "events": ("run_id", "run_id"),
}


def update_sql(table: str, column: str, ids: dict[str, Any]) -> tuple[str, str]:
    key, which = KEYS[table]
    name = f"{table}_{ids['sid']}" if table in ("nodes", "events") else table
    return f'UPDATE "{name}" SET {column} = ? WHERE {key} = ?', ids[which]


@pytest.mark.parametrize(("table", "column", "enum", "bad"), CHECKED)
async def test_check_constraint_rejects_unknown_enum_value(
    raw: sqlite3.Connection,
    populated: dict[str, Any],
    table: str,
    column: str,
    enum: type[StrEnum],
    bad: str,
) -> None:
    sql, key = update_sql(table, column, populated)
    with pytest.raises(RAW_SQLITE.IntegrityError, match="CHECK"):
        raw.execute(sql, (bad, key))
    with pytest.raises(RAW_SQLITE.IntegrityError, match="CHECK"):
        raw.execute(sql, (str(next(iter(enum))).upper(), key))


@pytest.mark.parametrize(("table", "column", "enum", "bad"), CHECKED)
async def test_check_constraint_accepts_every_enum_value(
    raw: sqlite3.Connection,
    populated: dict[str, Any],
    table: str,
    column: str,
    enum: type[StrEnum],
    bad: str,
) -> None:
    sql, key = update_sql(table, column, populated)
    raw.execute("BEGIN")
    try:
        for member in enum:
            assert raw.execute(sql, (member.value, key)).rowcount >= 1
    finally:
        raw.execute("ROLLBACK")


async def test_database_is_in_wal_mode_after_open(raw: sqlite3.Connection) -> None:
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_database_is_in_wal_mode_after_first_write(
    raw: sqlite3.Connection, populated: dict[str, Any]
) -> None:
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize(("durability", "synchronous"), [("normal", 1), ("full", 2)])
async def test_durability_sets_synchronous_on_the_write_connection(
    home: Path, durability: Any, synchronous: int
) -> None:
    async with SessionStore(home=home, durability=durability) as opened:
        pragmas = await run_write(
            opened,
            lambda c: (
                c.exec_driver_sql("PRAGMA synchronous").scalar(),
                c.exec_driver_sql("PRAGMA foreign_keys").scalar(),
                c.exec_driver_sql("PRAGMA temp_store").scalar(),
            ),
        )
        read_temp_store = await run_read(
            opened, lambda c: c.exec_driver_sql("PRAGMA temp_store").scalar()
        )
    # The writer's savepoints keep their journals in memory (2); reads keep SQLite's default.
    assert pragmas == (synchronous, 1, 2)
    assert read_temp_store == 0


@pytest.mark.parametrize("durability", ["off", "fsync", "", None])
def test_invalid_durability_is_refused(home: Path, durability: Any) -> None:
    with pytest.raises(InvalidArgument, match="durability"):
        SessionStore(home=home, durability=durability)
    with pytest.raises(InvalidArgument, match="durability"):
        make_engine(f"sqlite:///{home / 'x.sqlite'}", "write", durability=durability)
    assert not home.exists()


BAD_SESSION_IDS = [
    "x; DROP TABLE sessions",
    "a-b",
    "",
    "a" * 57,
    'nodes_x"--',
    "sess 1",
    "sess_é",
    "sess_1\n",
    None,
    42,
    b"sess_1",
]


@pytest.mark.parametrize("bad", BAD_SESSION_IDS)
def test_factory_refuses_unsafe_session_id(bad: Any) -> None:
    with pytest.raises(InvalidIdentifier):
        factory.session_tables(bad)
    with pytest.raises(InvalidIdentifier):
        factory.nodes_table_name(bad)
    with pytest.raises(InvalidIdentifier):
        factory.events_table_name(bad)


@pytest.mark.parametrize("bad", ["x; DROP TABLE sessions", 'nodes_x"--', "a" * 57])
async def test_store_refuses_unsafe_session_id_before_any_sql(
    home: Path, store: SessionStore, bad: str
) -> None:
    await store.create_session("/tmp/project")
    before = snapshot(home)
    with pytest.raises(InvalidIdentifier):
        await store.get_session(bad)
    with pytest.raises(InvalidIdentifier):
        await store.append_node(bad, "user", "message", text("hi"))
    assert snapshot(home) == before


def test_factory_builds_tables_named_after_the_session() -> None:
    tables = factory.session_tables("sess_20260101_000000_abcd")
    assert tables.nodes.name == "nodes_sess_20260101_000000_abcd"
    assert tables.events.name == "events_sess_20260101_000000_abcd"
    assert factory.session_tables("sess_20260101_000000_abcd", schema="shard1").nodes.schema == (
        "shard1"
    )


def schema_wide_names(tables: factory.SessionTables) -> list[str]:
    """Names that PostgreSQL keeps in one namespace per schema: tables, indexes, UNIQUEs."""
    names = []
    for table in (tables.nodes, tables.events):
        names.append(table.name)
        names += [str(index.name) for index in table.indexes]
        names += [str(c.name) for c in table.constraints if isinstance(c, UniqueConstraint)]
    return names


def constraint_names(table: Table) -> list[str]:
    return [c.name for c in table.constraints if isinstance(c.name, str)]


def test_long_session_ids_keep_names_within_63_characters(tmp_path: Path) -> None:
    first = factory.session_tables("a" * 50 + "000001")
    second = factory.session_tables("a" * 50 + "000002")
    shared = schema_wide_names(first) + schema_wide_names(second)
    assert len(set(shared)) == len(shared)
    for table in (first.nodes, first.events, second.nodes, second.events):
        local = constraint_names(table)
        assert len(set(local)) == len(local)
        assert max(len(name) for name in [*shared, *local]) <= 63
    engine = make_engine(f"sqlite:///{tmp_path / 'long.sqlite'}", "admin")
    try:
        with engine.connect() as connection, connection.begin():
            first.create(connection)
            second.create(connection)
    finally:
        engine.dispose()
    con = connect_raw(tmp_path / "long.sqlite")
    try:
        created = [row[0] for row in con.execute("SELECT name FROM sqlite_master")]
    finally:
        con.close()
    assert len(created) == len(set(created))
    assert all(len(name) <= 63 for name in created if not name.startswith("sqlite_"))


def test_table_cache_is_bounded() -> None:
    info = factory._build.cache_info()
    assert info.maxsize is not None
    assert 0 < info.maxsize <= 10_000
    assert factory.session_tables("sess_cached") is factory.session_tables("sess_cached")
