"""The home's identity: a random id the main database keeps and writes into each shard it makes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07

A shard file is attached only if it is this home's: one that names another home's id (a shard
copied in from elsewhere) is refused. Shards made before this revision name none; they are
adopted by what they hold (``docs/scaling.md``, a shard's identity) and given the id by the
next move into them.
"""

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "home_identity",
        sa.Column("home_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("home_id", name="pk_home_identity"),
        sqlite_with_rowid=False,
    )
    op.bulk_insert(table, [{"home_id": secrets.token_hex(16)}])


def downgrade() -> None:
    op.drop_table("home_identity")
