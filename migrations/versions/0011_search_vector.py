"""PostgreSQL keeps each indexed text's ``tsvector`` in a stored column, GIN-indexed.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07

Revision 0004 indexed the expression ``to_tsvector('simple', body)``. A GIN index holds no word
positions, so every row it offers for a phrase, and every row a search ranks, had its vector
computed from the text again: a common word's window cost a quarter of a second at 50,000 rows.
``search_text.body_vector`` is generated from ``body`` by the database (it follows every insert
and every redaction's update) and stored; the new index is on it, the old one is dropped.
Adding it rewrites ``search_text`` once, under its lock. Nothing on SQLite (FTS5 keeps its own
index); the revision is recorded there too, as every revision is.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_INDEX = "ix_search_text_tsv"
_OLD_EXPRESSION = "to_tsvector('simple', body)"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "ALTER TABLE search_text ADD COLUMN body_vector tsvector "
        f"GENERATED ALWAYS AS ({_OLD_EXPRESSION}) STORED"
    )
    op.execute("CREATE INDEX ix_search_text_vector ON search_text USING gin (body_vector)")
    op.execute(f"DROP INDEX IF EXISTS {_OLD_INDEX}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"CREATE INDEX {_OLD_INDEX} ON search_text USING gin ({_OLD_EXPRESSION})")
    op.execute("DROP INDEX IF EXISTS ix_search_text_vector")
    op.execute("ALTER TABLE search_text DROP COLUMN body_vector")
