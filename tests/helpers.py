"""Reads and writes behind the store's back that hold on every backend.

They go through SQLAlchemy (``inspect``, ``select``, ``text``) on the backend's side engine, never
through a dialect's catalog (``sqlite_master``, PRAGMAs). A session's table names come from the
store's catalog, never formatted here. Each helper takes the database as a store, a
:class:`~tests.backends.Backend` or a URL.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    column,
    inspect,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.engine import URL, Inspector

from soong_store import SessionStore
from soong_store.schema.session_tables import session_tables
from tests.backends import Backend, kind_of

Target = SessionStore | Backend | str | URL


def url_of(target: Target) -> str | URL:
    """The database URL of a store, a backend or a URL."""
    if isinstance(target, SessionStore | Backend):
        return target.url
    return target


@lru_cache(maxsize=16)
def _side_engine(url: str) -> Engine:
    # Kept for the next calls of the same test (its compiled statements with it); it pools no
    # connection, so nothing stays open between calls.
    return kind_of(url).side_engine(url)


@contextmanager
def side_door(target: Target) -> Iterator[Connection]:
    """A connection in a transaction of its own, committed when the block ends without error."""
    url = url_of(target)
    with _side_engine(
        url if isinstance(url, str) else url.render_as_string(False)
    ).begin() as connection:
        yield connection


def nodes_table(session_id: str) -> str:
    """The name of a session's node table, as the catalog forms it."""
    return session_tables(session_id).nodes.name


def events_table(session_id: str) -> str:
    """The name of a session's event table, as the catalog forms it."""
    return session_tables(session_id).events.name


def table_names(target: Target) -> set[str]:
    """The names of every table of the database."""
    with side_door(target) as connection:
        return set(inspect(connection).get_table_names())


def _shape(found: Inspector, name: str) -> dict[str, Any]:
    return {
        "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(name)],
        "indexes": sorted(
            (i["name"] or "", tuple(i["column_names"]), bool(i["unique"]))
            for i in found.get_indexes(name)
        ),
    }


def _all_rows(connection: Connection, name: str) -> list[tuple[Any, ...]]:
    query = select(literal_column("*")).select_from(table(name))
    return sorted((tuple(row) for row in connection.execute(query)), key=repr)


def snapshot(target: Target) -> dict[str, Any]:
    """Every table's rows and the schema: its tables and views, their columns and indexes.

    Two snapshots are equal when nothing stored changed: the proof that a refused call wrote
    nothing.
    """
    with side_door(target) as connection:
        found = inspect(connection)
        names = sorted(found.get_table_names())
        data: dict[str, Any] = {
            "tables": names,
            "views": sorted(found.get_view_names()),
            "schema": {name: _shape(found, name) for name in names},
        }
        for name in names:
            data[name] = _all_rows(connection, name)
        return data


def rows(
    target: Target, name: str | Table, where: Mapping[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """The rows of one table (all its columns, in table order) whose columns equal ``where``."""
    where = dict(where or {})
    name = name.name if isinstance(name, Table) else name
    source = table(name, *(column(key) for key in where))
    query = select(literal_column("*")).select_from(source)
    for key, value in where.items():
        query = query.where(source.c[key] == value)
    with side_door(target) as connection:
        return [tuple(row) for row in connection.execute(query)]


def execute(
    target: Target, sql: str, params: Mapping[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """Run one statement of plain SQL (``:name`` parameters) and commit; its rows, if any.

    For deliberate damage and for reads the API does not offer: nothing here is validated.
    """
    with side_door(target) as connection:
        result = connection.execute(text(sql), dict(params or {}))
        return [tuple(row) for row in result] if result.returns_rows else []


def foreign_key_violations(target: Target) -> list[tuple[Any, ...]]:
    """Rows whose foreign keys point nowhere, as the backend can tell."""
    url = url_of(target)
    with side_door(url) as connection:
        return kind_of(url).foreign_key_violations(connection)
