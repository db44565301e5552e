"""Whole folders of session files imported, and kept current: :func:`import_path`.

A path is a file or a folder walked recursively. Each file's format is told from its content
(a file whose format cannot be told is counted and listed, never fatal). One *source* is one
conversation of the tool that wrote it, whatever the number of files it is spread over: a
Claude Code sub-agent's transcript (``agent-<id>.jsonl`` beside its session's file, or under
``<session>/subagents/``) joins the session of the conversation its lines name as a ``sub``
agent, whether it comes before its parent's file, with it, or after it; so does a Codex
sub-agent's rollout (its first ``session_meta`` names the thread that spawned it).

Importing again is incremental. A source's session is found by its source id (a session key,
as :func:`soong_store.importers.import_file` names it); the nodes it holds are recognised by
the source's own record ids and lines, and only what the store does not hold is written, in
one transaction (:mod:`soong_store.importers._incremental`). A source with nothing new is "up to
date" and writes nothing; one whose earlier records changed is a "conflict" and writes nothing.
A file whose size, modification time and last 64 KiB are those of its last import is not read
again at all: that state is a session key of the file, claimed in the transaction that wrote
what the file held.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from soong_store.errors import InvalidArgument, NotFound, SessionArchived
from soong_store.importers import _incremental as inc
from soong_store.importers import claude_code, codex
from soong_store.importers._formats import _PARSERS, _STREAMED, FORMATS, _detect_file
from soong_store.importers._model import ParsedFile, SourceSession
from soong_store.importers._read import file_lines, file_sha256, read_json
from soong_store.importers._rows import build, build_rows
from soong_store.importers._spool import ContentSpool, export_file, write_export
from soong_store.importers._summary import ImportSummary, SourceResult
from soong_store.schema.tables import session_keys_table
from soong_store.store import SessionStore, run_read, scrub_of
from soong_store.transfer import import_session
from soong_store.write import session_keys

Progress = Callable[[int, int, str], None]
"""Told ``(files done, files in all, the file at hand)`` as an import goes."""

FILE_NAMESPACE = "import-file"
"""The session keys that remember a file's state when it was last imported."""
_TAIL = 2**16
_BATCH = 400
_AHEAD = 3
"""Sources in hand at once: the next ones are read and checked while one is written (a few,
so that memory stays flat: each holds its parsed shape, its content is on disk)."""
_SPILL_BYTES = 16 * 2**20
"""A new source whose files hold more goes to the import as an export on disk, its parsed shape
let go first (memory stays flat whatever its size); a smaller one goes as objects (faster)."""
_PARK_BYTES = 4 * 2**20
"""A source whose files hold more parks its parsed content on disk until its rows are made
(:class:`ContentSpool`); a smaller one keeps it in its entries, which saves writing and reading
back every entry (with :data:`_AHEAD` sources in hand, a few tens of megabytes at most)."""


def walk(path: Path) -> Iterator[Path]:
    """The files under ``path`` (itself if a file), sorted, sub-agent metadata left out."""
    if path.is_file():
        yield path
        return
    if not path.is_dir():
        raise InvalidArgument(f"cannot read {str(path)!r}: no such file or folder")
    for folder, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".meta.json") and not name.startswith("."):
                yield Path(folder, name)


def _missing(threads: list[codex.Thread]) -> set[str]:
    """The parents ``threads`` name that are not among them."""
    ids = {t.id for t in threads}
    return {t.parent for t in threads if t.parent is not None and t.parent not in ids}


def _walked(path: Path) -> list[Path]:
    return list(walk(path))


@dataclass(frozen=True, slots=True)
class _File:
    path: Path
    state: str
    """The file's session key: its path's hash, size, time and tail's hash."""
    size: int


def _state(path: Path) -> _File:
    resolved = path.resolve()
    stat = resolved.stat()
    with resolved.open("rb") as file:
        if stat.st_size > _TAIL:
            file.seek(stat.st_size - _TAIL)
        tail = hashlib.sha256(file.read()).hexdigest()[:32]
    name = hashlib.sha256(str(resolved).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return _File(path, f"{name}:{stat.st_size}:{stat.st_mtime_ns}:{tail}", stat.st_size)


def _known_states(connection: Connection, states: list[str]) -> set[str]:
    keys = session_keys_table
    found: set[str] = set()
    for at in range(0, len(states), _BATCH):
        wanted = states[at : at + _BATCH]
        rows = connection.execute(
            select(keys.c["key"]).where(
                keys.c.namespace == FILE_NAMESPACE, keys.c["key"].in_(wanted)
            )
        )
        found.update(row[0] for row in rows)
    return found


def _imported_sources(connection: Connection) -> dict[tuple[str, str], str]:
    """The session of every imported source (its session key ``import:<format>``)."""
    keys = session_keys_table
    rows = connection.execute(
        select(keys.c.namespace, keys.c["key"], keys.c.session_id).where(
            keys.c.namespace.startswith("import:")
        )
    )
    return {(namespace, key): sid for namespace, key, sid in rows}


async def import_path(
    store: SessionStore,
    path: str | os.PathLike[str],
    format: str = "auto",
    progress: Progress | None = None,
    *,
    cwd: Any = None,
) -> ImportSummary:
    """Import every session file under ``path`` (a file or a folder), or what is new in it.

    ``format`` names the format of every file (default ``auto``: each told from its content).
    ``cwd`` is the sessions' folder where a source names no absolute one.

    Raises:
        InvalidArgument: ``path`` does not exist, or ``format`` is unknown.
    """
    return await import_paths(store, [path], format, progress, cwd=cwd)


async def import_paths(
    store: SessionStore,
    paths: Sequence[str | os.PathLike[str]],
    format: str = "auto",
    progress: Progress | None = None,
    *,
    cwd: Any = None,
) -> ImportSummary:
    """:func:`import_path` over several paths (one summary)."""
    if format not in FORMATS:
        raise InvalidArgument(f"unknown import format {format!r}: expected one of {FORMATS}")
    files: dict[Path, Path] = {}  # a file named twice (or by two paths) is read once
    for each in paths:
        for file in await asyncio.to_thread(_walked, Path(each)):
            files.setdefault(file.resolve(), file)
    summary = ImportSummary()
    states: list[_File] = []
    for file in files.values():
        try:
            states.append(await asyncio.to_thread(_state, file))
        except OSError as exc:
            summary.unreadable.append(f"{file}: {exc.strerror}")
    known = await run_read(store, partial(_known_states, states=[s.state for s in states]))
    todo = [s for s in states if s.state not in known]
    summary.unchanged_files = len(states) - len(todo)
    tally = _Tally(progress, len(states), summary.unchanged_files)
    held = await run_read(store, _imported_sources) if todo else {}
    run = _Run(store, summary, format, cwd, tally, held)
    await run.go(todo, [s.path for s in states if s.state in known])
    return summary


@dataclass(slots=True)
class _Piece:
    """A conversation read from one file (the whole of it, or one transcript of it)."""

    session: SourceSession
    file: _File
    digest: str
    index: int
    sub: bool = False
    """Whether it is a sub-agent's transcript (not the conversation's own file)."""


@dataclass(slots=True)
class _Tally:
    """The files done out of all, told to ``progress`` (one for a run and its parts)."""

    progress: Progress | None
    total: int
    done: int


@dataclass(slots=True)
class _Run:
    store: SessionStore
    summary: ImportSummary
    format: str
    cwd: Any
    tally: _Tally
    held: dict[tuple[str, str], str]
    """The session of each source the store held when the run began (by its session key)."""

    def tick(self, path: Path) -> None:
        tally = self.tally
        tally.done += 1
        if tally.progress is not None:
            tally.progress(tally.done, tally.total, str(path))

    async def go(self, todo: list[_File], unchanged: list[Path]) -> None:
        groups: dict[tuple[str, str], list[_File]] = {}
        singles: list[tuple[str, _File]] = []
        threads: dict[Path, codex.Thread] = {}
        for file in todo:
            try:
                fmt = (
                    await asyncio.to_thread(_detect_file, file.path)
                    if self.format == "auto"
                    else self.format
                )
            except InvalidArgument as exc:
                self.summary.unreadable.append(str(exc))
                self.tick(file.path)
                continue
            if fmt is None:
                self.summary.unknown.append(str(file.path))
                self.tick(file.path)
            elif fmt == "claude-code":
                conversation = await asyncio.to_thread(_conversation_of, file.path)
                groups.setdefault((fmt, conversation), []).append(file)
            elif fmt == "codex" and (thread := await asyncio.to_thread(codex.thread_of, file.path)):
                threads[file.path] = thread
                groups.setdefault((fmt, ""), []).append(file)
            else:
                singles.append((fmt, file))
        known = list(threads.values())
        if _missing(known):
            known += await asyncio.to_thread(codex.threads_of, unchanged)
        looked: set[str] = set()
        while missing := _missing(known) - looked:  # parents neither here nor unchanged: on disk
            looked |= missing
            beside = await asyncio.to_thread(codex.rollouts_beside, list(threads), missing)
            known += await asyncio.to_thread(codex.threads_of, beside)
        for file in groups.pop(("codex", ""), []):
            conversation = codex.conversation_of(threads[file.path], known)
            groups.setdefault(("codex", conversation), []).append(file)
        work: list[Callable[[_Run], Awaitable[None]]] = [
            partial(
                _Run.group,
                fmt=fmt,
                members=members,
                conversation=conversation,
                subs={f.path for f in members if _is_sub(fmt, f.path, conversation, threads)},
            )
            for (fmt, conversation), members in groups.items()
        ]
        work += [partial(_Run.single, fmt=fmt, file=file) for fmt, file in singles]
        await self.overlapped(work)

    async def overlapped(self, work: list[Callable[[_Run], Awaitable[None]]]) -> None:
        """Run each piece of ``work`` (one source or file), up to :data:`_AHEAD` at once.

        The next sources are parsed and checked on worker threads while the writer writes
        one, and the writes that reach the writer in one turn commit together, each in a
        savepoint of its own (a source that fails rolls back alone). Each piece reports into
        a summary of its own, joined in the order of ``work``, so the summary does not depend
        on which write ended first.
        """
        parts = [replace(self, summary=ImportSummary()) for _ in work]
        room = asyncio.Semaphore(_AHEAD)

        async def one(piece: Callable[[_Run], Awaitable[None]], part: _Run) -> None:
            try:
                await piece(part)
            finally:
                room.release()

        async with asyncio.TaskGroup() as group:
            for piece, part in zip(work, parts, strict=True):
                await room.acquire()
                group.create_task(one(piece, part))
        for part in parts:
            self.summary.sources += part.summary.sources
            self.summary.unknown += part.summary.unknown
            self.summary.unreadable += part.summary.unreadable
            self.summary.issues.update(part.summary.issues)

    async def group(
        self, fmt: str, members: list[_File], conversation: str, subs: set[Path]
    ) -> None:
        """The transcripts of one conversation (Claude Code's, Codex's), as one source.

        ``subs`` are the sub-agents' transcripts among ``members``.
        """
        spool = ContentSpool() if sum(f.size for f in members) >= _PARK_BYTES else None
        try:
            pieces: list[_Piece] = []
            for file in sorted(members, key=lambda f: f.path in subs):
                try:
                    parsed = await asyncio.to_thread(
                        _read_transcript, fmt, file.path, conversation, file.path in subs, spool
                    )
                except (OSError, ValueError) as exc:
                    self.summary.unreadable.append(f"{file.path}: {exc}")
                    self.tick(file.path)
                    continue
                if parsed.issues:
                    self.summary.issues[str(file.path)] = parsed.issues
                sub = file.path in subs
                pieces += [_Piece(s, file, "", 0, sub) for s in parsed.sessions]
                self.tick(file.path)
            if pieces:
                merged = _merged(pieces)
                merged.source_id = conversation
                await self.source(merged, pieces, spool)
        finally:
            if spool is not None:
                spool.close()

    async def single(self, fmt: str, file: _File) -> None:
        """A file of its own: each conversation in it is a source."""
        if fmt == "soong":
            await self.export(file)
            self.tick(file.path)
            return
        streamed = fmt in _STREAMED
        spool = ContentSpool() if streamed and file.size >= _PARK_BYTES else None
        try:
            try:
                if streamed:
                    parsed = await asyncio.to_thread(_STREAMED[fmt], file.path, None, spool)
                    data = None
                else:
                    data = await asyncio.to_thread(file.path.read_bytes)
                    parsed = await asyncio.to_thread(_PARSERS[fmt], file.path, data)
                digest = (
                    await asyncio.to_thread(file_sha256, file.path)
                    if data is None
                    else (hashlib.sha256(data).hexdigest())
                )
            except (OSError, ValueError) as exc:
                self.summary.unreadable.append(f"{file.path}: {exc}")
                self.tick(file.path)
                return
            del data
            if parsed.issues:
                self.summary.issues[str(file.path)] = parsed.issues
            self.tick(file.path)
            last = len(parsed.sessions) - 1
            for index, session in enumerate(parsed.sessions):
                piece = _Piece(session, file, digest, index)
                await self.source(session, [piece], spool, note_state=index == last)
        finally:
            if spool is not None:
                spool.close()

    async def export(self, file: _File) -> None:
        """A soong export: imported once (its session's id is its identity)."""
        result = SourceResult("soong", "", [str(file.path)], "imported")
        try:
            with file.path.open("rb") as lines:
                done = await import_session(
                    self.store, lines, more_keys=((FILE_NAMESPACE, file.state),)
                )
        except session_keys.KeyTaken:
            result.status = "up to date"
        except InvalidArgument as exc:
            exists = "already exists" in str(exc)
            result.status, result.detail = ("up to date", None) if exists else ("refused", str(exc))
        else:
            result.source_id, result.session_id = done.source_session_id, done.session_id
            result.counts = done.counts
        self.summary.sources.append(result)

    async def source(
        self,
        session: SourceSession,
        pieces: list[_Piece],
        spool: ContentSpool | None,
        note_state: bool = True,
    ) -> None:
        """One conversation: a new session, the new records of a held one, or nothing.

        With ``note_state``, the state of its files is noted in the transaction that writes
        it (a file of several conversations is noted with its last one).
        """
        fmt = session.format
        first = pieces[0]
        source_id = session.source_id = session.source_id or f"sha256:{first.digest}#{first.index}"
        files = [str(p.file.path) for p in pieces]
        result = SourceResult(fmt, source_id, files, "imported")
        self.summary.sources.append(result)
        key = (f"import:{fmt}", source_id)
        states = tuple((FILE_NAMESPACE, p.file.state) for p in pieces if note_state)
        # What the store held when the run began, then (another process may write the same
        # source meanwhile, and a new one's key is claimed in the transaction that writes it)
        # read again: one read of all the keys rather than one per source.
        existing = self.held.get(key)
        for attempt in range(8):
            if attempt:
                existing = await run_read(
                    self.store, partial(session_keys.lookup, namespace=key[0], key=key[1])
                )
            try:
                if existing is None:
                    await self.create(session, pieces, key, states, spool, result)
                else:
                    await self.extend(session, pieces, existing, states, spool, result)
                return
            except (session_keys.KeyTaken, inc.Moved):
                continue
            except NotFound as exc:
                if attempt == 0 and existing is not None:  # deleted since the run began
                    continue
                result.status, result.detail = "refused", str(exc)
                return
            except inc.Conflict as exc:
                result.status, result.detail = "conflict", str(exc)
                return
            except (InvalidArgument, SessionArchived) as exc:
                result.status, result.detail = "refused", str(exc)
                return
        result.status, result.detail = "refused", "written by others all along; try again"

    async def create(
        self,
        session: SourceSession,
        pieces: list[_Piece],
        key: tuple[str, str],
        states: tuple[tuple[str, str], ...],
        spool: ContentSpool | None,
        result: SourceResult,
    ) -> None:
        first = pieces[0]
        where = _folder(session, self.cwd)
        meta = _file_meta(first)
        mtime = datetime.fromtimestamp(first.file.path.stat().st_mtime, UTC)
        built = await asyncio.to_thread(build, session, where, mtime, meta, spool)
        if sum(p.file.size for p in pieces) < _SPILL_BYTES:
            done = await import_session(self.store, built.items, key=key, more_keys=states)
        else:
            with export_file() as export:
                await asyncio.to_thread(write_export, built.lines, export)
                _let_go(session, pieces)
                lines = file_lines(export)
                try:
                    done = await import_session(self.store, lines, key=key, more_keys=states)
                except session_keys.KeyTaken as exc:  # its shape is gone: it cannot be diffed
                    result.status, result.session_id = "refused", exc.session_id
                    result.detail = "another import wrote it meanwhile; import again to continue"
                    return
        result.status, result.session_id, result.counts = "imported", done.session_id, built.counts

    async def extend(
        self,
        session: SourceSession,
        pieces: list[_Piece],
        session_id: str,
        states: tuple[tuple[str, str], ...],
        spool: ContentSpool | None,
        result: SourceResult,
    ) -> None:
        result.session_id = session_id
        found = await inc.held(self.store, session_id)
        where = _folder(session, self.cwd)
        mtime = datetime.fromtimestamp(pieces[0].file.path.stat().st_mtime, UTC)
        transcripts = {p.session.entries[0].transcript for p in pieces if p.session.entries}
        transcripts |= {e.transcript for e in session.entries}
        has_main = any(not e.transcript for e in session.entries)
        own = next((p for p in pieces if not p.sub), None) if has_main else None
        meta = {} if own is None else _file_meta(own)
        scrub = scrub_of(self.store)

        def make() -> inc.Increment:
            rows = build_rows(session, where, mtime, meta, spool, found.known)
            if scrub is not None:
                rows = inc.scrubbed(rows, scrub)
            increment = inc.diff(rows, found, transcripts, has_main)
            if own is not None and inc.lacks_own_file(found):
                increment.metadata = rows.session["metadata_json"]  # it names its own file
            return increment

        increment = await asyncio.to_thread(make)
        if increment.empty and (not increment.move_active or increment.active == found.active):
            result.status = "up to date"
            # Only the files' state is noted (their next import reads none of them).
            with contextlib.suppress(session_keys.KeyTaken, inc.Moved):
                await inc.append(self.store, found, increment, list(states))
            return
        await inc.append(self.store, found, increment, list(states))
        result.status = "continued"
        result.counts = {
            "nodes": len(increment.nodes),
            "events": len(increment.events),
            "agents": len(increment.agents),
            "artifacts": len(increment.artifacts),
        }


def _file_meta(piece: _Piece) -> dict[str, Any]:
    """What a session's ``imported_from`` says of the file it is made from (its own, if come)."""
    meta: dict[str, Any] = {"file": piece.file.path.name, "index": piece.index}
    if piece.digest:
        meta["sha256"] = piece.digest
    return meta


def _let_go(session: SourceSession, pieces: list[_Piece]) -> None:
    """Drop a conversation's parsed shape once its export is on disk.

    The import's own rows and the shape then never add up.
    """
    for each in {id(s): s for s in (session, *(p.session for p in pieces))}.values():
        each.entries, each.events, each.calls = [], [], []


def _merged(pieces: list[_Piece]) -> SourceSession:
    """One conversation made of its transcripts (its own file's first, if it came)."""
    mains = [p.session for p in pieces if not p.sub]
    base = mains[0] if mains else None
    subs = [p.session for p in pieces if p.session is not base]
    if base is None:
        first = subs[0]
        base = SourceSession(first.format, first.source_id, first.cwd, {})
    for sub in subs:
        base.agents += sub.agents
        base.entries += sub.entries
        base.events += sub.events
        base.calls += sub.calls
        base.cwd = base.cwd or sub.cwd
        base.source_id = base.source_id or sub.source_id
    return base


def _is_sub(fmt: str, path: Path, conversation: str, threads: dict[Path, codex.Thread]) -> bool:
    """Whether a transcript of a conversation is a sub-agent's."""
    if fmt == "claude-code":
        return claude_code.is_sub_transcript(path)
    return threads[path].id != conversation


def _read_transcript(
    fmt: str, path: Path, conversation: str, sub: bool, spool: ContentSpool | None
) -> ParsedFile:
    if fmt == "claude-code":
        return claude_code.parse_transcript(path, spool)
    return codex.parse_transcript(path, spool, conversation if sub else None)


def _conversation_of(path: Path) -> str:
    """The Claude Code conversation a transcript belongs to.

    A sub-agent's transcript of the newer layout is in its session's folder; any other names
    its session in its lines' ``sessionId`` (a sub-agent's own name there is not its session).
    """
    sub = claude_code.is_sub_transcript(path)
    if sub and path.parent.name == "subagents":
        return path.parent.parent.name
    try:
        with path.open("rb") as file:
            for _, raw in zip(range(50), file, strict=False):
                try:
                    record = read_json(raw)
                except ValueError:
                    continue
                named = record.get("sessionId") if isinstance(record, dict) else None
                if isinstance(named, str) and named and not (sub and named == path.stem):
                    return named
    except OSError:
        pass
    return path.stem if not sub else f"file:{path.resolve()}"


def _folder(session: SourceSession, cwd: Any) -> str:
    folder = str(Path(cwd if cwd is not None else os.getcwd()).absolute())
    usable = session.cwd and "\x00" not in session.cwd and Path(session.cwd).is_absolute()
    if session.cwd:
        session.metadata.setdefault("source_cwd", session.cwd)
    return session.cwd if usable and session.cwd else folder
