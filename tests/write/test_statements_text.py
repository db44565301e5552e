"""A new session's writer statements come from the template and equal compiling them for it.

Each is compiled at its first use, once per dialect. Both dialects compile offline (no server),
so PostgreSQL's text is checked here too.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Dialect
from sqlalchemy.dialects import postgresql, sqlite

from soong_store import InvalidIdentifier
from soong_store.backends.prepared import Prepared
from soong_store.catalog.pair_text import PLAIN_LENGTH, TEMPLATE
from soong_store.write import statements

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
    statements._template.cache_clear()
    statements._global.cache_clear()


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The statements made from now on: compiled from Core, or written as text."""
    calls: list[object] = []
    depth = [0]

    def counting(name: str) -> None:
        real = getattr(Prepared, name).__func__

        def counted(cls: type[Prepared], statement: object, *args: object) -> Prepared:
            if not depth[0]:  # a text compiled for its dialect is one statement, not two
                calls.append(statement)
            depth[0] += 1
            try:
                return real(cls, statement, *args)  # type: ignore[no-any-return]
            finally:
                depth[0] -= 1

        monkeypatch.setattr(Prepared, name, classmethod(counted))

    counting("compile")
    counting("written")
    return calls


def _every(made: statements.SessionStatements) -> dict[str, Prepared]:
    return {name: getattr(made, name) for name in statements.NAMES}


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
@pytest.mark.parametrize("session_id", IDS)
def test_the_statements_are_those_compiled_for_the_id(dialect: Dialect, session_id: str) -> None:
    made = _every(statements.session_statements(session_id, dialect))
    assert made == _every(statements.compiled(session_id, dialect))
    assert f"nodes_{session_id}" in made["insert_node"].sql
    assert len({p.sql for p in made.values()}) == len(statements.NAMES) == 16


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
def test_a_new_plain_session_compiles_nothing(dialect: Dialect, compiles: list[object]) -> None:
    _every(statements.session_statements("warm", dialect))
    compiles.clear()
    _every(statements.session_statements("sess_20261201_101010_abcdef01", dialect))
    assert compiles == []
    # Quoted, so compiled for itself: its own tables' statements, not the global ones.
    _every(statements.session_statements("Sess_Mixed_Case", dialect))
    assert len(compiles) == 10


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=DIALECTS.keys())
def test_a_statement_is_compiled_at_its_first_use_only(
    dialect: Dialect, compiles: list[object]
) -> None:
    made = statements.session_statements("sess_20261201_101010_abcdef01", dialect)
    assert compiles == []
    first = made.insert_node
    assert len(compiles) == 1
    assert made.insert_node is first
    assert statements.session_statements("other", dialect).insert_node.sql == first.sql.replace(
        "sess_20261201_101010_abcdef01", "other"
    )
    assert len(compiles) == 1
    agent = made.agent
    assert statements.session_statements("Sess_Mixed_Case", dialect).agent is agent
    assert len(compiles) == 2


def test_a_bad_id_is_refused() -> None:
    with pytest.raises(InvalidIdentifier, match="x-y"):
        statements.session_statements("x-y", DIALECTS["sqlite"])
