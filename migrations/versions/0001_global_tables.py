"""Global tables: sessions, agents, runs, artifacts.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Two foreign keys form cycles (a session names its root agent, which names its session; an agent
names the run that created it, which names an agent). They are DEFERRABLE INITIALLY DEFERRED.
SQLite accepts them inline before the referred table exists; other databases get them added
once every table is there.

Integer columns are 64-bit everywhere: ``INTEGER`` on SQLite, ``BIGINT`` on PostgreSQL (whose
``INTEGER`` is 32-bit); what SQLite is given is unchanged.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

INTEGER = sa.Integer().with_variant(sa.BigInteger(), "postgresql")

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CYCLIC = (
    ("fk_sessions_root_agent_id_agents", "sessions", "agents", "root_agent_id", "agent_id"),
    ("fk_agents_created_by_run_id_runs", "agents", "runs", "created_by_run_id", "run_id"),
)


def _cyclic_fk(table: str, inline: bool) -> list[sa.ForeignKeyConstraint]:
    return [
        sa.ForeignKeyConstraint(
            [local], [f"{referred}.{remote}"], name=name, deferrable=True, initially="DEFERRED"
        )
        for name, source, referred, local, remote in _CYCLIC
        if inline and source == table
    ]


def upgrade() -> None:
    inline = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("cwd", sa.Text(), nullable=False),
        sa.Column("root_agent_id", sa.Text(), nullable=False),
        sa.Column("active_node_id", sa.Text(), nullable=True),
        sa.Column("parent_session_id", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("metadata_json", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Text(), nullable=False),
        sa.CheckConstraint("status IN ('active', 'archived')", name="ck_sessions_status"),
        *_cyclic_fk("sessions", inline),
        sa.PrimaryKeyConstraint("session_id", name="pk_sessions"),
    )
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])
    op.create_index("ix_sessions_status_updated_at", "sessions", ["status", "updated_at"])

    op.create_table(
        "agents",
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("parent_agent_id", sa.Text(), nullable=True),
        sa.Column("agent_type", sa.Text(), nullable=False),
        sa.Column("created_by_run_id", sa.Text(), nullable=True),
        sa.Column("fork_from_node_id", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.Column("metadata_json", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "agent_type IN ('main', 'orchestrator', 'sub', 'fork')", name="ck_agents_agent_type"
        ),
        sa.CheckConstraint(
            "status IN ('idle', 'running', 'completed', 'failed', 'cancelled')",
            name="ck_agents_status",
        ),
        *_cyclic_fk("agents", inline),
        sa.ForeignKeyConstraint(
            ["parent_agent_id"], ["agents.agent_id"], name="fk_agents_parent_agent_id_agents"
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.session_id"], name="fk_agents_session_id_sessions"
        ),
        sa.PrimaryKeyConstraint("agent_id", name="pk_agents"),
    )
    op.create_index("ix_agents_session_id", "agents", ["session_id"])

    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("start_node_id", sa.Text(), nullable=True),
        sa.Column("end_node_id", sa.Text(), nullable=True),
        sa.Column("end_reason", sa.Text(), nullable=True),
        sa.Column("turn_count", INTEGER, nullable=True),
        sa.Column("usage_json", sa.Text(), nullable=True),
        sa.Column("error_json", sa.Text(), nullable=True),
        sa.Column("metadata_json", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "status IN ('queued', 'pending', 'running', 'completed', 'failed', 'aborted', "
            "'cancelled')",
            name="ck_runs_status",
        ),
        sa.CheckConstraint(
            "end_reason IS NULL OR end_reason IN ('completed', 'max_turns', "
            "'aborted_streaming', 'aborted_tools', 'prompt_too_long', "
            "'max_output_tokens_recovery', 'failed')",
            name="ck_runs_end_reason",
        ),
        sa.CheckConstraint("turn_count IS NULL OR turn_count >= 0", name="ck_runs_turn_count"),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.agent_id"], name="fk_runs_agent_id_agents"),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.session_id"], name="fk_runs_session_id_sessions"
        ),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
    )
    op.create_index("ix_runs_agent_id", "runs", ["agent_id"])
    op.create_index("ix_runs_session_id_status", "runs", ["session_id", "status"])

    op.create_table(
        "artifacts",
        sa.Column("artifact_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=True),
        sa.Column("run_id", sa.Text(), nullable=True),
        sa.Column("node_id", sa.Text(), nullable=True),
        sa.Column("tool_call_id", sa.Text(), nullable=True),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("filename", sa.Text(), nullable=True),
        sa.Column("mime_type", sa.Text(), nullable=True),
        sa.Column("size_bytes", INTEGER, nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("metadata_json", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.CheckConstraint("size_bytes IS NULL OR size_bytes >= 0", name="ck_artifacts_size_bytes"),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.session_id"], name="fk_artifacts_session_id_sessions"
        ),
        sa.PrimaryKeyConstraint("artifact_id", name="pk_artifacts"),
    )
    op.create_index("ix_artifacts_session_id", "artifacts", ["session_id"])
    op.create_index("ix_artifacts_path", "artifacts", ["path"])

    if not inline:
        for name, source, referred, local, remote in _CYCLIC:
            op.create_foreign_key(
                name, source, referred, [local], [remote], deferrable=True, initially="DEFERRED"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        for name, source, *_ in _CYCLIC:
            op.drop_constraint(name, source, type_="foreignkey")
    for table in ("artifacts", "runs", "agents", "sessions"):
        op.drop_table(table)
