"""The climb's statement for a session is exactly what compiling it for that session's table gives.

It is compiled once per shape, for the first session read there, and renamed for every other
session; any difference in the text, the parameter order or the columns would make a session
read another table or misread its rows.
"""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from soong_store.schema import catalog
from soong_store.schema.catalog import session_tables
from soong_store.sql import climb_sql
from soong_store.sql.climb_sql import climb_statement, compile_climb

DIALECTS = [sqlite.dialect(), postgresql.dialect(paramstyle="pyformat")]
SESSION_IDS = [
    "sess_20261201_000000_abcd",
    "Mixed_Case_Session_1",
    "a",
    "climb_template2",
    "climb_template",
]


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
@pytest.mark.parametrize("schema", [None, "shard_0001", "Shard_Upper", "nodes_climb_template"])
@pytest.mark.parametrize("to_compaction", [False, True])
@pytest.mark.parametrize("session_id", SESSION_IDS)
def test_renamed_climb_equals_the_climb_compiled_for_the_table(
    dialect: Dialect, schema: str | None, to_compaction: bool, session_id: str
):
    nodes = session_tables(session_id, schema).nodes
    assert climb_statement(nodes, to_compaction, dialect) == compile_climb(
        nodes, to_compaction, dialect
    )


def test_two_sessions_get_statements_naming_their_own_tables():
    dialect = sqlite.dialect()
    first = climb_statement(session_tables("sess_a").nodes, False, dialect)
    second = climb_statement(session_tables("sess_b").nodes, False, dialect)
    assert "nodes_sess_a" in first.sql and "nodes_sess_b" not in first.sql
    assert "nodes_sess_b" in second.sql and "nodes_sess_a" not in second.sql
    assert "climb_template" not in first.sql + second.sql


FIRST_AND_NEXT = [
    ("a", "ab"),
    ("ab", "a"),
    ("a", "nodes_a"),
    ("nodes_a", "a"),
    ("Mixed_Case", "mixed_case"),
    ("mixed_case", "Mixed_Case"),
    ("x", "x_x"),
    ("sess_20261201_000000_abcd", "sess_20261201_000000_abcd0"),
]


@pytest.fixture
def no_compiled_climb() -> None:
    """Forget every climb compiled so far: the next session read compiles its own."""
    climb_statement.cache_clear()
    climb_sql._compiled.clear()


@pytest.mark.usefixtures("no_compiled_climb")
@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
@pytest.mark.parametrize("schema", [None, "nodes_a", "Shard_Upper"])
@pytest.mark.parametrize(("first", "then"), FIRST_AND_NEXT)
def test_the_climb_compiled_for_the_first_session_renames_right_for_the_next(
    dialect: Dialect, schema: str | None, first: str, then: str
):
    compiled_first = climb_statement(session_tables(first, schema).nodes, True, dialect)
    assert compiled_first == compile_climb(session_tables(first, schema).nodes, True, dialect)
    nodes = session_tables(then, schema).nodes
    assert climb_statement(nodes, True, dialect) == compile_climb(nodes, True, dialect)


@pytest.mark.usefixtures("no_compiled_climb")
def test_a_first_read_builds_no_table_beside_the_session_s_own(monkeypatch: pytest.MonkeyPatch):
    built: list[str] = []
    build = catalog._build

    def counted(session_id: str, schema: str | None) -> catalog.SessionTables:
        built.append(session_id)
        return build(session_id, schema)

    monkeypatch.setattr(catalog, "_build", counted)
    nodes = catalog.session_tables("sess_only_own").nodes
    climb_statement(nodes, False, sqlite.dialect())
    assert built == ["sess_only_own"]
