"""Owners and keys of sessions: ``sessions.owner`` and ``sessions.key``, indexed.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07

``owner`` names the user or tenant a session belongs to, ``key`` an application's own name for
it; both are NULL for the sessions stored before. Listings filter by owner or by cwd, newest
first with the key cursor (``updated_at``, ``session_id``), so each has an index in that order.
A key is unique per owner: one partial unique index for the sessions with an owner and one for
those without (NULLs are distinct in a unique index, so one index on both would let two
sessions without an owner share a key). The database refuses the clash itself, whatever the
writers around it do.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OWNER = sa.column("owner")
_KEY = sa.column("key")
_WITH_OWNER = _OWNER.is_not(None)
_WITHOUT_OWNER = _OWNER.is_(None) & _KEY.is_not(None)


def upgrade() -> None:
    # Plain ADD COLUMN (nullable, no default): no table is rebuilt, on SQLite either.
    op.add_column("sessions", sa.Column("owner", sa.Text(), nullable=True))
    op.add_column("sessions", sa.Column("key", sa.Text(), nullable=True))
    op.create_index(
        "ix_sessions_owner_updated_at", "sessions", ["owner", "updated_at", "session_id"]
    )
    op.create_index("ix_sessions_cwd_updated_at", "sessions", ["cwd", "updated_at", "session_id"])
    op.create_index(
        "uq_sessions_owner_key",
        "sessions",
        ["owner", "key"],
        unique=True,
        sqlite_where=_WITH_OWNER,
        postgresql_where=_WITH_OWNER,
    )
    op.create_index(
        "uq_sessions_key_without_owner",
        "sessions",
        ["key"],
        unique=True,
        sqlite_where=_WITHOUT_OWNER,
        postgresql_where=_WITHOUT_OWNER,
    )


def downgrade() -> None:
    for name in (
        "uq_sessions_key_without_owner",
        "uq_sessions_owner_key",
        "ix_sessions_cwd_updated_at",
        "ix_sessions_owner_updated_at",
    ):
        op.drop_index(name, table_name="sessions")
    # ALTER TABLE ... DROP COLUMN (SQLite has it from 3.35, the oldest the store opens): the
    # sessions table is not rebuilt, so the foreign keys that point at it are left alone.
    op.drop_column("sessions", "key")
    op.drop_column("sessions", "owner")
