"""The climb's statement reads the session's own table, under any name the catalog makes.

The statement is SQL text around the table's name as the catalog renders it, so what could go
wrong is the name (quotes for mixed case, a schema for a shard) or a column: each case here
climbs a real chain, and the rendered name is the one the dialect gives the catalog's table.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateTable

from soong_store.errors import InvalidIdentifier
from soong_store.model.enums import NodeType
from soong_store.model.row_records import NODE_COLUMNS
from soong_store.read.climb import climb_statement
from soong_store.schema.session_tables import rendered_nodes_name, session_tables

SESSION_IDS = ["sess_20261201_000000_abcd", "Mixed_Case_Session_1", "a"]
CHAIN = ["n0", "n1", "n2", "n3", "n4"]
"""Five nodes, each the child of the one before; ``n2`` is a compaction."""


@pytest.fixture
def database() -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(":memory:")
    connection.execute("ATTACH DATABASE ':memory:' AS \"Shard_Upper\"")
    yield connection
    connection.close()


def _fill(connection: sqlite3.Connection, session_id: str, schema: str | None) -> None:
    nodes = session_tables(session_id, schema).nodes
    connection.execute(str(CreateTable(nodes).compile(dialect=sqlite.dialect())))
    table = sqlite.dialect().identifier_preparer.format_table(nodes)
    for seq, node_id in enumerate(CHAIN):
        kind = NodeType.COMPACTION.value if node_id == "n2" else "message"
        row = {name: None for name in NODE_COLUMNS}
        row.update(
            node_id=node_id,
            node_seq=seq,
            parent_id=CHAIN[seq - 1] if seq else None,
            agent_id="main",
            role="user",
            node_type=kind,
            content_json="[]",
            created_at="2026-12-02T00:00:00Z",
        )
        marks = ", ".join("?" for _ in row)
        connection.execute(
            f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", list(row.values())
        )


def _climb(
    connection: sqlite3.Connection, session_id: str, schema: str | None, cut: bool, steps: int
) -> list[str]:
    dialect = sqlite.dialect()
    prepared = climb_statement(rendered_nodes_name(dialect, session_id, schema), cut, dialect)
    rows = connection.execute(prepared.sql, prepared.args({"node_id": "n4", "steps": steps}))
    found = [dict(zip(prepared.columns, row, strict=True)) for row in rows]
    return [row["node_id"] for row in found]


@pytest.mark.parametrize("schema", [None, "Shard_Upper"])
@pytest.mark.parametrize("session_id", SESSION_IDS)
def test_the_climb_walks_the_session_s_own_table(
    database: sqlite3.Connection, session_id: str, schema: str | None
):
    _fill(database, session_id, schema)
    _fill(database, session_id + "_other", schema)  # a neighbour's table is never read
    assert _climb(database, session_id, schema, False, 2**63 - 1) == ["n4", "n3", "n2", "n1", "n0"]
    assert _climb(database, session_id, schema, True, 2**63 - 1) == ["n4", "n3", "n2"]
    assert _climb(database, session_id, schema, False, 2) == ["n4", "n3"]


def test_the_statement_names_its_own_table_and_returns_the_record_columns():
    dialect = sqlite.dialect()
    first = climb_statement(rendered_nodes_name(dialect, "sess_a"), False, dialect)
    second = climb_statement(rendered_nodes_name(dialect, "sess_b"), False, dialect)
    assert "nodes_sess_a" in first.sql and "nodes_sess_b" not in first.sql
    assert "nodes_sess_b" in second.sql and "nodes_sess_a" not in second.sql
    assert first.columns == NODE_COLUMNS


def test_postgresql_gets_its_parameter_style_and_quoted_names():
    dialect = postgresql.dialect(paramstyle="pyformat")
    name = rendered_nodes_name(dialect, "Mixed_Case", "shard_0001")
    prepared = climb_statement(name, True, dialect)
    assert 'shard_0001."nodes_Mixed_Case"' in prepared.sql
    assert "%(node_id)s" in prepared.sql and "%(steps)s" in prepared.sql
    assert prepared.order is None and prepared.fixed == {"compaction": NodeType.COMPACTION.value}


@pytest.mark.parametrize("dialect", [sqlite.dialect(), postgresql.dialect()])
@pytest.mark.parametrize("schema", [None, "shard_0001", "Shard_Upper"])
@pytest.mark.parametrize("session_id", SESSION_IDS)
def test_the_rendered_name_is_the_one_the_dialect_gives_the_catalog_s_table(
    dialect, schema: str | None, session_id: str
):
    nodes = session_tables(session_id, schema).nodes
    rendered = dialect.identifier_preparer.format_table(nodes)
    assert rendered_nodes_name(dialect, session_id, schema) == rendered


def test_a_bad_session_id_never_becomes_a_name():
    with pytest.raises(InvalidIdentifier):
        rendered_nodes_name(sqlite.dialect(), 'x"; DROP TABLE sessions; --')
