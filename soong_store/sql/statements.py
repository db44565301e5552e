"""The prepared statements of the session writer: built once per session and dialect.

SQLAlchemy Core builds each statement from the table definitions; :class:`~soong_store.sql.
prepared.Prepared` compiles it once for the dialect, so the writer's hot path only binds values
and runs them on the driver's cursor. The statements over a session's own tables are cached per
session id, as many as the catalog keeps tables for (:data:`~soong_store.schema.catalog.
CACHE_SIZE`). The session's row comes with what a node append needs next (both counters,
whether the active node has a child) in one statement: on this machine a statement run right
after the file fsync of a spilled artifact costs ~45 µs, so each one saved counts.

Compiling a new session's statements cost ~40% of a bulk build's writer time (each session's
tables are new to every statement cache), so they are compiled once per dialect for the template
session of :mod:`~soong_store.sql.pair_text` and the template's id replaced by the session's in
the SQL text (parameters unchanged), for the ids that template stands for; any other id has its
statements compiled from the factory's tables.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache

from sqlalchemy import bindparam, exists, func, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ClauseElement

from soong_store.schema.catalog import CACHE_SIZE, session_tables
from soong_store.schema.models import agents_table, artifacts_table, runs_table, sessions_table
from soong_store.sql.pair_text import TEMPLATE, templated
from soong_store.sql.prepared import Prepared

_AGENT = select(agents_table).where(agents_table.c.agent_id == bindparam("p_agent"))
_RUN = select(runs_table).where(runs_table.c.run_id == bindparam("p_run"))
_ARTIFACT_OWNER = select(artifacts_table.c.session_id).where(
    artifacts_table.c.artifact_id == bindparam("p_artifact")
)
_MOVE_SESSION = (
    update(sessions_table)
    .where(sessions_table.c.session_id == bindparam("p_session"))
    .values(active_node_id=bindparam("p_active"), updated_at=bindparam("p_now"))
)
RUN_FIELDS = [c.name for c in runs_table.c if c.name not in ("run_id", "created_at")]
"""The columns of ``runs`` a writer writes back (all but the key and the creation time)."""
_UPDATE_RUN = (
    update(runs_table)
    .where(runs_table.c.run_id == bindparam("p_run"))
    .values({name: bindparam(f"p_{name}") for name in RUN_FIELDS})
)


MAX_NODE_SEQ = "max_node_seq"
"""The label of the session's largest ``node_seq`` in the session statement's row."""
MAX_SEQ = "max_seq"
"""The label of the session's largest ``seq``."""
ACTIVE_HAS_CHILD = "active_has_child"
"""The label of whether the session's active node has a child."""


@dataclass(frozen=True, slots=True)
class SessionStatements:
    """The prepared statements over one session's tables and the global ones."""

    session: Prepared
    agent: Prepared
    run: Prepared
    artifact_owner: Prepared
    move_session: Prepared
    update_run: Prepared
    insert_artifact: Prepared
    node_exists: Prepared
    has_child: Prepared
    root_of_agent: Prepared
    latest_of_agent: Prepared
    max_run_seq: Prepared
    insert_node: Prepared
    insert_event: Prepared


@lru_cache(maxsize=CACHE_SIZE)
def session_statements(session_id: str, dialect: Dialect) -> SessionStatements:
    """The writer's statements over ``session_id``'s tables and the global ones, ready to run."""
    if not templated(dialect, session_id):
        return compiled(session_id, dialect)
    template = _template(dialect)
    made = {
        f.name: replace(p, sql=p.sql.replace(TEMPLATE, session_id))
        for f in fields(SessionStatements)
        if TEMPLATE in (p := getattr(template, f.name)).sql
    }
    return replace(template, **made)


@lru_cache(maxsize=4)
def _template(dialect: Dialect) -> SessionStatements:
    return compiled(TEMPLATE, dialect)


def compiled(session_id: str, dialect: Dialect) -> SessionStatements:
    """The writer's statements over ``session_id``'s tables and the global ones, compiled."""
    tables = session_tables(session_id)
    nodes, events = tables.nodes, tables.events

    def prepare(statement: ClauseElement) -> Prepared:
        return Prepared.compile(statement, dialect)

    active_has_child = exists().where(nodes.c.parent_id == sessions_table.c.active_node_id)
    session = select(
        sessions_table,
        select(func.max(nodes.c.node_seq)).scalar_subquery().label(MAX_NODE_SEQ),
        select(func.max(events.c.seq)).scalar_subquery().label(MAX_SEQ),
        active_has_child.label(ACTIVE_HAS_CHILD),
    ).where(sessions_table.c.session_id == bindparam("p_session"))
    return SessionStatements(
        session=prepare(session),
        agent=prepare(_AGENT),
        run=prepare(_RUN),
        artifact_owner=prepare(_ARTIFACT_OWNER),
        move_session=prepare(_MOVE_SESSION),
        update_run=prepare(_UPDATE_RUN),
        insert_artifact=prepare(artifacts_table.insert()),
        node_exists=prepare(select(nodes.c.node_id).where(nodes.c.node_id == bindparam("p_node"))),
        has_child=prepare(
            select(nodes.c.node_id).where(nodes.c.parent_id == bindparam("p_node")).limit(1)
        ),
        root_of_agent=prepare(
            select(nodes.c.node_id)
            .where(nodes.c.parent_id.is_(None), nodes.c.agent_id == bindparam("p_agent"))
            .limit(1)
        ),
        latest_of_agent=prepare(
            select(nodes.c.node_id)
            .where(nodes.c.agent_id == bindparam("p_agent"))
            .order_by(nodes.c.node_seq.desc())
            .limit(1)
        ),
        max_run_seq=prepare(
            select(func.max(events.c.run_seq)).where(events.c.run_id == bindparam("p_run"))
        ),
        insert_node=prepare(nodes.insert()),
        insert_event=prepare(events.insert()),
    )
