"""No input reaches FTS5's query language: any string is a valid query (a property test)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soong_store.backends.sqlite import search as fts5
from soong_store.model.search_query import fts5_string, parse_query
from tests.conftest import connect_raw

PIECES = ['"', "'", "NEAR", "near", "(", ")", "*", "-", "+", "^", ":", "{", "}", ",", "AND",
          "OR", "NOT", " ", "a", "b", "\x00", "\ud800", "\udfff", "\n", "body", "é"]  # fmt: skip
HOSTILE = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=())),
    st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
    st.integers(1, 12).map(lambda n: "a NEAR(" * n * 100),
)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sqlite3.Connection]:
    path: Path = tmp_path_factory.mktemp("fts") / "index.sqlite"
    connection = connect_raw(path, isolation_level=None)
    connection.execute("CREATE TABLE search_text (doc_id INTEGER PRIMARY KEY, body TEXT)")
    for statement in fts5.CREATE:
        connection.execute(statement)
    for body in ("a near b", "NOT or AND", "body (a) * b", "é e"):
        connection.execute("INSERT INTO search_text (body) VALUES (?)", (body,))
    yield connection
    connection.close()


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
def test_any_string_is_a_valid_fts5_query(index: sqlite3.Connection, typed: str) -> None:
    query = parse_query(typed)
    if query.empty:
        return
    expression = fts5.match_expression(query)
    expression.encode("utf-8")  # nothing a driver cannot pass
    rows = index.execute(
        "SELECT rowid FROM search_fts WHERE search_fts MATCH ? ORDER BY rank", (expression,)
    ).fetchall()
    assert all(isinstance(row[0], int) for row in rows)


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_any_phrase_is_one_fts5_string(index: sqlite3.Connection, typed: str) -> None:
    phrase = typed.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")
    index.execute(
        "SELECT rowid FROM search_fts WHERE search_fts MATCH ?", (fts5_string(phrase),)
    ).fetchall()
