"""The usage ledger: one row per entry of a run's usage, so that usage is summed on the database.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07

Runs written before this revision are entered from their ``usage_json``, read leniently (usage
was free-form then): of each dict, the keys of the usage shape with valid values count, anything
else is left out of the ledger (the run's ``usage`` stays as it was stored).
"""

from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from alembic import op

from soong_store.model.usage import KEYS
from soong_store.write.usage_ledger import ledger_rows

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PAGE = 1000


def upgrade() -> None:
    wide = sa.Integer().with_variant(sa.BigInteger(), "postgresql")
    op.create_table(
        "run_usage",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("entry", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("input_tokens", wide, nullable=True),
        sa.Column("output_tokens", wide, nullable=True),
        sa.Column("cache_read_tokens", wide, nullable=True),
        sa.Column("cache_write_tokens", wide, nullable=True),
        sa.Column("cost_usd", sa.Double(), nullable=True),
        sa.Column("first_of_run", sa.Integer(), nullable=False),
        sa.Column("first_of_model", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "first_of_run IN (0, 1) AND first_of_model IN (0, 1)", name="ck_run_usage_first"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name="fk_run_usage_run_id_runs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "entry", name="pk_run_usage"),
    )
    op.create_index("ix_run_usage_created_at", "run_usage", ["created_at"])
    op.create_index("ix_run_usage_session_id", "run_usage", ["session_id"])
    _enter_stored_usage()


def _enter_stored_usage() -> None:
    bind = op.get_bind()
    runs = sa.table(
        "runs",
        sa.column("run_id"),
        sa.column("session_id"),
        sa.column("usage_json"),
        sa.column("created_at"),
    )
    ledger = sa.table(
        "run_usage",
        *(sa.column(name) for name in ("run_id", "entry", "session_id", "created_at", *KEYS)),
        sa.column("first_of_run"),
        sa.column("first_of_model"),
    )
    found = bind.execute(
        sa.select(runs.c.run_id, runs.c.session_id, runs.c.usage_json, runs.c.created_at).where(
            runs.c.usage_json.is_not(None)
        )
    ).all()
    rows: list[dict[str, Any]] = []
    for run in found:
        try:
            orjson.loads(run.usage_json)
        except orjson.JSONDecodeError:
            continue  # not JSON at all: nothing of it can be summed
        rows += ledger_rows(run._mapping)
        if len(rows) >= _PAGE:
            bind.execute(ledger.insert(), rows)
            rows = []
    if rows:
        bind.execute(ledger.insert(), rows)


def downgrade() -> None:
    op.drop_index("ix_run_usage_session_id", table_name="run_usage")
    op.drop_index("ix_run_usage_created_at", table_name="run_usage")
    op.drop_table("run_usage")
