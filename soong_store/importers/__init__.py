"""Importers: other tools' session files turned into sessions, through the store's import path.

``import_file(store, path, format="auto")`` reads a file of one of :data:`FORMATS`, builds each
conversation in it as a file in the store's own export format, and hands that to
:func:`soong_store.transfer.import_session`, which checks it with the rules ``check`` uses and
writes it all or nothing. :func:`import_report` does the same and also says what happened (the
sessions written, their counts, the lines skipped or recovered, the conversations already in
the store). A malformed line is skipped and counted, never fatal to the rest of the file.

A conversation whose source session id (with its format) names a session already (a session key,
:mod:`soong_store.write.session_keys`, claimed in the transaction that writes the session) is not
imported again; the report names the session that holds it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from soong_store.errors import InvalidArgument
from soong_store.importers._formats import _PARSERS, _STREAMED, FORMATS, _detect_file
from soong_store.importers._model import LineIssue, ParsedFile
from soong_store.importers._read import file_lines, file_sha256
from soong_store.importers._rows import build
from soong_store.importers._spool import ContentSpool, export_file, write_export
from soong_store.importers._summary import ImportSummary, SourceResult
from soong_store.importers.sources import import_path, import_paths
from soong_store.model.records import SessionRecord
from soong_store.store import SessionStore, run_read
from soong_store.transfer import import_session
from soong_store.write import session_keys

__all__ = [
    "FORMATS",
    "detect_format",
    "ImportReport",
    "ImportSummary",
    "LineIssue",
    "SessionSummary",
    "SourceResult",
    "import_file",
    "import_path",
    "import_paths",
    "import_report",
]


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One conversation of the file: the session written (or found), and what it holds."""

    source_id: str
    session_id: str
    counts: dict[str, int]
    already_imported: bool = False
    error: str | None = None
    """Why the store refused this conversation (nothing of it was written), if it did."""


@dataclass(slots=True)
class ImportReport:
    """What an import of one file did."""

    path: str
    format: str
    sessions: list[SessionRecord] = field(default_factory=list)
    summaries: list[SessionSummary] = field(default_factory=list)
    issues: list[LineIssue] = field(default_factory=list)

    @property
    def skipped_lines(self) -> list[LineIssue]:
        """The lines nothing was imported from."""
        return [i for i in self.issues if i.action == "skipped"]

    @property
    def recovered_lines(self) -> list[LineIssue]:
        """The lines that were read in pieces."""
        return [i for i in self.issues if i.action == "recovered"]

    @property
    def unfinished_lines(self) -> list[LineIssue]:
        """A last line still being written (none of it imported)."""
        return [i for i in self.issues if i.action == "unfinished"]

    def as_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready mapping."""
        return {
            "path": self.path,
            "format": self.format,
            "sessions": [
                {
                    "source_id": s.source_id,
                    "session_id": s.session_id,
                    "already_imported": s.already_imported,
                    "error": s.error,
                    "counts": s.counts,
                }
                for s in self.summaries
            ],
            "issues": [
                {"line": i.line, "action": i.action, "reason": i.reason} for i in self.issues
            ],
        }

    def lines(self) -> list[str]:
        """The report as lines of text for a person."""
        out = [f"{self.path}: {self.format}, {len(self.sessions)} session(s) written"]
        for s in self.summaries:
            if s.already_imported:
                out.append(f"  {s.source_id}: already imported as {s.session_id}, skipped")
                continue
            if s.error is not None:
                out.append(f"  {s.source_id}: refused, nothing written: {s.error}")
                continue
            shown = ", ".join(f"{k} {v}" for k, v in s.counts.items() if v)
            out.append(f"  {s.session_id} (from {s.source_id}): {shown}")
        for name, found in (
            ("skipped", self.skipped_lines),
            ("recovered", self.recovered_lines),
            ("unfinished", self.unfinished_lines),
        ):
            if found:
                out.append(f"  {len(found)} line(s) {name}:")
                out += [f"    line {i.line}: {i.reason}" for i in found]
        return out


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of a session file, told from its content (one of :data:`FORMATS` but auto).

    A file of JSON lines is told from its first megabyte; only a file that may be one JSON
    document is read whole.

    Raises:
        InvalidArgument: the file cannot be read, or its format cannot be told.
    """
    source = Path(path)
    fmt = _detect_file(source)
    if fmt is None:
        raise InvalidArgument(f"cannot tell the format of {str(source)!r}; name it with --format")
    return fmt


async def import_file(
    store: SessionStore, path: str | os.PathLike[str], format: str = "auto", *, cwd: Any = None
) -> list[SessionRecord]:
    """Import the conversations of one file; return the sessions written.

    Raises:
        InvalidArgument: the file cannot be read, its format is unknown or cannot be told, or
            (format ``soong``) the store refuses the export; nothing was written for it.
    """
    return (await import_report(store, path, format, cwd=cwd)).sessions


async def import_report(
    store: SessionStore, path: str | os.PathLike[str], format: str = "auto", *, cwd: Any = None
) -> ImportReport:
    """Like :func:`import_file`, returning the whole :class:`ImportReport`.

    ``cwd`` is the session's folder where the source names no absolute one (default: the
    current directory).
    """
    source = Path(path)
    if format not in FORMATS:
        raise InvalidArgument(f"unknown import format {format!r}: expected one of {FORMATS}")
    fmt = await asyncio.to_thread(_detect_file, source) if format == "auto" else format
    if fmt is None or fmt not in FORMATS:
        raise InvalidArgument(f"cannot tell the format of {str(source)!r}; name it with format=")
    report = ImportReport(str(source), fmt)
    if fmt == "soong":  # read a line at a time, never whole
        try:
            lines = source.open("rb")
        except OSError as exc:
            raise InvalidArgument(f"cannot read {str(source)!r}: {exc.strerror}") from None
        with lines:
            imported = await import_session(store, lines)
        report.sessions.append(await store.get_session(imported.session_id))
        report.summaries.append(
            SessionSummary(imported.source_session_id, imported.session_id, imported.counts)
        )
        return report
    streamed = fmt in _STREAMED
    try:
        data = None if streamed else await asyncio.to_thread(source.read_bytes)
        if data is not None:
            digest = hashlib.sha256(data).hexdigest()
        else:
            digest = await asyncio.to_thread(file_sha256, source)
        mtime = datetime.fromtimestamp(source.stat().st_mtime, UTC)
    except OSError as exc:
        raise InvalidArgument(f"cannot read {str(source)!r}: {exc.strerror}") from None
    spool = ContentSpool() if streamed else None
    try:
        try:
            if streamed:
                parsed = await asyncio.to_thread(_STREAMED[fmt], source, None, spool)
            else:
                assert data is not None
                parsed = await asyncio.to_thread(_PARSERS[fmt], source, data)
        except (OSError, ValueError) as exc:
            raise InvalidArgument(f"cannot import {str(source)!r} as {fmt}: {exc}") from None
        del data  # the parsed sessions hold what the import needs
        await _write_sessions(store, report, parsed, fmt, source, digest, mtime, cwd, spool)
    finally:
        if spool is not None:
            spool.close()
    return report


async def _write_sessions(
    store: SessionStore,
    report: ImportReport,
    parsed: ParsedFile,
    fmt: str,
    source: Path,
    digest: str,
    mtime: datetime,
    cwd: Any,
    spool: ContentSpool | None,
) -> None:
    """Import each conversation of a parsed file, noting what happened in ``report``."""
    report.issues = parsed.issues
    folder = str(Path(cwd if cwd is not None else os.getcwd()).absolute())
    sessions, parsed.sessions = parsed.sessions[::-1], []
    for index in range(len(sessions)):
        session = sessions.pop()  # let go once its export is written
        source_id = session.source_id = session.source_id or f"sha256:{digest}#{index}"
        key = (f"import:{fmt}", source_id)
        existing = await run_read(store, partial(session_keys.lookup, namespace=key[0], key=key[1]))
        if existing is not None:
            report.summaries.append(SessionSummary(source_id, existing, {}, True))
            continue
        usable = session.cwd and "\x00" not in session.cwd and Path(session.cwd).is_absolute()
        where = session.cwd if usable and session.cwd else folder
        if session.cwd:
            session.metadata.setdefault("source_cwd", session.cwd)
        meta = {"file": source.name, "sha256": digest, "index": index}
        with export_file() as export:
            try:
                built = await asyncio.to_thread(build, session, where, mtime, meta, spool)
                del session
                await asyncio.to_thread(write_export, built.lines, export)
                if spool is not None and not sessions:  # the last one: its content is read
                    spool.close()
                imported = await import_session(store, file_lines(export), key=key)
            except session_keys.KeyTaken as exc:  # another import wrote it meanwhile
                report.summaries.append(SessionSummary(source_id, exc.session_id, {}, True))
                continue
            except InvalidArgument as exc:  # one conversation refused; the others still go in
                report.summaries.append(SessionSummary(source_id, "", {}, error=str(exc)))
                continue
        report.sessions.append(await store.get_session(imported.session_id))
        report.summaries.append(SessionSummary(source_id, built.session_id, built.counts))
