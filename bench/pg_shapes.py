"""Shared parts of the PostgreSQL benchmarks: table shapes, a server URL, databases, statements.

The shapes are copies of the store's (``soong_store/schema/session_tables.py`` and the
``sessions`` model), written out in SQLAlchemy Core so that the benchmarks measure PostgreSQL
and psycopg 3, not the package. Three variants of a session's pair:

- ``store``: the factory's shape. ``nodes_<sid>``: PRIMARY KEY ``node_id``, UNIQUE ``node_seq``,
  an index on ``parent_id``, a deferred self-reference on ``parent_id``, four CHECKs;
  ``events_<sid>``: PRIMARY KEY ``event_id``, UNIQUE ``seq``, UNIQUE ``(run_id, run_seq)``, an
  index on ``node_id``, a deferred reference to the nodes, three CHECKs.
- ``nofk``: the factory's shape without its two foreign keys (each costs a constraint, four
  triggers and their catalog rows, and a check at every commit that inserts a child).
- ``lean``: only what the store's reads and seq assignment use. Nodes keep PRIMARY KEY
  ``node_id`` (lookups, the path walk) and UNIQUE ``node_seq`` (``max``, ordered scans, newest
  node of an agent) and index ``(parent_id, node_seq)`` (children in order, "has a child");
  events get PRIMARY KEY ``seq`` (``max``, the timeline, ``after_seq``) and UNIQUE
  ``(run_id, run_seq)`` (a run's timeline, its ``max``). Gone: the index and uniqueness of
  ``event_id`` (no read looks an event up by id), the index on ``events.node_id`` (only ``check``
  asks, and it reads whole tables), both foreign keys (the writer checks parents itself).
  CHECKs stay (they cost no relation).

The server is ``--url`` or ``$SOONG_STORE_TEST_PG_URL``; ``eval "$(bash .ci/postgres start)"``
starts a throwaway one and ``bash .ci/postgres stop`` ends it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
from collections.abc import Sequence

from sqlalchemy import (
    CheckConstraint,
    Column,
    Connection,
    Engine,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
)
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import SchemaItem

VARIANTS = ("store", "nofk", "lean")
ROLES = ("user", "assistant", "tool", "system")
NODE_TYPES = (
    "message",
    "skill_context",
    "memory_context",
    "compaction",
    "child_result",
    "plan_instruction",
    "task_instruction",
    "task_board",
    "system_note",
)
LEVELS = ("debug", "info", "warning", "error")
_MAX_NAME = 63


def server_url(given: str | None) -> str:
    """The server to measure, or exit saying how to start one."""
    url = given or os.environ.get("SOONG_STORE_TEST_PG_URL")
    if not url:
        sys.exit(
            'no server: pass --url, or run eval "$(bash .ci/postgres start)" first '
            "(and bash .ci/postgres stop after)"
        )
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def add_url_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="server URL (default: $SOONG_STORE_TEST_PG_URL)")


def on_database(url: str, database: str) -> str:
    return make_url(url).set(database=database).render_as_string(hide_password=False)


def ensure_database(url: str, database: str, *, fresh: bool = False) -> str:
    """Create ``database`` on the server if missing (dropped first if ``fresh``); its URL."""
    admin = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as connection:
            if fresh:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            found = connection.exec_driver_sql(
                "SELECT 1 FROM pg_database WHERE datname = %(name)s", {"name": database}
            ).first()
            if found is None:
                connection.exec_driver_sql(f'CREATE DATABASE "{database}"')
    finally:
        admin.dispose()
    return on_database(url, database)


def drop_database(url: str, database: str) -> None:
    admin = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    finally:
        admin.dispose()


def engine_for(url: str) -> Engine:
    return create_engine(url, poolclass=NullPool)


def sessions_table(metadata: MetaData) -> Table:
    """The global ``sessions`` table's shape (its reference to agents left out: no agents here)."""
    return Table(
        "sessions",
        metadata,
        Column("session_id", Text, primary_key=True),
        Column("cwd", Text, nullable=False),
        Column("root_agent_id", Text, nullable=False),
        Column("active_node_id", Text),
        Column("parent_session_id", Text),
        Column("status", Text, nullable=False),
        Column("metadata_json", Text),
        Column("created_at", Text, nullable=False),
        Column("updated_at", Text, nullable=False),
        CheckConstraint("status IN ('active', 'archived')", name="ck_sessions_status"),
        Index("ix_sessions_updated_at", "updated_at"),
        Index("ix_sessions_status_updated_at", "status", "updated_at"),
    )


def _one_of(column: str, values: Sequence[str]) -> CheckConstraint:
    listed = ", ".join(f"'{value}'" for value in values)
    return CheckConstraint(f"{column} IN ({listed})", name=f"ck_{column}")


def _name(table: str, suffix: str) -> str:
    name = f"{table}_{suffix}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(table.encode()).hexdigest()[:10]
    keep = _MAX_NAME - len(suffix) - len(digest) - 2
    return f"{table[:keep]}_{digest}_{suffix}"


def session_pair(session_id: str, variant: str) -> tuple[Table, Table]:
    """A session's two tables in ``variant``'s shape, on a MetaData of their own."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    full_keys = variant != "lean"
    metadata = MetaData()
    nodes_name, events_name = f"nodes_{session_id}", f"events_{session_id}"

    def reference() -> list[ForeignKey]:
        return (
            [ForeignKey(f"{nodes_name}.node_id", deferrable=True, initially="DEFERRED")]
            if variant == "store"
            else []
        )

    nodes = Table(
        nodes_name,
        metadata,
        Column("node_id", Text, primary_key=True),
        Column("node_seq", Integer, nullable=False),
        Column("parent_id", Text, *reference()),
        Column("agent_id", Text, nullable=False),
        Column("run_id", Text),
        Column("role", Text, nullable=False),
        Column("node_type", Text, nullable=False),
        Column("content_json", Text, nullable=False),
        Column("metadata_json", Text),
        Column("token_count", Integer),
        Column("created_at", Text, nullable=False),
        UniqueConstraint("node_seq", name=_name(nodes_name, "node_seq_uq")),
        _one_of("role", ROLES),
        _one_of("node_type", NODE_TYPES),
        CheckConstraint("node_seq >= 1", name="ck_node_seq"),
        CheckConstraint("token_count IS NULL OR token_count >= 0", name="ck_token_count"),
        Index(_name(nodes_name, "parent_id_ix"), "parent_id", *([] if full_keys else ["node_seq"])),
    )
    events_keys: list[SchemaItem] = (
        [
            UniqueConstraint("seq", name=_name(events_name, "seq_uq")),
            Index(_name(events_name, "node_id_ix"), "node_id"),
        ]
        if full_keys
        else [PrimaryKeyConstraint("seq", name=_name(events_name, "pkey"))]
    )
    events = Table(
        events_name,
        metadata,
        Column("event_id", Text, primary_key=full_keys, nullable=False),
        Column("seq", Integer, nullable=False, autoincrement=False),
        Column("run_seq", Integer),
        Column("agent_id", Text),
        Column("run_id", Text),
        Column("level", Text, nullable=False),
        Column("event_type", Text, nullable=False),
        Column("node_id", Text, *reference()),
        Column("tool_call_id", Text),
        Column("payload_json", Text),
        Column("created_at", Text, nullable=False),
        *events_keys,
        UniqueConstraint("run_id", "run_seq", name=_name(events_name, "run_seq_uq")),
        _one_of("level", LEVELS),
        CheckConstraint("seq >= 1", name="ck_seq"),
        CheckConstraint("(run_id IS NULL) = (run_seq IS NULL)", name="ck_run_seq"),
    )
    return nodes, events


def create_pair(connection: Connection, session_id: str, variant: str) -> tuple[Table, Table]:
    nodes, events = session_pair(session_id, variant)
    nodes.create(connection)
    events.create(connection)
    return nodes, events


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f}"


def summary(samples: Sequence[float]) -> tuple[float, float]:
    """Median and 90th percentile."""
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return statistics.median(ordered), p90


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table, columns padded."""
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in cells
    ]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)
