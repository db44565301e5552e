"""The prepared statements of the session writer: each compiled at its first use, per dialect.

Each statement is built from the table definitions, by SQLAlchemy Core or, for those a first
write runs on a dialect whose placeholders are bare (SQLite), as SQL text written from the same
names (compiling Core's took ~2.5 ms of a new process's first write); :class:`~soong_store.sql.
prepared.Prepared` compiles it once for the dialect, so the writer's hot path only binds values
and runs them on the driver's cursor. The statements over a session's own tables are cached per
session id, as many as the catalog keeps tables for (:data:`~soong_store.catalog.lookup.
CACHE_SIZE`). The session's row comes with what a node append needs next (both counters,
whether the active node has a child of the root agent) in one statement: on this machine a
statement run right after the file fsync of a spilled artifact costs ~45 µs, so each one saved
counts.

Compiling a new session's statements cost ~40% of a bulk build's writer time (each session's
tables are new to every statement cache), so they are compiled once per dialect for the template
session of :mod:`~soong_store.catalog.pair_text` and the template's id replaced by the session's in
the SQL text (parameters unchanged), for the ids that template stands for; any other id has its
statements compiled from the factory's tables. Compiling all fourteen (then) took ~4.5 ms of a new
process's first append, which runs four or five of them: each is compiled when first asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from typing import Any, overload

from sqlalchemy import Integer, bindparam, exists, func, literal_column, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ClauseElement

from soong_store.backends.prepared import Prepared, bare_binds
from soong_store.catalog.pair_text import TEMPLATE, templated
from soong_store.schema.session_tables import CACHE_SIZE, SessionTables, session_table_names
from soong_store.schema.session_tables import session_tables as _session_tables
from soong_store.schema.tables import agents_table, artifacts_table, runs_table, sessions_table

RUN_FIELDS = [c.name for c in runs_table.c if c.name not in ("run_id", "created_at")]
"""The columns of ``runs`` a writer writes back (all but the key and the creation time)."""
MAX_NODE_SEQ = "max_node_seq"
"""The label of the session's largest ``node_seq`` in the session statement's row."""
MAX_SEQ = "max_seq"
"""The label of the session's largest ``seq``."""
ACTIVE_HAS_CHILD = "active_has_child"
"""The label of whether the session's active node has a child of the root agent (whose next
node goes under it): the branch rule counts the children of the same agent only."""


def session_select(tables: SessionTables) -> ClauseElement:
    """The session statement in Core: what dialects that cast their values compile."""
    nodes, events = tables.nodes, tables.events
    has_child = exists().where(
        nodes.c.parent_id == sessions_table.c.active_node_id,
        nodes.c.agent_id == sessions_table.c.root_agent_id,
    )
    return select(
        sessions_table,
        select(func.max(nodes.c.node_seq)).scalar_subquery().label(MAX_NODE_SEQ),
        select(func.max(events.c.seq)).scalar_subquery().label(MAX_SEQ),
        has_child.label(ACTIVE_HAS_CHILD),
    ).where(sessions_table.c.session_id == bindparam("p_session"))


def _session(tables: SessionTables, dialect: Dialect) -> Prepared:
    """The session's row, its two largest numbers and whether its active node has a root child.

    A root child: a child of the root agent, whose next node goes under the active node.

    Written as text where binds are bare: compiling :func:`session_select` was ~1 ms of a
    new process's first write.
    """
    if not bare_binds(dialect):
        return Prepared.compile(session_select(tables), dialect)
    nodes, events = tables.nodes, tables.events
    preparer = dialect.identifier_preparer
    quote = preparer.quote
    sessions, node_table, event_table = map(preparer.format_table, (sessions_table, nodes, events))
    columns = [column.name for column in sessions_table.c]
    listed = ", ".join(f"{sessions}.{quote(name)}" for name in columns)
    active = f"{sessions}.{quote('active_node_id')}"
    root_agent = f"{sessions}.{quote('root_agent_id')}"
    sql = (
        f"SELECT {listed},"
        f" (SELECT max({quote('node_seq')}) FROM {node_table}) AS {MAX_NODE_SEQ},"
        f" (SELECT max({quote('seq')}) FROM {event_table}) AS {MAX_SEQ},"
        f" EXISTS (SELECT 1 FROM {node_table} WHERE {node_table}.{quote('parent_id')} = {active}"
        f" AND {node_table}.{quote('agent_id')} = {root_agent}) AS {ACTIVE_HAS_CHILD}"
        f" FROM {sessions} WHERE {sessions}.{quote('session_id')} = :p_session"
    )
    return Prepared.written(sql, dialect, (*columns, MAX_NODE_SEQ, MAX_SEQ, ACTIVE_HAS_CHILD))


def move_session_update() -> ClauseElement:
    """The session's new active node and ``updated_at``, in Core."""
    return (
        update(sessions_table)
        .where(sessions_table.c.session_id == bindparam("p_session"))
        .values(active_node_id=bindparam("p_active"), updated_at=bindparam("p_now"))
    )


def _move_session(dialect: Dialect) -> Prepared:
    """:func:`move_session_update`, written as Core renders it where binds are bare."""
    if not bare_binds(dialect):
        return Prepared.compile(move_session_update(), dialect)
    preparer = dialect.identifier_preparer
    quote = preparer.quote
    sessions = preparer.format_table(sessions_table)
    sql = (
        f"UPDATE {sessions} SET {quote('active_node_id')}=:p_active, {quote('updated_at')}=:p_now"
        f" WHERE {sessions}.{quote('session_id')} = :p_session"
    )
    return Prepared.written(sql, dialect)


def climb_calls_select(tables: SessionTables) -> ClauseElement:
    """Up to ``:p_steps`` nodes from ``:p_node`` up its parent chain, nearest first.

    Each row is ``(node_id, parent_id, content_json)``: what the tool rules read of the nodes
    above a tool result. Each step must reach a node numbered before the one below it, so a
    damaged chain that loops ends.
    """
    nodes = tables.nodes
    start = (
        select(
            nodes.c.node_id, nodes.c.parent_id, nodes.c.node_seq, literal_column("1").label("depth")
        )
        .where(nodes.c.node_id == bindparam("p_node"))
        .cte("up", recursive=True)
    )
    above = nodes.alias("above")
    up = start.union_all(
        select(
            above.c.node_id,
            above.c.parent_id,
            above.c.node_seq,
            start.c.depth + literal_column("1"),
        ).where(
            above.c.node_id == start.c.parent_id,
            above.c.node_seq < start.c.node_seq,
            start.c.depth < bindparam("p_steps", type_=Integer),
        )
    )
    return (
        select(nodes.c.node_id, nodes.c.parent_id, nodes.c.content_json)
        .select_from(nodes.join(up, nodes.c.node_id == up.c.node_id))
        .order_by(up.c.depth)
    )


_Global = Callable[[Dialect], Prepared]
_OfSession = Callable[[SessionTables, Dialect], Prepared]


def _core(build: Callable[[], ClauseElement]) -> _Global:
    return lambda dialect: Prepared.compile(build(), dialect)


def _core_of(build: Callable[[SessionTables], ClauseElement]) -> _OfSession:
    return lambda tables, dialect: Prepared.compile(build(tables), dialect)


_GLOBAL: dict[str, _Global] = {
    "agent": _core(
        lambda: select(agents_table).where(agents_table.c.agent_id == bindparam("p_agent"))
    ),
    "run": _core(lambda: select(runs_table).where(runs_table.c.run_id == bindparam("p_run"))),
    "artifact_owner": _core(
        lambda: select(artifacts_table.c.session_id).where(
            artifacts_table.c.artifact_id == bindparam("p_artifact")
        )
    ),
    "move_session": _move_session,
    "update_run": _core(
        lambda: (
            update(runs_table)
            .where(runs_table.c.run_id == bindparam("p_run"))
            .values({name: bindparam(f"p_{name}") for name in RUN_FIELDS})
        )
    ),
    "insert_artifact": lambda dialect: Prepared.insert(artifacts_table, dialect),
}
"""The statements over global tables only: the same for every session."""

_OF_SESSION: dict[str, _OfSession] = {
    "session": _session,
    "node_agent": _core_of(
        lambda t: select(t.nodes.c.agent_id).where(t.nodes.c.node_id == bindparam("p_node"))
    ),
    "has_child": _core_of(
        lambda t: (
            select(t.nodes.c.node_id)
            .where(
                t.nodes.c.parent_id == bindparam("p_node"),
                t.nodes.c.agent_id == bindparam("p_agent"),
            )
            .limit(1)
        )
    ),
    "root_of_agent": _core_of(
        lambda t: (
            select(t.nodes.c.node_id)
            .where(t.nodes.c.parent_id.is_(None), t.nodes.c.agent_id == bindparam("p_agent"))
            .limit(1)
        )
    ),
    "latest_of_agent": _core_of(
        lambda t: (
            select(t.nodes.c.node_id)
            .where(t.nodes.c.agent_id == bindparam("p_agent"))
            .order_by(t.nodes.c.node_seq.desc())
            .limit(1)
        )
    ),
    "node_calls": _core_of(
        lambda t: select(t.nodes.c.parent_id, t.nodes.c.content_json).where(
            t.nodes.c.node_id == bindparam("p_node")
        )
    ),
    "climb_calls": _core_of(climb_calls_select),
    "max_run_seq": _core_of(
        lambda t: select(func.max(t.events.c.run_seq)).where(
            t.events.c.run_id == bindparam("p_run")
        )
    ),
    "insert_node": lambda t, dialect: Prepared.insert(t.nodes, dialect),
    "insert_event": lambda t, dialect: Prepared.insert(t.events, dialect),
}
"""The statements over the session's own tables (and, for ``session``, the global ones)."""

NAMES = (*_OF_SESSION, *_GLOBAL)
"""The names of a session's statements, each an attribute of :class:`SessionStatements`."""


class _Statement:
    """An attribute of :class:`SessionStatements`: made at the first read, then held.

    A descriptor without ``__set__``: what :meth:`SessionStatements.prepared` puts in the
    instance's ``__dict__`` under the same name is what later reads find, at the cost of a
    plain attribute.
    """

    __slots__ = ("_name",)

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, statements: None, owner: type[Any]) -> _Statement: ...
    @overload
    def __get__(self, statements: SessionStatements, owner: type[Any]) -> Prepared: ...
    def __get__(self, statements: SessionStatements | None, owner: type[Any]) -> Any:
        return self if statements is None else statements.prepared(self._name)


class SessionStatements:
    """The prepared statements over one session's tables and the global ones.

    Threading contract: any thread may read them; two threads asking for the same statement
    first may both make it, and either one is kept (they are equal).
    """

    session = _Statement()
    agent = _Statement()
    run = _Statement()
    artifact_owner = _Statement()
    move_session = _Statement()
    update_run = _Statement()
    insert_artifact = _Statement()
    node_agent = _Statement()
    has_child = _Statement()
    root_of_agent = _Statement()
    latest_of_agent = _Statement()
    node_calls = _Statement()
    climb_calls = _Statement()
    max_run_seq = _Statement()
    insert_node = _Statement()
    insert_event = _Statement()

    def __init__(
        self, session_id: str, dialect: Dialect, template: SessionStatements | None = None
    ) -> None:
        self.session_id = session_id
        self._dialect = dialect
        self._template = template

    def prepared(self, name: str) -> Prepared:
        """The statement called ``name`` (one of :data:`NAMES`), made now if not yet."""
        held: Prepared | None = self.__dict__.get(name)
        if held is None:
            held = self.__dict__[name] = self._make(name)
        return held

    def _make(self, name: str) -> Prepared:
        of_session = _OF_SESSION.get(name)
        if of_session is None:
            return _global(name, self._dialect)
        if self._template is not None:
            made = self._template.prepared(name)
            return replace(made, sql=made.sql.replace(TEMPLATE, self.session_id))
        return of_session(_session_tables(self.session_id), self._dialect)


@lru_cache(maxsize=4 * len(_GLOBAL))
def _global(name: str, dialect: Dialect) -> Prepared:
    return _GLOBAL[name](dialect)


@lru_cache(maxsize=CACHE_SIZE)
def session_statements(session_id: str, dialect: Dialect) -> SessionStatements:
    """The writer's statements over ``session_id``'s tables and the global ones, ready to run.

    Raises ``InvalidIdentifier`` for an id the catalog refuses.
    """
    if not templated(dialect, session_id):
        return compiled(session_id, dialect)
    return SessionStatements(session_id, dialect, _template(dialect))


@lru_cache(maxsize=4)
def _template(dialect: Dialect) -> SessionStatements:
    return SessionStatements(TEMPLATE, dialect)


def compiled(session_id: str, dialect: Dialect) -> SessionStatements:
    """The writer's statements over ``session_id``'s tables and the global ones, compiled for it.

    Raises ``InvalidIdentifier`` for an id the catalog refuses.
    """
    session_table_names(session_id)  # validates the id now, not at the first statement
    return SessionStatements(session_id, dialect)
