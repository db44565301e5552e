"""The raw ``sqlite3`` baseline: the store's statements without the store, on its own table shapes.

The store's tables are never described here: :func:`clone` copies their DDL (tables and indexes,
as ``sqlite_master`` holds them) from a database the store made, so a change of shape in the
store (``WITHOUT ROWID``, fewer indexes) reaches the baseline by itself. What is written here
is the statements, as the store runs them today:

- an append (:meth:`RawWriter.append`): ``BEGIN IMMEDIATE``; the session row with
  ``max(node_seq)``, ``max(seq)`` and whether the active node has a child; the node insert; the
  ``node_created`` event insert; the node's ``search_text`` row (its text found with the store's
  :func:`soong_store.search.index.node_text`), and every 64 of those the store's own statements that
  take the waiting rows into the FTS5 index (:mod:`soong_store.backends.sqlite.search`); the
  session's active node and ``updated_at``; ``COMMIT``. WAL, ``foreign_keys=ON``,
  ``temp_store=MEMORY`` like the store's write connection, ``synchronous`` NORMAL or FULL like the
  store's two durabilities;
- the active path (:func:`active_path`): the session row, then the recursive CTE of the read
  path, every column, then each row decoded (``orjson.loads`` of its JSON columns) into a dict;
- a timeline page (:func:`timeline_page`): the session row, ``seq > ? ORDER BY seq LIMIT ?``,
  decoded the same way.

Reads run on the store's own file (read-only), so both sides read the same pages. Where a
session's tables live is found by looking (:func:`locate`): in ``sessions.sqlite`` today, maybe
in a shard file of the home later. This module is the one place of the bench that knows table
names.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from soong_store.backends.sqlite.search import CATCH_UP, CATCH_UP_AT
from soong_store.search.index import node_text

JSON_COLUMNS = ("content_json", "metadata_json", "payload_json")
_FTS = "search_fts"
"""The store's full-text index (a virtual table: its DDL makes its shadow tables)."""
_SEARCH_ROW = (
    "INSERT INTO search_text (session_id, node_id, node_seq, agent_id, role, node_type, "
    "created_at, body) VALUES (?, ?, ?, ?, ?, 'message', ?, ?)"
)


@dataclass(frozen=True)
class SessionFile:
    """Where one session's pair of tables lives."""

    path: Path
    nodes: str
    events: str


def connect_ro(path: Path) -> sqlite3.Connection:
    """A read-only connection to a database the store owns (it never writes through this)."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


def locate(home: Path, session_id: str) -> SessionFile:
    """The file of ``home`` that holds the session's tables (``LookupError`` when none does)."""
    nodes, events = f"nodes_{session_id}", f"events_{session_id}"
    main = home / "sessions.sqlite"
    others = sorted(p for p in home.rglob("*.sqlite") if p != main)
    for path in [main, *others]:
        connection = connect_ro(path)
        try:
            found = {
                row[0]
                for row in connection.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                    (nodes, events),
                )
            }
        finally:
            connection.close()
        if found == {nodes, events}:
            return SessionFile(path, nodes, events)
    raise LookupError(f"no file under {home} holds the tables of session {session_id}")


def _ddl(connection: sqlite3.Connection, tables: set[str] | None) -> list[str]:
    """``CREATE`` statements of tables and indexes: of ``tables``, or of every global table."""
    rows = connection.execute(
        "SELECT type, tbl_name, sql FROM sqlite_master "
        "WHERE sql IS NOT NULL AND type IN ('table', 'index') ORDER BY type DESC, rowid"
    )
    out = []
    for _kind, table, sql in rows:
        if table.startswith(("sqlite_", f"{_FTS}_")):  # FTS5's own tables come with its index
            continue
        is_session = table.startswith(("nodes_", "events_"))
        if (tables is None and not is_session) or (tables is not None and table in tables):
            out.append(sql)
    return out


def decode(columns: tuple[str, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    """A row as a dict, its JSON columns decoded (what a reader hands its caller)."""
    out = dict(zip(columns, row, strict=True))
    for name in JSON_COLUMNS:
        value = out.get(name)
        if value is not None:
            out[name] = orjson.loads(value)
    return out


def _columns(connection: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]


def _insert(table: str, columns: list[str]) -> str:
    names = ", ".join(columns)
    marks = ", ".join(f":{c}" for c in columns)
    return f'INSERT INTO "{table}" ({names}) VALUES ({marks})'


@dataclass
class _Session:
    row_sql: str
    node_sql: str
    event_sql: str
    node_columns: list[str]
    event_columns: list[str]


class RawWriter:
    """A raw file with the store's table shapes for some sessions, and the append's statements."""

    UPDATE = "UPDATE sessions SET active_node_id = ?, updated_at = ? WHERE session_id = ?"

    def __init__(self, path: Path, synchronous: str) -> None:
        self.path = path
        # Another thread may run the statements (``_floor.py``), one thread at a time.
        self.connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in (
            "PRAGMA busy_timeout = 5000",
            f"PRAGMA synchronous = {synchronous}",
            "PRAGMA foreign_keys = ON",
            "PRAGMA temp_store = MEMORY",
            "PRAGMA journal_mode = WAL",
        ):
            self.connection.execute(pragma)
        self.sessions: dict[str, _Session] = {}
        self.counter = 0
        self.waiting = 0
        """``search_text`` rows this connection wrote that FTS5's index has not taken in."""

    @classmethod
    def clone(cls, home: Path, session_ids: list[str], path: Path, synchronous: str) -> RawWriter:
        """Copy the global tables' and the sessions' DDL and the sessions' rows from ``home``."""
        writer = cls(path, synchronous)
        main = connect_ro(home / "sessions.sqlite")
        con = writer.connection
        con.execute("PRAGMA foreign_keys = OFF")
        con.execute("BEGIN")
        for sql in _ddl(main, None):
            con.execute(sql)
        for (mark,) in main.execute("SELECT indexed_upto FROM search_mark"):
            con.execute("INSERT INTO search_mark (indexed_upto) VALUES (?)", (mark,))
        for sid in session_ids:
            where = locate(home, sid)
            source = main if where.path == home / "sessions.sqlite" else connect_ro(where.path)
            for sql in _ddl(source, {where.nodes, where.events}):
                con.execute(sql)
            for table in ("sessions", "agents"):
                cursor = main.execute(f"SELECT * FROM {table} WHERE session_id = ?", (sid,))
                names = [d[0] for d in cursor.description]
                rows = cursor.fetchall()
                con.executemany(
                    _insert(table, names), [dict(zip(names, r, strict=True)) for r in rows]
                )
            writer._prepare(sid, where.nodes, where.events)
        con.execute("COMMIT")
        con.execute("PRAGMA foreign_keys = ON")
        main.close()
        return writer

    def _prepare(self, sid: str, nodes: str, events: str) -> None:
        node_columns = _columns(self.connection, nodes)
        event_columns = _columns(self.connection, events)
        row_sql = (
            f'SELECT sessions.*, (SELECT max(node_seq) FROM "{nodes}"), '
            f'(SELECT max(seq) FROM "{events}"), EXISTS (SELECT 1 FROM "{nodes}" '
            f'WHERE "{nodes}".parent_id = sessions.active_node_id '
            f'AND "{nodes}".agent_id = sessions.root_agent_id) '
            "FROM sessions WHERE session_id = ?"
        )
        self.sessions[sid] = _Session(
            row_sql,
            _insert(nodes, node_columns),
            _insert(events, event_columns),
            node_columns,
            event_columns,
        )

    def append(self, sid: str, role: str, content_json: str) -> None:
        """One node and its ``node_created`` event, in one transaction, as the store does it."""
        self.connection.execute("BEGIN IMMEDIATE")
        self.statements(sid, role, content_json)
        self.connection.execute("COMMIT")

    def statements(self, sid: str, role: str, content_json: str) -> None:
        """An append's five statements (the index's two more every 64), in the caller's BEGIN."""
        s = self.sessions[sid]
        con = self.connection
        self.counter += 1
        node_id = f"node_{self.counter:026d}"
        now = datetime.now(UTC).isoformat(timespec="microseconds")
        cursor = con.execute(s.row_sql, (sid,))
        row = cursor.fetchone()
        session = dict(zip([d[0] for d in cursor.description[:-3]], row[:-3], strict=True))
        max_node_seq, max_seq, _active_has_child = row[-3:]
        node = dict.fromkeys(s.node_columns)
        node.update(
            node_id=node_id,
            node_seq=(max_node_seq or 0) + 1,
            parent_id=session["active_node_id"],
            agent_id=session["root_agent_id"],
            role=role,
            node_type="message",
            content_json=content_json,
            created_at=now,
        )
        con.execute(s.node_sql, node)
        event = dict.fromkeys(s.event_columns)
        event.update(
            event_id=f"evt_{self.counter:026d}",
            seq=(max_seq or 0) + 1,
            agent_id=session["root_agent_id"],
            level="info",
            event_type="node_created",
            node_id=node_id,
            created_at=now,
        )
        con.execute(s.event_sql, event)
        body = node_text(content_json)
        search = (sid, node_id, node["node_seq"], node["agent_id"], role, now, body)
        con.execute(_SEARCH_ROW, search)
        self.waiting += 1
        if self.waiting >= CATCH_UP_AT:
            for statement in CATCH_UP:
                con.execute(statement)
            self.waiting = 0
        con.execute(self.UPDATE, (node_id, now, sid))

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()


def session_row(connection: sqlite3.Connection, sid: str) -> dict[str, Any]:
    """The ``sessions`` row as the store's readers fetch it first."""
    cursor = connection.execute("SELECT * FROM sessions WHERE session_id = ?", (sid,))
    names = [d[0] for d in cursor.description]
    return dict(zip(names, cursor.fetchone(), strict=True))


def active_path(
    connection: sqlite3.Connection, where: SessionFile, sid: str, steps: int | None = None
) -> list[dict[str, Any]]:
    """The path from the root to the active node (only its last ``steps`` nodes when given)."""
    nodes = where.nodes
    bound = "" if steps is None else f" AND path.depth + 1 < {int(steps)}"
    sql = (
        "WITH RECURSIVE path(node_id, parent_id, node_seq, depth) AS ("
        f'SELECT node_id, parent_id, node_seq, 0 FROM "{nodes}" WHERE node_id = ? '
        f'UNION ALL SELECT n.node_id, n.parent_id, n.node_seq, path.depth + 1 FROM "{nodes}" '
        "AS n JOIN path ON n.node_id = path.parent_id WHERE n.node_seq < path.node_seq"
        f"{bound}) "
        f'SELECT n.* FROM "{nodes}" AS n JOIN path ON n.node_id = path.node_id '
        "ORDER BY path.depth DESC"
    )
    connection.execute("BEGIN")
    try:
        target = session_row(connection, sid)["active_node_id"]
        cursor = connection.execute(sql, (target,))
        columns = tuple(d[0] for d in cursor.description)
        return [decode(columns, row) for row in cursor.fetchall()]
    finally:
        connection.execute("COMMIT")


def timeline_page(
    connection: sqlite3.Connection, where: SessionFile, sid: str, after_seq: int, limit: int
) -> list[dict[str, Any]]:
    """``limit`` events after ``after_seq``, by ``seq``."""
    sql = f'SELECT * FROM "{where.events}" WHERE seq > ? ORDER BY seq LIMIT ?'
    connection.execute("BEGIN")
    try:
        session_row(connection, sid)
        cursor = connection.execute(sql, (after_seq, limit))
        columns = tuple(d[0] for d in cursor.description)
        return [decode(columns, row) for row in cursor.fetchall()]
    finally:
        connection.execute("COMMIT")


def wal_frames(database: Path) -> int:
    """Frames in the database's ``-wal`` file now (0 when it is absent or empty)."""
    wal = database.with_name(database.name + "-wal")
    if not wal.exists() or wal.stat().st_size < 32:
        return 0
    with open(wal, "rb") as f:
        header = f.read(32)
    page_size = int.from_bytes(header[8:12], "big")
    return (wal.stat().st_size - 32) // (24 + page_size)


def truncate_wal(database: Path) -> None:
    """Checkpoint the database and empty its ``-wal`` file (its writers must be idle)."""
    connection = sqlite3.connect(database, isolation_level=None)
    try:
        for _ in range(100):
            busy, _log, _done = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return
        raise RuntimeError(f"could not checkpoint {database}: always busy")
    finally:
        connection.close()
