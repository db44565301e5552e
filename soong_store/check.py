"""Integrity check: the database file, every session's rows, artifact files and task WALs.

The check reads raw rows (never through the record models, which trust what they read) in one
snapshot per session and reports every problem it finds as a :class:`Problem` naming the
session and the ids involved, so that a person can find each one. It never changes anything.

Kinds of problem: ``quick_check`` (SQLite's ``PRAGMA quick_check``), ``invalid_session_id``,
``missing_table``, ``unreadable_session`` (a damaged page; the other sessions are still
checked), ``orphan_table``, ``node_without_event``, ``missing_parent``,
``parent_cycle``, ``event_missing_node``, ``node_seq``, ``seq``, ``run_seq``, ``unknown_agent``,
``unknown_run``, ``missing_root_agent``, ``missing_active_node``, ``missing_run_node``,
``missing_fork_node``, ``invalid_content``, ``dangling_artifact_ref``,
``missing_artifact_file``, ``artifact_size``, ``orphan_artifact_file``, ``task_wal``.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection

from soong_store.artifacts import ArtifactFiles
from soong_store.content import artifact_refs, content_from_json
from soong_store.errors import SoongStoreError, StorageError
from soong_store.ids import SESSION_ID_RE
from soong_store.store import SessionStore
from soong_store.task_wal import WAL_SUFFIX, TaskDag, task_root, task_wal_path

ORPHAN_GRACE_S = 600.0
"""Files younger than this may belong to a unit of work about to commit (as for ``gc``)."""

_SHOWN = 10


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing found wrong: its kind, the session, the ids involved and a sentence."""

    kind: str
    session_id: str | None
    ids: tuple[str, ...]
    message: str

    def as_dict(self) -> dict[str, Any]:
        """The problem as a JSON-ready mapping (the ``check --json`` fields)."""
        return {
            "kind": self.kind,
            "session_id": self.session_id,
            "ids": list(self.ids),
            "message": self.message,
        }


@dataclass(slots=True)
class Report:
    """What a check looked at and what it found."""

    sessions: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether nothing was found wrong."""
        return not self.problems


@dataclass(slots=True)
class _Facts:
    """The raw rows of one session that the checks need, read in one snapshot."""

    session: dict[str, Any]
    tables: set[str]
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    shared_paths: set[str] = field(default_factory=set)


def _rows(connection: Connection, sql: str, *params: Any) -> list[dict[str, Any]]:
    return [dict(row) for row in connection.exec_driver_sql(sql, params).mappings()]


def _quick_check(connection: Connection) -> list[str]:
    return [str(row[0]) for row in connection.exec_driver_sql("PRAGMA quick_check")]


def _database_facts(connection: Connection, session_id: str | None) -> dict[str, Any]:
    """The session ids to check, every table name and every artifact path."""
    where, params = ("WHERE session_id = ?", (session_id,)) if session_id else ("", ())
    sessions = [
        str(r["session_id"])
        for r in _rows(connection, f"SELECT session_id FROM sessions {where} ORDER BY 1", *params)
    ]
    tables = [
        r["name"] for r in _rows(connection, "SELECT name FROM sqlite_master WHERE type = 'table'")
    ]
    paths = {r["path"] for r in _rows(connection, "SELECT DISTINCT path FROM artifacts")}
    return {"sessions": sessions, "tables": tables, "paths": paths}


def _session_facts(connection: Connection, session_id: str, tables: set[str]) -> _Facts:
    session = _rows(connection, "SELECT * FROM sessions WHERE session_id = ?", session_id)[0]
    facts = _Facts(session, tables)
    for name, key in (("agents", "agent_id"), ("runs", "run_id")):
        rows = _rows(connection, f"SELECT * FROM {name} WHERE session_id = ?", session_id)
        setattr(facts, name, {r[key]: r for r in rows})
    if f"nodes_{session_id}".lower() in tables:
        facts.nodes = _rows(
            connection,
            "SELECT node_id, node_seq, parent_id, agent_id, run_id, content_json "
            f'FROM "nodes_{session_id}" ORDER BY node_seq',
        )
    if f"events_{session_id}".lower() in tables:
        facts.events = _rows(
            connection,
            f'SELECT event_id, seq, run_id, run_seq, agent_id, node_id FROM "events_{session_id}" '
            "ORDER BY seq",
        )
    facts.artifacts = _rows(
        connection,
        "SELECT artifact_id, path, size_bytes FROM artifacts WHERE session_id = ?",
        session_id,
    )
    prefix = f"{session_id}/"
    facts.shared_paths = {
        r["path"]
        for r in _rows(
            connection,
            "SELECT path FROM artifacts WHERE substr(path, 1, ?) = ?",
            len(prefix),
            prefix,
        )
    }
    return facts


class _Found(list[Problem]):
    """The problems of one session, with a short way to add one."""

    def __init__(self, session_id: str | None) -> None:
        super().__init__()
        self.session_id = session_id

    def add(self, kind: str, message: str, *ids: str) -> None:
        self.append(Problem(kind, self.session_id, ids, message))

    def dense(self, values: list[int], what: str, *ids: str) -> None:
        """A problem when ``values`` are not exactly 1..n (repeats and gaps named)."""
        if sorted(values) == list(range(1, len(values) + 1)):
            return
        counts: dict[int, int] = defaultdict(int)
        for value in values:
            counts[value] += 1
        repeats = sorted(v for v, n in counts.items() if n > 1)[:_SHOWN]
        gaps = [v for v in range(1, max(values) + 1) if v not in counts][:_SHOWN]
        parts = [f"repeated {repeats}" if repeats else "", f"missing {gaps}" if gaps else ""]
        if min(values) < 1:
            parts.append(f"smallest is {min(values)}")
        detail = "; ".join(p for p in parts if p)
        self.add(what.split()[0], f"{what} are not dense from 1: {detail}", *ids)


# (rows, their id column, the column that names something, what it must name, problem kind)
_LINKS = (
    ("nodes", "node_id", "parent_id", "nodes", "missing_parent"),
    ("nodes", "node_id", "agent_id", "agents", "unknown_agent"),
    ("nodes", "node_id", "run_id", "runs", "unknown_run"),
    ("events", "event_id", "node_id", "nodes", "event_missing_node"),
    ("events", "event_id", "agent_id", "agents", "unknown_agent"),
    ("events", "event_id", "run_id", "runs", "unknown_run"),
    ("runs", "run_id", "agent_id", "agents", "unknown_agent"),
    ("runs", "run_id", "start_node_id", "nodes", "missing_run_node"),
    ("runs", "run_id", "end_node_id", "nodes", "missing_run_node"),
    ("agents", "agent_id", "fork_from_node_id", "nodes", "missing_fork_node"),
    ("session", "session_id", "root_agent_id", "agents", "missing_root_agent"),
    ("session", "session_id", "active_node_id", "nodes", "missing_active_node"),
)


def _check_rows(f: _Facts, sid: str) -> list[Problem]:
    """Every reference between the session's rows, the events of nodes, and the sequences."""
    found = _Found(sid)
    rows: dict[str, list[dict[str, Any]]] = {
        "nodes": f.nodes,
        "events": f.events,
        "runs": list(f.runs.values()),
        "agents": list(f.agents.values()),
        "session": [f.session],
    }
    known = {kind: {r[key] for r in rows[kind]} for kind, key in _KEYS.items()}
    for kind, key, column, target, problem in _LINKS:
        for row in rows[kind]:
            value = row[column]
            if value is not None and value not in known[target]:
                what = target.rstrip("s")
                found.add(
                    problem,
                    f"{kind.rstrip('s')} {row[key]} {column} names {what} {value}, "
                    f"which is not in the session",
                    row[key],
                    value,
                )
    named = {e["node_id"] for e in f.events}
    for n in f.nodes:
        if n["node_id"] not in named:
            found.add("node_without_event", f"node {n['node_id']} has no event", n["node_id"])
    _cycles(found, {n["node_id"]: n["parent_id"] for n in f.nodes})
    found.dense([n["node_seq"] for n in f.nodes], "node_seq values")
    found.dense([e["seq"] for e in f.events], "seq values")
    per_run: dict[str, list[int]] = defaultdict(list)
    for e in f.events:
        if e["run_id"] is not None:
            per_run[e["run_id"]].append(e["run_seq"] if e["run_seq"] is not None else 0)
    for run_id, values in per_run.items():
        found.dense(values, f"run_seq values of run {run_id}", run_id)
    artifacts = {a["artifact_id"] for a in f.artifacts}
    for n in f.nodes:
        try:
            refs = artifact_refs(content_from_json(n["content_json"]))
        except (ValidationError, ValueError) as exc:
            first = str(exc).splitlines()[0]
            found.add("invalid_content", f"node {n['node_id']} content: {first}", n["node_id"])
            continue
        for ref in refs:
            if ref not in artifacts:
                message = f"node {n['node_id']} refers to artifact {ref}, which has no row"
                found.add("dangling_artifact_ref", message, n["node_id"], ref)
    return found


_KEYS = {"nodes": "node_id", "events": "event_id", "runs": "run_id", "agents": "agent_id"}


def _cycles(found: _Found, parent: dict[str, str | None]) -> None:
    """Parent chains that loop (walked iteratively; each node is visited once)."""
    state: dict[str, int] = {}  # 1: on the current walk, 2: done
    for start in parent:
        walk: list[str] = []
        node: str | None = start
        while node is not None and node in parent and node not in state:
            state[node] = 1
            walk.append(node)
            node = parent[node]
        if node is not None and state.get(node) == 1:
            loop = walk[walk.index(node) :]
            found.add("parent_cycle", f"parent chain loops: {' -> '.join(loop)}", *loop)
        for item in walk:
            state[item] = 2


def _check_files(f: _Facts, sid: str, files: ArtifactFiles) -> list[Problem]:
    """Artifact rows against their files, and the task WALs of the session's project folder."""
    found = _Found(sid)
    for a in f.artifacts:
        aid, path = a["artifact_id"], a["path"]
        try:
            size = files.resolve(path).stat().st_size
        except (OSError, SoongStoreError):
            found.add("missing_artifact_file", f"artifact {aid} has no file artifacts/{path}", aid)
            continue
        if a["size_bytes"] is not None and size != a["size_bytes"]:
            message = f"artifact {aid} file holds {size} bytes, its row says {a['size_bytes']}"
            found.add("artifact_size", message, aid)
    found += _orphan_files(files, f.shared_paths, sid, only=f"{sid}/")
    folder = task_root(f.session["cwd"], sid)
    for wal in sorted(folder.glob(f"*{WAL_SUFFIX}")) if folder.is_dir() else []:
        try:
            state = TaskDag.replay(wal)
            if state.task_name is not None and task_wal_path(folder, state.task_name) != wal:
                raise ValueError(f"its header names task {state.task_name!r}, another file's")
        except (SoongStoreError, ValueError) as exc:
            found.add("task_wal", f"task WAL {wal}: {exc}", wal.name)
    return found


def _orphan_files(
    files: ArtifactFiles,
    referenced: set[str],
    sid: str | None,
    only: str = "",
    skip: frozenset[str] = frozenset(),
) -> list[Problem]:
    """Files older than the grace period that no row names (in one folder, or outside ``skip``)."""
    cutoff = time.time() - ORPHAN_GRACE_S
    return [
        Problem(
            "orphan_artifact_file",
            sid or rel.split("/")[0],
            (rel,),
            f"file artifacts/{rel} is named by no artifact row",
        )
        for rel, mtime in files.files()
        if rel.startswith(only)
        and rel.split("/")[0] not in skip
        and rel not in referenced
        and mtime <= cutoff
    ]


async def check_store(
    store: SessionStore,
    session_id: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Check one session (or every session and the whole home) and report what is wrong.

    Raises:
        NotFound: ``session_id`` names no session.
    """
    if session_id is not None:
        await store.get_session(session_id)
    try:
        lines = await store._read(_quick_check)
    except StorageError as exc:  # damage that stops SQLite's own check: say so and go on
        lines = [str(exc)]
    facts = await store._read(partial(_database_facts, session_id=session_id))
    report = Report(sessions=list(facts["sessions"]))
    for line in lines:
        if line != "ok":
            report.problems.append(Problem("quick_check", None, (), " ".join(line.split())))
    tables = {name.lower() for name in facts["tables"]}
    files = ArtifactFiles(store.home / "artifacts")
    total = len(report.sessions)
    for done, sid in enumerate(report.sessions, 1):
        report.problems += await _check_session(store, sid, tables, files)
        if progress is not None:
            progress(done, total)
    if session_id is None:
        sessions = {sid.lower() for sid in report.sessions}
        for name in sorted(facts["tables"]):
            kind, _, owner = name.partition("_")
            if kind in ("nodes", "events") and owner.lower() not in sessions:
                report.problems.append(
                    Problem("orphan_table", None, (name,), f"table {name} belongs to no session")
                )
        checked = frozenset(report.sessions)
        report.problems += await asyncio.to_thread(
            _orphan_files, files, facts["paths"], None, "", checked
        )
    return report


async def _check_session(
    store: SessionStore, sid: str, tables: set[str], files: ArtifactFiles
) -> list[Problem]:
    if SESSION_ID_RE.fullmatch(sid) is None:
        return [
            Problem(
                "invalid_session_id",
                sid,
                (sid,),
                f"session id {sid!r} cannot name a table; its rows were not checked",
            )
        ]
    out = [
        Problem("missing_table", sid, (name,), f"table {name} of session {sid} is missing")
        for name in (f"nodes_{sid}", f"events_{sid}")
        if name.lower() not in tables
    ]
    try:
        facts = await store._read(partial(_session_facts, session_id=sid, tables=tables))
    except StorageError as exc:  # a damaged page of this session's tables: go on with the rest
        return [*out, Problem("unreadable_session", sid, (sid,), str(exc))]
    out += _check_rows(facts, sid)
    out += await asyncio.to_thread(_check_files, facts, sid, files)
    return out
