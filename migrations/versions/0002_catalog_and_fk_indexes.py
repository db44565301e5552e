"""The catalog of session pairs, and the indexes the foreign-key checks of a new session need.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

``create_session`` inserts a session naming a root agent not inserted yet (a deferred foreign
key); while that is outstanding, inserting the agent makes SQLite look for every row that refers
to agents, and neither ``sessions.root_agent_id`` nor ``agents.parent_agent_id`` had an index:
two full scans per new session (26.6 ms at 100,000 sessions, 0.19 ms with the indexes).

The catalog says where each session's pair lives (``session_files``), which moves between files
are under way (``session_moves``) and which shard files exist (``shard_files``). Every session
whose pair is stored gets its row here, in the main database, at epoch 0; a session without a
row has no pair yet.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from soong_store.catalog.lookup import MAIN, stored_tables
from soong_store.model.checks import SESSION_ID_RE
from soong_store.schema.session_tables import session_table_names

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_sessions_root_agent_id", "sessions", ["root_agent_id"])
    op.create_index("ix_agents_parent_agent_id", "agents", ["parent_agent_id"])
    session_files = op.create_table(
        "session_files",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("file", sa.Text(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.session_id"], name="fk_session_files_session_id_sessions"
        ),
        sa.PrimaryKeyConstraint("session_id", name="pk_session_files"),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_session_files_file", "session_files", ["file"])
    op.create_table(
        "session_moves",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_session_moves"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "shard_files",
        sa.Column("file", sa.Text(), nullable=False),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.Column("rev", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("file", name="pk_shard_files"),
        sqlite_with_rowid=False,
    )
    bind = op.get_bind()
    stored = stored_tables(bind)
    sessions = sa.table("sessions", sa.column("session_id"))
    paired = [
        {"session_id": sid, "file": MAIN, "epoch": 0}
        for sid in bind.execute(sa.select(sessions.c.session_id)).scalars()
        if SESSION_ID_RE.fullmatch(sid) is not None
        and any(stored.has(name) for name in session_table_names(sid))
    ]
    if paired:
        op.bulk_insert(session_files, paired)


def downgrade() -> None:
    op.drop_table("shard_files")
    op.drop_table("session_moves")
    op.drop_index("ix_session_files_file", "session_files")
    op.drop_table("session_files")
    op.drop_index("ix_agents_parent_agent_id", "agents")
    op.drop_index("ix_sessions_root_agent_id", "sessions")
