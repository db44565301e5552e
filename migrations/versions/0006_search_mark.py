"""FTS5's waiting rows are those above a mark (``search_mark``), not a list (``search_pending``).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

SQLite with an FTS5 index only (PostgreSQL's GIN index and a database without FTS5 are left as they
are). 0005 noted each inserted row in ``search_pending`` by a trigger, a row and a page more in
every node's commit; now no trigger runs at an insert and the rows of ``search_text`` above
``search_mark.indexed_upto`` are the ones the index has not taken in
(:mod:`soong_store.backends.sqlite.search_pending`). The upgrade takes the noted rows in first, so
the mark starts at the last row; the downgrade takes the rows above the mark in, then brings 0005's
table and triggers back, with nothing noted.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from soong_store.backends.sqlite import search as fts5

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DROP_TRIGGERS = (
    "DROP TRIGGER IF EXISTS search_text_ai",
    "DROP TRIGGER IF EXISTS search_text_ad",
)
_CATCH_UP_0005 = (
    "INSERT INTO search_fts(rowid, body) SELECT t.doc_id, t.body FROM search_pending AS p "
    "JOIN search_text AS t ON t.doc_id = p.doc_id ORDER BY p.doc_id",
    "DROP TABLE search_pending",
)
_SHAPE_0005 = (
    "CREATE TABLE search_pending (doc_id INTEGER PRIMARY KEY)",
    "CREATE TRIGGER search_text_ai AFTER INSERT ON search_text BEGIN "
    "INSERT INTO search_pending(doc_id) VALUES (new.doc_id); END",
    "CREATE TRIGGER search_text_ad AFTER DELETE ON search_text BEGIN "
    "INSERT INTO search_fts(search_fts, rowid, body) SELECT 'delete', old.doc_id, old.body "
    "WHERE NOT EXISTS (SELECT 1 FROM search_pending WHERE doc_id = old.doc_id); "
    "DELETE FROM search_pending WHERE doc_id = old.doc_id; END",
)


_LAST_ROW = "(SELECT coalesce(max(doc_id), 0) FROM search_text)"
_SHAPE_0006 = (
    "CREATE TABLE search_mark (indexed_upto INTEGER NOT NULL)",
    "INSERT INTO search_mark(indexed_upto) VALUES (0)",
    f"UPDATE search_mark SET indexed_upto = {_LAST_ROW}",
    "CREATE TRIGGER search_text_ad AFTER DELETE ON search_text BEGIN "
    "INSERT INTO search_fts(search_fts, rowid, body) SELECT 'delete', old.doc_id, old.body "
    "FROM search_mark WHERE old.doc_id <= indexed_upto; "
    f"UPDATE search_mark SET indexed_upto = {_LAST_ROW} WHERE indexed_upto > {_LAST_ROW}; END",
)
"""This revision's shape, its mark at the last row: its own copy, as 0004's and 0005's are, so that
a later change to :mod:`soong_store.backends.sqlite.search` does not change what this revision does.
"""
_CATCH_UP_0006 = (
    "INSERT INTO search_fts(rowid, body) SELECT doc_id, body FROM search_text "
    "WHERE doc_id > (SELECT indexed_upto FROM search_mark) ORDER BY doc_id",
    "DROP TABLE search_mark",
)


def _indexed(connection: sa.Connection) -> bool:
    if connection.dialect.name != "sqlite":
        return False
    found = connection.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (fts5.FTS_TABLE,)
    ).first()
    return found is not None


def upgrade() -> None:
    connection = op.get_bind()
    if not _indexed(connection):
        return
    statements = (*_DROP_TRIGGERS, *_CATCH_UP_0005, *_SHAPE_0006)
    for statement in statements:
        connection.exec_driver_sql(statement)


def downgrade() -> None:
    connection = op.get_bind()
    if not _indexed(connection):
        return
    statements = (
        _CATCH_UP_0006[0],
        *_DROP_TRIGGERS,
        _CATCH_UP_0006[1],
        *_SHAPE_0005,
    )
    for statement in statements:
        connection.exec_driver_sql(statement)
