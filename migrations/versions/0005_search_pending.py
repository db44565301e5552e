"""FTS5 takes ``search_text``'s rows in by batches: ``search_pending`` lists those it has not yet.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

SQLite with an FTS5 index only (PostgreSQL's GIN index and a database without FTS5 are left as they
are). 0004's triggers indexed every row as it was inserted; these note it in ``search_pending``
instead, and the index takes the noted rows in by batches
(:mod:`soong_store.backends.sqlite.search_pending`). Nothing is noted at upgrade: every row is
indexed already. The downgrade takes the noted rows in, then brings 0004's triggers back.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from soong_store.backends.sqlite import search as fts5

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DROP_TRIGGERS = (
    "DROP TRIGGER IF EXISTS search_text_ai",
    "DROP TRIGGER IF EXISTS search_text_ad",
)
_TRIGGERS_0004 = (
    "CREATE TRIGGER search_text_ai AFTER INSERT ON search_text BEGIN "
    "INSERT INTO search_fts(rowid, body) VALUES (new.doc_id, new.body); END",
    "CREATE TRIGGER search_text_ad AFTER DELETE ON search_text BEGIN "
    "INSERT INTO search_fts(search_fts, rowid, body) VALUES ('delete', old.doc_id, old.body); "
    "END",
)


_PENDING = "CREATE TABLE IF NOT EXISTS search_pending (doc_id INTEGER PRIMARY KEY)"
_TRIGGERS = (
    "CREATE TRIGGER search_text_ai AFTER INSERT ON search_text BEGIN "
    "INSERT INTO search_pending(doc_id) VALUES (new.doc_id); END",
    "CREATE TRIGGER search_text_ad AFTER DELETE ON search_text BEGIN "
    "INSERT INTO search_fts(search_fts, rowid, body) SELECT 'delete', old.doc_id, old.body "
    "WHERE NOT EXISTS (SELECT 1 FROM search_pending WHERE doc_id = old.doc_id); "
    "DELETE FROM search_pending WHERE doc_id = old.doc_id; END",
)
"""This revision's shape: a trigger notes each inserted row, a delete drops its note."""
_CATCH_UP = (
    "INSERT INTO search_fts(rowid, body) SELECT t.doc_id, t.body FROM search_pending AS p "
    "JOIN search_text AS t ON t.doc_id = p.doc_id ORDER BY p.doc_id",
    "DELETE FROM search_pending",
)
"""Takes the noted rows into the index (this revision's catch-up)."""


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
    for statement in (*_DROP_TRIGGERS, _PENDING, *_TRIGGERS):
        connection.exec_driver_sql(statement)


def downgrade() -> None:
    connection = op.get_bind()
    if not _indexed(connection):
        return
    for statement in (*_CATCH_UP, *_DROP_TRIGGERS, "DROP TABLE search_pending", *_TRIGGERS_0004):
        connection.exec_driver_sql(statement)
