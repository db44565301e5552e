"""Keyed states: state an integration keeps under an outside name (Google ADK's scopes).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07

One row per (namespace, key): an ADK app's state, a user's state in an app, an ADK session's
own state, each with the framework's update time (a float, kept exactly); a session's row
names its newest node, where the path of its events ends.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "keyed_states",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("state_json", sa.Text(), nullable=False),
        sa.Column("update_time", sa.Double(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("namespace", "key", name="pk_keyed_states"),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("keyed_states")
