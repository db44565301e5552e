"""The global tables: SQLAlchemy Core tables on :data:`metadata`, Alembic's ``target_metadata``.

Core tables, not ORM models: nothing here maps rows to objects, and importing the ORM would cost
every command of the CLI about 100 ms.

Columns are exactly the seed's (names, types, NULL-ability). CHECK constraints guard every enum
column, foreign keys tie agents, runs and artifacts to their session, and indexes serve the
listings (sessions by ``updated_at``, agents and runs by session) and the foreign-key lookups a
``create_session`` makes (``sessions.root_agent_id``, ``agents.parent_agent_id``: without them each
insert of a session scans both tables). The catalog's tables (``session_files``,
``session_moves``, ``shard_files``) say where each session's pair lives; only
:mod:`soong_store.catalog.lookup` reads them. Two foreign keys are deferred to
commit because they form cycles: a session names its root agent, which names its session; an
agent names the run that created it, which names an agent.

Integer columns are :data:`INTEGER`: SQLite's ``INTEGER`` and PostgreSQL's ``BIGINT``, so that
both hold the same 64-bit range (PostgreSQL's ``INTEGER`` stops at 2**31 - 1).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    column,
)

from soong_store.model.enums import AgentStatus, AgentType, EndReason, RunStatus, SessionStatus

INTEGER = Integer().with_variant(BigInteger(), "postgresql")
"""A 64-bit integer column on every backend."""

_T = TypeVar("_T")

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


metadata = MetaData(naming_convention=NAMING_CONVENTION)
"""The global tables, with a naming convention Alembic can rely on."""


def _named(column: Column[_T], name: str) -> Column[_T]:
    # A plain ``str`` name, not the ``quoted_name`` ``Column(name)`` makes: rows read from these
    # tables are keyed by it, and orjson refuses a ``str`` subclass as a key (an export).
    column.name = column.key = name
    return column


def _text(name: str, *args: ForeignKey, nullable: bool = False, key: bool = False) -> Column[str]:
    return _named(Column(Text, *args, nullable=nullable, primary_key=key), name)


def _int(name: str, *, nullable: bool = False, wide: bool = True) -> Column[int]:
    return _named(Column(INTEGER if wide else Integer(), nullable=nullable), name)


def _deferred(target: str) -> ForeignKey:
    return ForeignKey(target, deferrable=True, initially="DEFERRED", use_alter=True)


def _owner_indexes() -> tuple[Index, ...]:
    owner, key = column("owner", Text), column("key", Text)
    return (
        # The listings of one owner's or one folder's sessions, newest first with the key cursor.
        Index("ix_sessions_owner_updated_at", "owner", "updated_at", "session_id"),
        Index("ix_sessions_cwd_updated_at", "cwd", "updated_at", "session_id"),
        # A key is unique per owner, sessions without an owner included: NULLs are distinct in
        # a unique index, so the sessions without an owner have an index of their own. Partial
        # indexes (not one on an expression): both databases refuse the clash, and both reflect
        # them, so autogenerate sees no drift. PostgreSQL's predicate, the same, is given by
        # with_postgresql_options().
        Index(
            "uq_sessions_owner_key", "owner", "key", unique=True, sqlite_where=owner.is_not(None)
        ),
        Index(
            "uq_sessions_key_without_owner",
            "key",
            unique=True,
            sqlite_where=owner.is_(None) & key.is_not(None),
        ),
    )


SESSION_OWNER_INDEXES = _owner_indexes()
"""The indexes of ``sessions.owner`` and ``sessions.key`` (made by revision 0009)."""


def with_postgresql_options() -> None:
    """Give the partial indexes their ``postgresql_where``: SQLite's predicate (idempotent).

    Not given where they are defined because naming a ``postgresql_*`` option makes SQLAlchemy
    load its PostgreSQL dialect, some 18 ms of every new process, which a process on SQLite never
    uses. The PostgreSQL backend calls this when it is configured and Alembic's environment when
    it starts (autogenerate renders these options whatever the database), so the indexes are
    never compiled, compared or rendered for PostgreSQL without it.
    """
    for index in SESSION_OWNER_INDEXES:
        index.dialect_kwargs["postgresql_where"] = index.dialect_options["sqlite"]["where"]


sessions_table = Table(
    "sessions",
    metadata,
    _text("session_id", key=True),
    _text("cwd"),
    _text("root_agent_id", _deferred("agents.agent_id")),
    _text("active_node_id", nullable=True),
    _text("parent_session_id", nullable=True),
    _text("status"),
    _text("metadata_json", nullable=True),
    _text("created_at"),
    _text("updated_at"),
    _text("owner", nullable=True),
    _text("key", nullable=True),
    _one_of("status", SessionStatus),
    Index("ix_sessions_updated_at", "updated_at"),
    Index("ix_sessions_status_updated_at", "status", "updated_at"),
    Index("ix_sessions_root_agent_id", "root_agent_id"),
    *SESSION_OWNER_INDEXES,
)
"""One conversation: the container of an agent tree, its nodes and its events.

``owner`` (a user or tenant) and ``key`` (an application's own name for the session, unique per
owner): see :data:`SESSION_OWNER_INDEXES` for how they are indexed.
"""

agents_table = Table(
    "agents",
    metadata,
    _text("agent_id", key=True),
    _text("session_id", ForeignKey("sessions.session_id")),
    _text("parent_agent_id", ForeignKey("agents.agent_id"), nullable=True),
    _text("agent_type"),
    _text("created_by_run_id", _deferred("runs.run_id"), nullable=True),
    _text("fork_from_node_id", nullable=True),
    _text("status"),
    _text("result_json", nullable=True),
    _text("metadata_json", nullable=True),
    _text("created_at"),
    _text("updated_at"),
    _one_of("agent_type", AgentType),
    _one_of("status", AgentStatus),
    Index("ix_agents_session_id", "session_id"),
    Index("ix_agents_parent_agent_id", "parent_agent_id"),
)
"""An agent of a session: the root (main/orchestrator) or a child (sub/fork)."""

runs_table = Table(
    "runs",
    metadata,
    _text("run_id", key=True),
    _text("session_id", ForeignKey("sessions.session_id")),
    _text("agent_id", ForeignKey("agents.agent_id")),
    _text("status"),
    _text("start_node_id", nullable=True),
    _text("end_node_id", nullable=True),
    _text("end_reason", nullable=True),
    _int("turn_count", nullable=True),
    _text("usage_json", nullable=True),
    _text("error_json", nullable=True),
    _text("metadata_json", nullable=True),
    _text("created_at"),
    _text("updated_at"),
    _one_of("status", RunStatus),
    _one_of("end_reason", EndReason, nullable=True),
    CheckConstraint("turn_count IS NULL OR turn_count >= 0", name="turn_count"),
    Index("ix_runs_session_id_status", "session_id", "status"),
    Index("ix_runs_agent_id", "agent_id"),
)
"""One loop execution of an agent within its session."""

artifacts_table = Table(
    "artifacts",
    metadata,
    _text("artifact_id", key=True),
    _text("session_id", ForeignKey("sessions.session_id")),
    _text("agent_id", nullable=True),
    _text("run_id", nullable=True),
    _text("node_id", nullable=True),
    _text("tool_call_id", nullable=True),
    _text("path"),
    _text("filename", nullable=True),
    _text("mime_type", nullable=True),
    _int("size_bytes", nullable=True),
    _text("summary", nullable=True),
    _text("metadata_json", nullable=True),
    _text("created_at"),
    CheckConstraint("size_bytes IS NULL OR size_bytes >= 0", name="size_bytes"),
    Index("ix_artifacts_session_id", "session_id"),
    Index("ix_artifacts_path", "path"),
)
"""A large payload kept as a file under the home's artifact folder."""

session_files_table = Table(
    "session_files",
    metadata,
    _text("session_id", ForeignKey("sessions.session_id"), key=True),
    # ``main`` (the database itself), or a shard file's path relative to the home.
    _text("file"),
    # Grows by one with every move of the pair between files.
    _int("epoch", wide=False),
    Index("ix_session_files_file", "file"),
    sqlite_with_rowid=False,
)
"""Where a session's pair lives; no row means the session has no pair yet (never written)."""

session_moves_table = Table(
    "session_moves",
    metadata,
    _text("session_id", key=True),
    _text("source"),
    _text("target"),
    _int("epoch", wide=False),
    sqlite_with_rowid=False,
)
"""The journal of moves of a pair between files that are under way (normally empty)."""

shard_files_table = Table(
    "shard_files",
    metadata,
    _text("file", key=True),
    _int("sessions", wide=False),
    _int("rev", wide=False),
    sqlite_with_rowid=False,
)
"""One shard file: how many pairs it was given and the pair revision its pairs have."""

home_identity_table = Table(
    "home_identity",
    metadata,
    _text("home_id", key=True),
    sqlite_with_rowid=False,
)
"""The home's random id (one row), written into every shard file it makes (``shard_home``)."""

session_keys_table = Table(
    "session_keys",
    metadata,
    _text("namespace", key=True),
    _text("key", key=True),
    _text("session_id", ForeignKey("sessions.session_id", ondelete="CASCADE")),
    _text("created_at"),
    Index("ix_session_keys_session_id", "session_id"),
)
"""An outside name of a session (an SDK's session id, an imported file's conversation).

Written in the transaction that creates the session it names, so two processes asking for the
same name find one session; it goes with its session.
"""

keyed_states_table = Table(
    "keyed_states",
    metadata,
    _text("namespace", key=True),
    _text("key", key=True),
    _text("state_json"),
    _named(Column(Double(), nullable=False), "update_time"),
    _text("node_id", nullable=True),
    sqlite_with_rowid=False,
)
"""A state an integration keeps under an outside name, beside the sessions it is shared by.

Google ADK's app and user state (one row per app, per app and user) and each ADK session's own
state: written in the transaction of the event whose delta changes it. ``update_time`` is the
framework's own clock value (seconds, a float kept exactly), not the store's. ``node_id``: the
newest node of a session's state (an ADK session's events are the path up from it).
"""

run_usage_table = Table(
    "run_usage",
    metadata,
    _text("run_id", ForeignKey("runs.run_id", ondelete="CASCADE"), key=True),
    _named(Column(Integer(), primary_key=True, autoincrement=False), "entry"),
    _text("session_id"),
    _text("created_at"),
    _text("model", nullable=True),
    _int("input_tokens", nullable=True),
    _int("output_tokens", nullable=True),
    _int("cache_read_tokens", nullable=True),
    _int("cache_write_tokens", nullable=True),
    _named(Column(Double(), nullable=True), "cost_usd"),
    _int("first_of_run", wide=False),
    _int("first_of_model", wide=False),
    CheckConstraint("first_of_run IN (0, 1) AND first_of_model IN (0, 1)", name="first"),
    Index("ix_run_usage_created_at", "created_at"),
    Index("ix_run_usage_session_id", "session_id"),
)
"""The usage ledger: one row per entry of a run's ``usage`` (one model call), kept with the run.

Written in the transaction that writes the run's usage, and gone with the run, so that
``store.usage()`` sums on the database. ``session_id`` and ``created_at`` (the run's) are
copied from the run: a report by day or by session reads this table alone. ``first_of_run``
is 1 on a run's first entry, ``first_of_model`` on its first entry of each model: summed, they
count runs per group without a ``COUNT(DISTINCT run_id)`` (which costs PostgreSQL a sort).
"""
