"""The search index: ``search_text`` (every node's indexed text), and on SQLite its FTS5 index.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Every existing session's nodes are indexed here, session by session, with progress logged
every twentieth of the way (Alembic's logger, which ``alembic upgrade`` prints). On SQLite the
FTS5 index is built once over the filled table (one ``rebuild`` is faster than a trigger per
row) and its triggers are created after it; a SQLite library without FTS5 gets ``search_text``
alone (it opens and writes as before; search says what it lacks).
"""

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from soong_store.backends.postgresql.search import INDEXED as PG_VECTOR
from soong_store.backends.sqlite import search as fts5
from soong_store.migrate.upgrade import session_ids
from soong_store.schema.session_tables import session_tables
from soong_store.search.index import node_text, search_text_table

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_log = logging.getLogger("alembic.runtime.migration")
_BATCH = 500
_TRIGGERS = (
    "CREATE TRIGGER search_text_ai AFTER INSERT ON search_text BEGIN "
    "INSERT INTO search_fts(rowid, body) VALUES (new.doc_id, new.body); END",
    "CREATE TRIGGER search_text_ad AFTER DELETE ON search_text BEGIN "
    "INSERT INTO search_fts(search_fts, rowid, body) VALUES ('delete', old.doc_id, old.body); "
    "END",
)
"""This revision's triggers (every row indexed at its insert); later revisions replace them."""


def upgrade() -> None:
    op.create_table(
        "search_text",
        sa.Column("doc_id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("node_seq", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("node_type", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("doc_id", name="pk_search_text"),
        sa.UniqueConstraint("session_id", "node_id", name="uq_search_text_session_node"),
    )
    connection = op.get_bind()
    _backfill(connection)
    if connection.dialect.name == "sqlite" and fts5.has_fts5(connection):
        for statement in (fts5.TABLE, fts5.REBUILD, *_TRIGGERS):
            connection.exec_driver_sql(statement)
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(
            f"CREATE INDEX ix_search_text_tsv ON search_text USING gin ({PG_VECTOR})"
        )


def _backfill(connection: sa.Connection) -> None:
    sids = session_ids(connection)
    step = max(1, len(sids) // 20)
    insert = search_text_table.insert()
    for done, sid in enumerate(sids, 1):
        nodes = session_tables(sid).nodes
        rows = []
        for node in connection.execute(sa.select(nodes).order_by(nodes.c.node_seq)).mappings():
            body = node_text(node["content_json"])
            if body:
                rows.append(
                    {
                        "session_id": sid,
                        **{
                            name: node[name]
                            for name in ("node_id", "node_seq", "agent_id", "role", "node_type")
                        },
                        "created_at": node["created_at"],
                        "body": body,
                    }
                )
            if len(rows) >= _BATCH:
                connection.execute(insert, rows)
                rows = []
        if rows:
            connection.execute(insert, rows)
        if done % step == 0 or done == len(sids):
            _log.info("search index: %d of %d sessions indexed", done, len(sids))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_search_text_tsv")
    if op.get_bind().dialect.name == "sqlite":
        for statement in fts5.DROP:
            op.execute(statement)
    op.drop_table("search_text")
