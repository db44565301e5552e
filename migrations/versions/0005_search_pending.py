"""FTS5 takes ``search_text``'s rows in by batches: ``search_pending`` lists those it has not yet.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

SQLite with an FTS5 index only (PostgreSQL's GIN index and a database without FTS5 are left
as they are). 0004's triggers indexed every row as it was inserted; these note it in
``search_pending`` instead, and the index takes the noted rows in by batches
(:mod:`soong_store.search.pending`). Nothing is noted at upgrade: every row is indexed already.
The downgrade takes the noted rows in, then brings 0004's triggers back.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from soong_store.search import fts5, pending

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
    for statement in (*_DROP_TRIGGERS, fts5.PENDING, *fts5.TRIGGERS):
        connection.exec_driver_sql(statement)


def downgrade() -> None:
    connection = op.get_bind()
    if not _indexed(connection):
        return
    pending.catch_up(connection)
    for statement in (*_DROP_TRIGGERS, f"DROP TABLE {pending.PENDING_TABLE}", *_TRIGGERS_0004):
        connection.exec_driver_sql(statement)
