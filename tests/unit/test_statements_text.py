"""A new session's writer statements come from the template and equal compiling them for it.

Both dialects compile offline (no server), so PostgreSQL's text is checked here too.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Dialect
from sqlalchemy.dialects import postgresql, sqlite

from soong_store import InvalidIdentifier
from soong_store.sql import statements
from soong_store.sql.pair_text import PLAIN_LENGTH, TEMPLATE
from soong_store.sql.prepared import Prepared

DIALECTS = {"sqlite": sqlite.dialect(), "postgresql": postgresql.psycopg.dialect()}

IDS = [
    "sess_20261201_101010_abcdef01",
    "a",
    "0123456789",
    "x" * PLAIN_LENGTH,
    "y" * (PLAIN_LENGTH + 1),
    "z" * 56,
    "Sess_Mixed_Case",
    TEMPLATE,
    f"{TEMPLATE}2",
    f"my_{TEMPLATE}_copy",
    "pair",
    "nodes",
    "events_x",
]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    statements.session_statements.cache_clear()


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
@pytest.mark.parametrize("session_id", IDS)
def test_the_statements_are_those_compiled_for_the_id(dialect: Dialect, session_id: str) -> None:
    made = statements.session_statements(session_id, dialect)
    assert made == statements.compiled(session_id, dialect)
    assert f"nodes_{session_id}" in made.insert_node.sql


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
def test_a_new_plain_session_compiles_nothing(
    dialect: Dialect, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements.session_statements("warm", dialect)
    calls: list[object] = []
    real = Prepared.compile.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Prepared], statement: object, dialect: Dialect) -> Prepared:
        calls.append(statement)
        return real(cls, statement, dialect)  # type: ignore[no-any-return]

    monkeypatch.setattr(Prepared, "compile", classmethod(counted))
    statements.session_statements("sess_20261201_101010_abcdef01", dialect)
    assert calls == []
    statements.session_statements("Sess_Mixed_Case", dialect)  # quoted: compiled for itself
    assert len(calls) == 14


def test_a_bad_id_is_refused() -> None:
    with pytest.raises(InvalidIdentifier, match="x-y"):
        statements.session_statements("x-y", DIALECTS["sqlite"])
