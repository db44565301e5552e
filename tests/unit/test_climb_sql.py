"""The climb's statement for a session is exactly what compiling it for that session's table gives.

It is compiled once for a template table and renamed per session; any difference in the text,
the parameter order or the columns would make a session read another table or misread its rows.
"""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from soong_store.schema.catalog import session_tables
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
