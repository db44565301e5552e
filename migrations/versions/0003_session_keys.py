"""Session keys: outside names of sessions (SDK session ids, imported conversations).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

One row per (namespace, key), naming one session; deleted with it. Sessions an import wrote
before this revision are keyed from their ``imported_from`` metadata, so that importing the same
conversation again is still found (the first such session wins, as the old scan found one).
"""

from collections.abc import Sequence

import orjson
import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "session_keys",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.session_id"],
            name="fk_session_keys_session_id_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("namespace", "key", name="pk_session_keys"),
    )
    op.create_index("ix_session_keys_session_id", "session_keys", ["session_id"])
    _key_imported_sessions()


def _key_imported_sessions() -> None:
    bind = op.get_bind()
    sessions = sa.table(
        "sessions", sa.column("session_id"), sa.column("metadata_json"), sa.column("created_at")
    )
    keys = sa.table(
        "session_keys",
        sa.column("namespace"),
        sa.column("key"),
        sa.column("session_id"),
        sa.column("created_at"),
    )
    found = bind.execute(
        sa.select(sessions.c.session_id, sessions.c.metadata_json, sessions.c.created_at)
        .where(sessions.c.metadata_json.like('%"imported_from"%'))
        .order_by(sessions.c.created_at, sessions.c.session_id)
    )
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for session_id, metadata_json, created_at in found:
        try:
            origin = orjson.loads(metadata_json).get("imported_from")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if not isinstance(origin, dict) or not isinstance(origin.get("source_session_id"), str):
            continue
        name = (f"import:{origin.get('format')}", origin["source_session_id"])
        rows.setdefault(
            name,
            {
                "namespace": name[0],
                "key": name[1],
                "session_id": session_id,
                "created_at": created_at,
            },
        )
    if rows:
        bind.execute(keys.insert(), list(rows.values()))


def downgrade() -> None:
    op.drop_index("ix_session_keys_session_id", table_name="session_keys")
    op.drop_table("session_keys")
