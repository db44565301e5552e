"""A session's pair as text statements, for the moves between files: create, copy, drop.

A move handles pairs SQLAlchemy has not seen: building each session's ``Table`` objects and
compiling statements for them (new to every statement cache) cost more than running those
statements. So the moves speak text: the factory's DDL (:mod:`soong_store.catalog.lookup`) is
compiled once for a template session and the template's id replaced by the session's, for ids
whose names the factory writes the same way (lowercase, short enough never to be shortened by
a digest; any other id has its DDL compiled from the factory's tables); the copy and the drops
are written from the quoted names.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Connection, Dialect, Table
from sqlalchemy.schema import CreateIndex, CreateTable

from soong_store.schema.session_tables import session_table_names, session_tables

TEMPLATE = "pairtemplate"
"""The session id statements are compiled for once (it occurs in no column or other name)."""
PLAIN_LENGTH = 40
"""The longest id whose table and index names the factory writes in full (63 characters)."""


def create(connection: Connection, session_id: str) -> None:
    """Create the lean pair of ``session_id`` in the connection's main database."""
    for statement in ddl(connection.dialect, session_id):
        connection.exec_driver_sql(statement)


def copy(connection: Connection, session_id: str, source: str, target: str) -> None:
    """``INSERT ... SELECT`` both tables of a pair from schema ``source`` to ``target``."""
    quote = connection.dialect.identifier_preparer
    from_, to = quote.quote_schema(source), quote.quote_schema(target)
    for name, columns in zip(session_table_names(session_id), _columns(), strict=True):
        table = quote.quote(name)
        listed = ", ".join(quote.quote(column) for column in columns)
        connection.exec_driver_sql(
            f"INSERT INTO {to}.{table} ({listed}) SELECT {listed} FROM {from_}.{table}"
        )


def drop(connection: Connection, session_id: str, schema: str) -> None:
    """Drop both tables of a pair in ``schema`` where they exist (events first)."""
    quote = connection.dialect.identifier_preparer
    for name in reversed(session_table_names(session_id)):
        connection.exec_driver_sql(
            f"DROP TABLE IF EXISTS {quote.quote_schema(schema)}.{quote.quote(name)}"
        )


def ddl(dialect: Dialect, session_id: str) -> list[str]:
    """The statements that create the lean pair of ``session_id`` (unqualified names)."""
    if templated(dialect, session_id):
        return [s.replace(TEMPLATE, session_id) for s in _template(dialect)]
    return compiled(dialect, session_id)


def templated(dialect: Dialect, session_id: str) -> bool:
    """Whether SQL compiled for :data:`TEMPLATE` stands for ``session_id`` once the id is put in.

    True for ids the factory names in full and ``dialect`` writes unquoted; raises
    ``InvalidIdentifier`` for an id the factory refuses.
    """
    nodes, _ = session_table_names(session_id)  # validates the id
    plain = dialect.identifier_preparer.quote(nodes) == nodes
    return plain and len(session_id) <= PLAIN_LENGTH


def compiled(dialect: Dialect, session_id: str) -> list[str]:
    """The factory's DDL of a pair, compiled for ``session_id`` (tables, then their indexes)."""
    tables = session_tables(session_id)
    statements: list[str] = []
    for table in (tables.nodes, tables.events):
        statements.append(str(CreateTable(table).compile(dialect=dialect)))
        statements.extend(_indexes(table, dialect))
    return statements


def _indexes(table: Table, dialect: Dialect) -> list[str]:
    found = sorted(table.indexes, key=lambda index: str(index.name))
    return [str(CreateIndex(index).compile(dialect=dialect)) for index in found]


@lru_cache(maxsize=4)
def _template(dialect: Dialect) -> tuple[str, ...]:
    return tuple(compiled(dialect, TEMPLATE))


@lru_cache(maxsize=1)
def _columns() -> tuple[tuple[str, ...], tuple[str, ...]]:
    tables = session_tables(TEMPLATE)
    return tuple(c.name for c in tables.nodes.columns), tuple(c.name for c in tables.events.columns)
