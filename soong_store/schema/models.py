"""The global tables as SQLAlchemy 2 models; Alembic's ``target_metadata``.

Columns are exactly the seed's (names, types, NULL-ability). CHECK constraints guard every enum
column, foreign keys tie agents, runs and artifacts to their session, and indexes serve the
listings (sessions by ``updated_at``, agents and runs by session) and the foreign-key lookups a
``create_session`` makes (``sessions.root_agent_id``, ``agents.parent_agent_id``: without them each
insert of a session scans both tables). The catalog's tables (``session_files``,
``session_moves``, ``shard_files``) say where each session's pair lives; only
:mod:`soong_store.schema.catalog` reads them. Two foreign keys are deferred to
commit because they form cycles: a session names its root agent, which names its session; an
agent names the run that created it, which names an agent.

Integer columns are :data:`INTEGER`: SQLite's ``INTEGER`` and PostgreSQL's ``BIGINT``, so that
both hold the same 64-bit range (PostgreSQL's ``INTEGER`` stops at 2**31 - 1).
"""

from __future__ import annotations

from enum import StrEnum
from typing import cast

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from soong_store.model.enums import AgentStatus, AgentType, EndReason, RunStatus, SessionStatus

INTEGER = Integer().with_variant(BigInteger(), "postgresql")
"""A 64-bit integer column on every backend."""

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _one_of(column: str, enum: type[StrEnum], *, nullable: bool = False) -> CheckConstraint:
    values = ", ".join(f"'{member.value}'" for member in enum)
    sql = f"{column} IN ({values})"
    return CheckConstraint(f"{column} IS NULL OR {sql}" if nullable else sql, name=column)


class Base(DeclarativeBase):
    """Declarative base of the global tables, with a naming convention Alembic can rely on."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Session(Base):
    """One conversation: the container of an agent tree, its nodes and its events."""

    __tablename__ = "sessions"
    __table_args__ = (
        _one_of("status", SessionStatus),
        Index("ix_sessions_updated_at", "updated_at"),
        Index("ix_sessions_status_updated_at", "status", "updated_at"),
        Index("ix_sessions_root_agent_id", "root_agent_id"),
    )

    session_id: Mapped[str] = mapped_column(Text, primary_key=True)
    cwd: Mapped[str] = mapped_column(Text)
    root_agent_id: Mapped[str] = mapped_column(
        Text, ForeignKey("agents.agent_id", deferrable=True, initially="DEFERRED", use_alter=True)
    )
    active_node_id: Mapped[str | None] = mapped_column(Text)
    parent_session_id: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text)
    metadata_json: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[str] = mapped_column(Text)


class Agent(Base):
    """An agent of a session: the root (main/orchestrator) or a child (sub/fork)."""

    __tablename__ = "agents"
    __table_args__ = (
        _one_of("agent_type", AgentType),
        _one_of("status", AgentStatus),
        Index("ix_agents_session_id", "session_id"),
        Index("ix_agents_parent_agent_id", "parent_agent_id"),
    )

    agent_id: Mapped[str] = mapped_column(Text, primary_key=True)
    session_id: Mapped[str] = mapped_column(Text, ForeignKey("sessions.session_id"))
    parent_agent_id: Mapped[str | None] = mapped_column(Text, ForeignKey("agents.agent_id"))
    agent_type: Mapped[str] = mapped_column(Text)
    created_by_run_id: Mapped[str | None] = mapped_column(
        Text, ForeignKey("runs.run_id", deferrable=True, initially="DEFERRED", use_alter=True)
    )
    fork_from_node_id: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text)
    result_json: Mapped[str | None] = mapped_column(Text)
    metadata_json: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[str] = mapped_column(Text)


class Run(Base):
    """One loop execution of an agent within its session."""

    __tablename__ = "runs"
    __table_args__ = (
        _one_of("status", RunStatus),
        _one_of("end_reason", EndReason, nullable=True),
        CheckConstraint("turn_count IS NULL OR turn_count >= 0", name="turn_count"),
        Index("ix_runs_session_id_status", "session_id", "status"),
        Index("ix_runs_agent_id", "agent_id"),
    )

    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    session_id: Mapped[str] = mapped_column(Text, ForeignKey("sessions.session_id"))
    agent_id: Mapped[str] = mapped_column(Text, ForeignKey("agents.agent_id"))
    status: Mapped[str] = mapped_column(Text)
    start_node_id: Mapped[str | None] = mapped_column(Text)
    end_node_id: Mapped[str | None] = mapped_column(Text)
    end_reason: Mapped[str | None] = mapped_column(Text)
    turn_count: Mapped[int | None] = mapped_column(INTEGER)
    usage_json: Mapped[str | None] = mapped_column(Text)
    error_json: Mapped[str | None] = mapped_column(Text)
    metadata_json: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[str] = mapped_column(Text)


class Artifact(Base):
    """A large payload kept as a file under the home's artifact folder."""

    __tablename__ = "artifacts"
    __table_args__ = (
        CheckConstraint("size_bytes IS NULL OR size_bytes >= 0", name="size_bytes"),
        Index("ix_artifacts_session_id", "session_id"),
        Index("ix_artifacts_path", "path"),
    )

    artifact_id: Mapped[str] = mapped_column(Text, primary_key=True)
    session_id: Mapped[str] = mapped_column(Text, ForeignKey("sessions.session_id"))
    agent_id: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(Text)
    node_id: Mapped[str | None] = mapped_column(Text)
    tool_call_id: Mapped[str | None] = mapped_column(Text)
    path: Mapped[str] = mapped_column(Text)
    filename: Mapped[str | None] = mapped_column(Text)
    mime_type: Mapped[str | None] = mapped_column(Text)
    size_bytes: Mapped[int | None] = mapped_column(INTEGER)
    summary: Mapped[str | None] = mapped_column(Text)
    metadata_json: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(Text)


class SessionFile(Base):
    """Where a session's pair lives; no row means the session has no pair yet (never written)."""

    __tablename__ = "session_files"
    __table_args__ = (Index("ix_session_files_file", "file"), {"sqlite_with_rowid": False})

    session_id: Mapped[str] = mapped_column(
        Text, ForeignKey("sessions.session_id"), primary_key=True
    )
    file: Mapped[str] = mapped_column(Text)
    """``main`` (the database itself), or a shard file's path relative to the home."""
    epoch: Mapped[int] = mapped_column(Integer)
    """Grows by one with every move of the pair between files."""


class SessionMove(Base):
    """The journal of moves of a pair between files that are under way (normally empty)."""

    __tablename__ = "session_moves"
    __table_args__ = ({"sqlite_with_rowid": False},)

    session_id: Mapped[str] = mapped_column(Text, primary_key=True)
    source: Mapped[str] = mapped_column(Text)
    target: Mapped[str] = mapped_column(Text)
    epoch: Mapped[int] = mapped_column(Integer)


class ShardFile(Base):
    """One shard file: how many pairs it was given and the pair revision its pairs have."""

    __tablename__ = "shard_files"
    __table_args__ = ({"sqlite_with_rowid": False},)

    file: Mapped[str] = mapped_column(Text, primary_key=True)
    sessions: Mapped[int] = mapped_column(Integer)
    rev: Mapped[int] = mapped_column(Integer)


class SessionKey(Base):
    """An outside name of a session (an SDK's session id, an imported file's conversation).

    Written in the transaction that creates the session it names, so two processes asking for
    the same name find one session; it goes with its session.
    """

    __tablename__ = "session_keys"
    __table_args__ = (Index("ix_session_keys_session_id", "session_id"),)

    namespace: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    session_id: Mapped[str] = mapped_column(
        Text, ForeignKey("sessions.session_id", ondelete="CASCADE")
    )
    created_at: Mapped[str] = mapped_column(Text)


sessions_table = cast(Table, Session.__table__)
agents_table = cast(Table, Agent.__table__)
runs_table = cast(Table, Run.__table__)
artifacts_table = cast(Table, Artifact.__table__)
session_files_table = cast(Table, SessionFile.__table__)
session_moves_table = cast(Table, SessionMove.__table__)
shard_files_table = cast(Table, ShardFile.__table__)


session_keys_table = cast(Table, SessionKey.__table__)
