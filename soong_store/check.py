"""Integrity check: the database file, every session's rows, artifact files and task WALs.

The check reads raw rows (never through the record models, which trust what they read) in one
snapshot per session, applies the one rule set of stored data to them
(:mod:`soong_store.rules`, the same rules an import applies to its file), and reports every
problem it finds as a :class:`Problem` naming the session and the ids involved, so that a person
can find each one. It never changes anything.

Kinds of problem: of the database, ``quick_check`` (the database's own check of its storage,
asked of the backend: SQLite's ``quick_check``, PostgreSQL's amcheck where the extension is
installed; what it covered, or could not, goes to the report's notes),
``invalid_session_id``, ``missing_table``, ``unreadable_session`` (a damaged page; the other
sessions are still checked), ``orphan_table``; of shard files (checked shard by shard, each
attached while its sessions are read), ``unreadable_shard``, ``shard_copy`` (the shard holds no
copy of the epoch the catalog names), ``stale_copy`` (a copy the catalog does not place there
and no move under way names); of a row on its own, ``invalid_row`` (a type,
range, enum, id, timestamp or JSON text the store would not write), ``invalid_content``; of a
session's rows together, ``duplicate_id``, ``missing_parent``, ``node_order`` (a parent numbered
after its child), ``parent_cycle``, ``branch_rule``, ``node_without_event``,
``event_missing_node``, ``node_seq``, ``seq``, ``run_seq``, ``unknown_agent``, ``unknown_run``,
``agent_rule``, ``run_rule``, ``missing_root_agent``, ``missing_active_node``,
``missing_run_node``, ``missing_fork_node``, ``artifact_link``, ``artifact_path``,
``dangling_artifact_ref``; of the search index, ``search_index``; of files,
``missing_artifact_file``, ``artifact_size``, ``orphan_artifact_file``, ``task_wal``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial

from sqlalchemy import Connection, func, select

from soong_store.backends.base import Integrity
from soong_store.errors import SoongStoreError, StorageError
from soong_store.files.store import ArtifactFiles
from soong_store.model.ids import SESSION_ID_RE
from soong_store.rules.row import KINDS
from soong_store.rules.session import Found, Problem, SessionRows, row_problems, session_problems
from soong_store.schema import catalog, pair_files
from soong_store.schema.catalog import MAIN, StoredTables, stored_tables
from soong_store.schema.models import agents_table, artifacts_table, runs_table, sessions_table
from soong_store.search.check import search_problems
from soong_store.sql.first_event import created_event_row
from soong_store.store import SessionStore, artifact_files, backend_of, run_read
from soong_store.tasks.wal import WAL_SUFFIX, TaskDag, task_root, task_wal_path

__all__ = ["ORPHAN_GRACE_S", "Problem", "Report", "check_store"]

ORPHAN_GRACE_S = 600.0
"""Files younger than this may belong to a unit of work about to commit (as for ``gc``)."""

_SHOWN = 10


@dataclass(slots=True)
class Report:
    """What a check looked at and what it found."""

    sessions: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the database's own check covered, or why part of it could not run."""

    @property
    def ok(self) -> bool:
        """Whether nothing was found wrong."""
        return not self.problems


@dataclass(frozen=True, slots=True)
class _Database:
    """The session ids to check, where their pairs are, the main file's session tables, paths."""

    sessions: list[str]
    placed: dict[str, tuple[str, int]]
    """File and epoch of each pair, as the catalog names them."""
    journaled: dict[str, set[str]]
    """The files a move under way of each session names."""
    tables: StoredTables
    paths: set[str]

    def shards(self) -> list[str]:
        """The shard files the catalog places pairs in, in order."""
        return sorted({file for file, _ in self.placed.values() if file != MAIN})

    def named(self, file: str) -> set[str]:
        """The sessions whose pair may be in ``file``: placed there, or named by a move."""
        placed = {sid for sid, (where, _) in self.placed.items() if where == file}
        return placed | {sid for sid, files in self.journaled.items() if file in files}


def _database_facts(connection: Connection, session_id: str | None) -> _Database:
    column = sessions_table.c.session_id
    wanted = select(column).order_by(column)
    if session_id:
        wanted = wanted.where(column == session_id)
    sessions = [str(sid) for sid in connection.execute(wanted).scalars()]
    paths = set(connection.execute(select(artifacts_table.c.path).distinct()).scalars())
    placed = pair_files.placements(connection, session_id or None)
    journaled = pair_files.journaled_files(connection)
    return _Database(sessions, placed, journaled, stored_tables(connection), paths)


@dataclass(frozen=True, slots=True)
class _Shard:
    """One shard's session tables and the copies its ``shard_pairs`` lists, in one snapshot."""

    tables: StoredTables
    copies: dict[str, int]


def _shard_facts(connection: Connection, file: str) -> _Shard:
    return _Shard(stored_tables(connection, file), pair_files.shard_copies(connection, file))


def _shard_orphans(file: str, shard: _Shard, facts: _Database) -> list[Problem]:
    """Tables and copies in a shard of sessions the catalog does not place there."""
    named = facts.named(file)
    out = [
        Problem("orphan_table", None, (name,), f"table {name} in {file} belongs to no session")
        for name in shard.tables.orphans(named)
    ]
    for sid, epoch in sorted(shard.copies.items()):
        if sid not in named:
            message = f"{file} holds a copy of session {sid} (epoch {epoch}) "
            message += "the catalog does not place there"
            out.append(Problem("stale_copy", sid, (sid,), message))
    return out


_GLOBAL = (("agent", agents_table), ("run", runs_table), ("artifact", artifacts_table))


@dataclass(slots=True)
class _Facts:
    """The raw rows of one session, and the paths of its folder that rows name, in one snapshot."""

    rows: SessionRows
    folder_paths: set[str]


def _session_facts(connection: Connection, session_id: str, tables: StoredTables | None) -> _Facts:
    rows = SessionRows(session_id)
    session = select(sessions_table).where(sessions_table.c.session_id == session_id)
    rows.rows["session"] = [dict(r) for r in connection.execute(session).mappings()]
    for kind, table in _GLOBAL:
        stmt = select(table).where(table.c.session_id == session_id)
        rows.rows[kind] = [dict(r) for r in connection.execute(stmt).mappings()]
    pair = catalog.tables_of(connection, session_id) or catalog.session_tables(session_id)
    if tables is None:  # no pair: what an eager empty pair held (none for a damaged row)
        with suppress(KeyError, TypeError, ValueError):
            rows.rows["event"] = [created_event_row(s) for s in rows.rows["session"]]
    for kind, table, key in (("node", pair.nodes, "node_seq"), ("event", pair.events, "seq")):
        if tables is not None and tables.has(table.name):
            found = connection.execute(select(table).order_by(table.c[key])).mappings()
            rows.rows[kind] = [{str(k): v for k, v in r.items()} for r in found]
    column = artifacts_table.c.path
    prefix = f"{session_id}/"
    named = select(column).where(func.substr(column, 1, len(prefix)) == prefix).distinct()
    return _Facts(rows, set(connection.execute(named).scalars()))


def _check_rows(facts: _Facts) -> list[Problem]:
    """Each row on its own, then the rows of the session together (the one rule set)."""
    rows = facts.rows
    found = Found(rows.session_id)
    for kind in KINDS:
        for row in rows.rows[kind]:
            row_problems(found, kind, row)
    found += session_problems(rows, legacy_shared_paths=True)
    return found


def _check_files(f: _Facts, sid: str, files: ArtifactFiles) -> list[Problem]:
    """Artifact rows against their files, and the task WALs of the session's project folder."""
    found = Found(sid)
    for a in f.rows.rows["artifact"]:
        aid, path = a["artifact_id"], a["path"]
        size = files.size(path) if isinstance(path, str) else None
        if size is None:
            found.add("missing_artifact_file", f"artifact {aid} has no file artifacts/{path}", aid)
        elif a["size_bytes"] is not None and size != a["size_bytes"]:
            message = f"artifact {aid} file holds {size} bytes, its row says {a['size_bytes']}"
            found.add("artifact_size", message, aid)
    found += _orphan_files(files, f.folder_paths, sid, only=f"{sid}/")
    cwd = f.rows.session["cwd"]
    if not isinstance(cwd, str) or "\x00" in cwd:
        return found
    folder = task_root(cwd, sid)
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
    try:
        integrity = await run_read(store, backend_of(store).integrity)
    except StorageError as exc:  # damage that stops the database's own check: say so, go on
        integrity = Integrity([str(exc)])
    facts = await run_read(store, partial(_database_facts, session_id=session_id))
    if session_id is not None and not facts.sessions:
        # Its row is looked up raw: a session whose row is damaged is checked, not refused.
        await store.get_session(session_id)
    report = Report(sessions=list(facts.sessions), notes=list(integrity.notes))
    for line in integrity.problems:
        report.problems.append(Problem("quick_check", None, (), " ".join(line.split())))
    files = artifact_files(store)
    total = len(report.sessions)
    done = 0
    for file, sids in _by_file(facts):
        shard = None
        if file != MAIN:  # shard by shard: attached as its sessions are read, then let go
            try:
                shard = await run_read(store, partial(_shard_facts, file=file))
            except StorageError as exc:
                report.problems.append(Problem("unreadable_shard", None, (file,), str(exc)))
        for sid in sids:
            tables = _tables_for(facts, sid, file, shard, report)
            if tables is not _SKIP:
                report.problems += await _check_session(store, sid, tables, files)
            done += 1
            if progress is not None:
                progress(done, total)
        if shard is not None and session_id is None:
            report.problems += _shard_orphans(file, shard, facts)
    report.problems += await search_problems(store, report.sessions, whole=session_id is None)
    if session_id is None:
        report.problems += [
            Problem("orphan_table", None, (name,), f"table {name} belongs to no session")
            for name in facts.tables.orphans(facts.named(MAIN))
        ]
        checked = frozenset(report.sessions)
        report.problems += await asyncio.to_thread(
            _orphan_files, files, facts.paths, None, "", checked
        )
    return report


_SKIP = StoredTables((), fold_case=False)
"""What :func:`_tables_for` returns for a session whose rows cannot be read where it is placed."""


def _by_file(facts: _Database) -> list[tuple[str, list[str]]]:
    """The sessions to check grouped by the file of their pair: the main file's first."""
    groups: dict[str, list[str]] = {MAIN: []}
    for sid in facts.sessions:
        file = facts.placed.get(sid, (MAIN, 0))[0]
        groups.setdefault(file, []).append(sid)
    return [(MAIN, groups.pop(MAIN)), *sorted(groups.items())]


def _tables_for(
    facts: _Database, sid: str, file: str, shard: _Shard | None, report: Report
) -> StoredTables | None:
    """The stored tables a session's pair is looked for in (``None``: it has no pair)."""
    if sid not in facts.placed:
        return None
    if file == MAIN:
        return facts.tables
    epoch = facts.placed[sid][1]
    if shard is None:
        return _SKIP
    held = shard.copies.get(sid)
    if held != epoch:
        what = "no copy" if held is None else f"the copy of epoch {held}"
        message = f"session {sid} is placed in {file} at epoch {epoch}, which holds {what}"
        report.problems.append(Problem("shard_copy", sid, (sid,), message))
        return _SKIP
    return shard.tables


async def _check_session(
    store: SessionStore, sid: str, tables: StoredTables | None, files: ArtifactFiles
) -> list[Problem]:
    """One session; ``tables`` is ``None`` for a session without a pair (never written)."""
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
        for name in ([] if tables is None else tables.missing(sid))
    ]
    try:
        facts = await run_read(store, partial(_session_facts, session_id=sid, tables=tables))
    except StorageError as exc:  # a damaged page of this session's tables: go on with the rest
        return [*out, Problem("unreadable_session", sid, (sid,), str(exc))]
    if not facts.rows.rows["session"]:  # deleted meanwhile
        return out
    out += _check_rows(facts)
    out += await asyncio.to_thread(_check_files, facts, sid, files)
    return out
