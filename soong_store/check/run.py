"""Integrity check: the database file, every session's rows, artifact files and task WALs.

The check reads raw rows (never through the record models, which trust what they read) in one
snapshot per batch of sessions of one file (:mod:`soong_store.check.reads`), applies the one
rule set of stored data to them (:mod:`soong_store.rules`, the same rules an import applies to
its file), and reports every problem it finds as a :class:`Problem` naming the session and the
ids involved, so that a person can find each one. It never changes anything.

Kinds of problem: of the database, ``quick_check`` (the database's own check of its storage,
asked of the backend: SQLite's ``quick_check``, PostgreSQL's amcheck where the extension is
installed; what it covered, or could not, goes to the report's notes),
``invalid_session_id``, ``missing_table``, ``unreadable_session`` (a damaged page; the other
sessions are still checked), ``orphan_table``; of shard files (checked shard by shard, each
attached while its sessions are read), ``unreadable_shard``, ``shard_copy`` (the shard holds no
copy of the epoch the catalog names), ``shard_revision`` (its pairs are at another revision than
the main file's), ``stale_copy`` (a copy the catalog does not place there
and no move under way names), ``shard_link`` (a symbolic link where shard files live, which the
store refuses); of a row on its own, ``invalid_row`` (a type,
range, enum, id, timestamp or JSON text the store would not write), ``invalid_content``; of a
session's rows together, ``duplicate_id``, ``missing_parent``, ``node_order`` (a parent numbered
after its child), ``parent_cycle``, ``branch_rule``, ``node_without_event``,
``event_missing_node``, ``node_seq``, ``seq``, ``run_seq``, ``unknown_agent``, ``unknown_run``,
``agent_rule``, ``run_rule``, ``missing_root_agent``, ``missing_active_node``,
``active_node_agent`` (the active node is another agent's than the root agent's),
``missing_run_node``, ``missing_fork_node``, ``artifact_link``, ``artifact_path``,
``dangling_artifact_ref``; of the search index, ``search_index``; of the usage ledger,
``usage_ledger`` (a run's ledger rows are not what its usage gives); of files,
``missing_artifact_file``, ``artifact_size``, ``orphan_artifact_file``, ``task_wal``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial

from soong_store.backends.sqlite.shards import holds_shape_of
from soong_store.backends.values import Integrity
from soong_store.catalog.lookup import MAIN, StoredTables
from soong_store.check.reads import (
    BATCH,
    Batch,
    Database,
    Facts,
    Shard,
    database_facts,
    read_batch,
    search_problems,
    session_facts,
    shard_facts,
    shard_links,
)
from soong_store.check.search_index import whole_problems as search_whole_problems
from soong_store.check.usage_ledger import ledger_problems
from soong_store.errors import SoongStoreError, StorageError
from soong_store.files.folder import ArtifactFiles
from soong_store.model.checks import SESSION_ID_RE
from soong_store.rules.row import KINDS
from soong_store.rules.session import (
    Found,
    Problem,
    row_problems,
    session_notes,
    session_problems,
)
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
    """What the database's own check covered, or why part of it could not run; then what
    sessions hold that is not damage but the store would not write live (recorded history)."""

    @property
    def ok(self) -> bool:
        """Whether nothing was found wrong."""
        return not self.problems


def _shard_orphans(file: str, shard: Shard, facts: Database) -> list[Problem]:
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


def _shard_revision(file: str, shard: Shard, facts: Database) -> list[Problem]:
    """A shard whose pairs are at another revision than the main file's (an upgrade cut short).

    A shard recorded at an ancestor of the main file's revision went through every per-session
    change since (each reaches every shard): its pairs have the main file's shape.
    """
    if shard.revision is None or (
        facts.revision is not None and holds_shape_of(shard.revision, facts.revision)
    ):
        return []
    message = f"the pairs of {file} are at revision {shard.revision}, "
    message += f"the database at {facts.revision or '(none)'}"
    return [Problem("shard_revision", None, (file,), message)]


def _check_rows(facts: Facts) -> list[Problem]:
    """Each row on its own, then the rows of the session together (the one rule set)."""
    rows = facts.rows
    found = Found(rows.session_id)
    for kind in KINDS:
        for row in rows.rows[kind]:
            row_problems(found, kind, row)
    found += session_problems(rows, legacy_shared_paths=True)
    return found


def _check_files(
    f: Facts, sid: str, files: ArtifactFiles, listing: list[tuple[str, float]]
) -> list[Problem]:
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
    found += _orphan_files(listing, f.folder_paths, sid, only=f"{sid}/")
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
    listing: Iterable[tuple[str, float]],
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
        for rel, mtime in listing
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
    facts = await run_read(store, partial(database_facts, session_id=session_id))
    if session_id is not None and not facts.sessions:
        # Its row is looked up raw: a session whose row is damaged is checked, not refused.
        await store.get_session(session_id)
    report = Report(sessions=list(facts.sessions), notes=list(integrity.notes))
    for line in integrity.problems:
        report.problems.append(Problem("quick_check", None, (), " ".join(line.split())))
    files = artifact_files(store)
    total = len(report.sessions)
    done = 0
    search: dict[str, list[Problem]] = {}
    notes: dict[str, list[str]] = {}
    for file, sids in _by_file(facts):
        shard = None
        if file != MAIN:  # shard by shard: attached as its sessions are read, then let go
            try:
                shard = await run_read(store, partial(shard_facts, file=file))
            except StorageError as exc:
                report.problems.append(Problem("unreadable_shard", None, (file,), str(exc)))
            if shard is not None:
                report.problems += _shard_revision(file, shard, facts)
        for start in range(0, len(sids), BATCH):
            batch = _Batch(facts, file, shard, sids[start : start + BATCH])
            for found in await _check_batch(store, batch, files, search, notes):
                report.problems += found
                done += 1
                if progress is not None:
                    progress(done, total)
        if shard is not None and session_id is None:
            report.problems += _shard_orphans(file, shard, facts)
    report.problems += [p for sid in report.sessions for p in search.get(sid, ())]
    report.notes += [note for sid in report.sessions for note in notes.get(sid, ())]
    report.problems += await ledger_problems(store, session_id)
    if session_id is None:
        report.problems += await search_whole_problems(store, report.sessions)
        report.problems += [
            Problem("orphan_table", None, (name,), f"table {name} belongs to no session")
            for name in facts.tables.orphans(facts.named(MAIN))
        ]
        report.problems += await run_read(store, shard_links)
        checked = frozenset(report.sessions)
        report.problems += await asyncio.to_thread(
            lambda: _orphan_files(files.files(), facts.paths, None, "", checked)
        )
    return report


_SKIP = StoredTables((), fold_case=False)
"""What :func:`_tables_for` returns for a session whose rows cannot be read where it is placed."""


def _by_file(facts: Database) -> list[tuple[str, list[str]]]:
    """The sessions to check grouped by the file of their pair: the main file's first."""
    groups: dict[str, list[str]] = {MAIN: []}
    for sid in facts.sessions:
        file = facts.placed.get(sid, (MAIN, 0))[0]
        groups.setdefault(file, []).append(sid)
    return [(MAIN, groups.pop(MAIN)), *sorted(groups.items())]


def _tables_for(
    facts: Database, sid: str, file: str, shard: Shard | None
) -> tuple[StoredTables | None, list[Problem]]:
    """The stored tables a session's pair is looked for in (``None``: it has no pair)."""
    if sid not in facts.placed:
        return None, []
    if file == MAIN:
        return facts.tables, []
    epoch = facts.placed[sid][1]
    if shard is None:
        return _SKIP, []
    held = shard.copies.get(sid)
    if held != epoch:
        what = "no copy" if held is None else f"the copy of epoch {held}"
        message = f"session {sid} is placed in {file} at epoch {epoch}, which holds {what}"
        return _SKIP, [Problem("shard_copy", sid, (sid,), message)]
    return shard.tables, []


@dataclass(slots=True)
class _Batch:
    """Sessions of one file checked together: what each needs before and from its read."""

    facts: Database
    file: str
    shard: Shard | None
    sids: list[str]
    before: dict[str, list[Problem]] = field(default_factory=dict)
    """Found before reading: ``shard_copy``, ``invalid_session_id``, ``missing_table``."""
    wanted: list[tuple[str, StoredTables | None]] = field(default_factory=list)
    searched: list[str] = field(default_factory=list)
    alone: list[str] = field(default_factory=list)
    """Searched on their own: their copy cannot be read, and a batch would wait on it."""

    def __post_init__(self) -> None:
        for sid in self.sids:
            tables, found = _tables_for(self.facts, sid, self.file, self.shard)
            if tables is _SKIP:
                self.alone.append(sid)
            elif SESSION_ID_RE.fullmatch(sid) is None:
                message = f"session id {sid!r} cannot name a table; its rows were not checked"
                found.append(Problem("invalid_session_id", sid, (sid,), message))
                self.searched.append(sid)
            else:
                for name in [] if tables is None else tables.missing(sid):
                    message = f"table {name} of session {sid} is missing"
                    found.append(Problem("missing_table", sid, (name,), message))
                self.wanted.append((sid, tables))
                self.searched.append(sid)
            self.before[sid] = found


async def _check_batch(
    store: SessionStore,
    batch: _Batch,
    files: ArtifactFiles,
    search: dict[str, list[Problem]],
    notes: dict[str, list[str]],
) -> list[list[Problem]]:
    """The problems of each session of ``batch``, in order; search problems and notes aside.

    Their search problems go to ``search``, their notes to ``notes``.

    One snapshot for the batch; if it cannot be read (a damaged page), one per session, so that
    only the damaged session is reported unreadable.
    """
    unreadable: dict[str, StorageError] = {}
    try:
        read = partial(read_batch, wanted=batch.wanted, searched=batch.searched)
        got = await run_read(store, read)
    except StorageError:
        got = Batch({}, {})
        for sid, tables in batch.wanted:
            try:
                one = partial(session_facts, session_id=sid, tables=tables)
                got.facts[sid] = await run_read(store, one)
            except StorageError as exc:
                unreadable[sid] = exc
        batch.alone += batch.searched
    for sid in batch.alone:
        alone = partial(search_problems, session_id=sid)
        with suppress(StorageError):  # an unreadable session: the rest of the check says so
            got.search[sid] = await run_read(store, alone)
    search.update(got.search)

    def judge() -> list[list[Problem]]:
        listing = list(files.files(batch.sids))
        out = []
        for sid in batch.sids:
            found = list(batch.before[sid])
            facts = got.facts.get(sid)
            if sid in unreadable:
                found.append(Problem("unreadable_session", sid, (sid,), str(unreadable[sid])))
            elif facts is not None and facts.rows.rows["session"]:  # else: deleted meanwhile
                found += _check_rows(facts)
                found += _check_files(facts, sid, files, listing)
                notes[sid] = session_notes(facts.rows)
            out.append(found)
        return out

    return await asyncio.to_thread(judge)
