"""Rows and queries of the PostgreSQL benchmarks, over the shapes of ``pg_shapes.py``."""

from __future__ import annotations

import secrets
from typing import Any

from pg_shapes import engine_for, session_pair, sessions_table
from sqlalchemy import Connection, MetaData, Select, Table, insert, literal, select, text
from sqlalchemy.schema import CreateIndex, CreateTable

SESSIONS = sessions_table(MetaData())
NOW = "2026-12-01T00:00:00.000000+00:00"
CATALOGS = (
    "pg_class",
    "pg_attribute",
    "pg_type",
    "pg_constraint",
    "pg_index",
    "pg_depend",
    "pg_trigger",
)
CONTENT = '[{"type":"text","text":"a short message of an ordinary length, one block"}]'


def new_session_id() -> str:
    """A session id of the store's format (random time part, 8 hex digits)."""
    return f"sess_20261201_{secrets.randbelow(10**6):06d}_{secrets.token_hex(4)}"


def session_row(session_id: str) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "cwd": "/srv/project",
        "root_agent_id": "agent_" + session_id[5:],
        "status": "active",
        "created_at": NOW,
        "updated_at": NOW,
    }


def node_row(node_id: str, node_seq: int, parent: str | None, agent: str) -> dict[str, Any]:
    return {
        "node_id": node_id,
        "node_seq": node_seq,
        "parent_id": parent,
        "agent_id": agent,
        "role": "user",
        "node_type": "message",
        "content_json": CONTENT,
        "created_at": NOW,
    }


def event_row(node_id: str, seq: int) -> dict[str, Any]:
    """The ``node_created`` event of ``node_id``."""
    return {
        "event_id": "evt" + node_id[4:],
        "seq": seq,
        "level": "info",
        "event_type": "node_created",
        "node_id": node_id,
        "created_at": NOW,
    }


def ddl_text(connection: Connection, session_id: str, variant: str) -> str:
    """The DDL of one pair as one string of statements."""
    nodes, events = session_pair(session_id, variant)
    parts: list[str] = []
    for t in (nodes, events):
        parts.append(str(CreateTable(t).compile(dialect=connection.dialect)))
        parts.extend(str(CreateIndex(i).compile(dialect=connection.dialect)) for i in t.indexes)
    return ";\n".join(parts)


def fill(connection: Connection, session_id: str, variant: str) -> str:
    """Give an empty session a 5-node chain and an event per node; return the leaf's id."""
    nodes, events = session_pair(session_id, variant)
    existing = connection.execute(
        select(nodes.c.node_id).order_by(nodes.c.node_seq.desc()).limit(1)
    ).scalar()
    if existing is not None:
        connection.rollback()
        return str(existing)
    parent = None
    for seq in range(1, 6):
        node_id = f"node_{session_id[-8:]}_{seq}"
        connection.execute(insert(nodes), node_row(node_id, seq, parent, "agent_x"))
        connection.execute(insert(events), event_row(node_id, seq))
        parent = node_id
    connection.commit()
    assert parent is not None
    return parent


def path_query(nodes: Table, leaf: str) -> Select[Any]:
    """The store's active-path query shape: a recursive walk up ``parent_id``, root first."""
    start = select(
        nodes.c.node_id, nodes.c.parent_id, nodes.c.node_seq, literal(0).label("depth")
    ).where(nodes.c.node_id == leaf)
    path = start.cte("path", recursive=True)
    step = (
        select(
            nodes.c.node_id, nodes.c.parent_id, nodes.c.node_seq, (path.c.depth + 1).label("depth")
        )
        .join(path, nodes.c.node_id == path.c.parent_id)
        .where(nodes.c.node_seq < path.c.node_seq)
    )
    path = path.union_all(step)
    return select(nodes).join(path, nodes.c.node_id == path.c.node_id).order_by(path.c.depth.desc())


def catalog_counts(connection: Connection) -> dict[str, int]:
    sql = " UNION ALL ".join(f"SELECT '{c}', count(*) FROM {c}" for c in CATALOGS)
    return {name: int(n) for name, n in connection.exec_driver_sql(sql)}


def pair_size(connection: Connection, session_id: str) -> int:
    return int(
        connection.execute(
            text("SELECT pg_total_relation_size(:n) + pg_total_relation_size(:e)"),
            {"n": f"nodes_{session_id}", "e": f"events_{session_id}"},
        ).scalar_one()
    )


def objects_of_pair(connection: Connection, session_id: str) -> list[tuple[str, str, int]]:
    """Every relation of one pair (tables, their TOAST tables and indexes) and its size."""
    rows = connection.execute(
        text(
            """
            WITH t AS (
                SELECT oid, reltoastrelid FROM pg_class WHERE relname IN (:n, :e)
            ), rels AS (
                SELECT oid FROM t
                UNION ALL SELECT reltoastrelid FROM t WHERE reltoastrelid <> 0
                UNION ALL SELECT indexrelid FROM pg_index
                    WHERE indrelid IN (SELECT oid FROM t)
                       OR indrelid IN (SELECT reltoastrelid FROM t)
            )
            SELECT c.relname, c.relkind, pg_relation_size(c.oid)
            FROM pg_class c JOIN rels USING (oid) ORDER BY c.relkind DESC, c.relname
            """
        ),
        {"n": f"nodes_{session_id}", "e": f"events_{session_id}"},
    )
    return [(str(a), str(b), int(c)) for a, b, c in rows]


def shared_keys(url: str, count: int) -> tuple[int, int]:
    """Pairs of ``count`` session ids of the store's format that share a lock key (32, 64 bit)."""
    key_pairs = """
        WITH ids AS (
            SELECT 'sess_20261201_' || lpad((i % 1000000)::text, 6, '0') || '_'
                   || substr(md5(i::text), 1, 4) AS sid
            FROM generate_series(1, :count) AS i
        )
        SELECT coalesce(sum(n * (n - 1) / 2), 0) FROM (
            SELECT count(*) AS n FROM ids GROUP BY {key} HAVING count(*) > 1
        ) AS shared
    """
    engine = engine_for(url)
    with engine.connect() as connection:
        found = [
            int(connection.execute(text(key_pairs.format(key=key)), {"count": count}).scalar_one())
            for key in ("hashtext(sid)", "hashtextextended(sid, 0)")
        ]
    engine.dispose()
    return found[0], found[1]
