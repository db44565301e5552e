"""What an import of paths did: :class:`ImportSummary`, a :class:`SourceResult` per source."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from soong_store.importers._model import LineIssue


@dataclass(slots=True)
class SourceResult:
    """What the import did with one source (a conversation).

    ``status`` is ``imported`` (a new session), ``continued`` (new records appended),
    ``up to date`` (nothing new), ``conflict`` (its earlier records changed; nothing written)
    or ``refused`` (the store refused it; nothing written). ``counts`` are what was written.
    """

    format: str
    source_id: str
    files: list[str]
    status: str
    session_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    detail: str | None = None

    def line(self) -> str:
        """One line for a person."""
        more = len(self.files) - 1
        where = self.files[0] + (f" (+{more} file(s))" if more else "")
        shown = ", ".join(f"{k} {v}" for k, v in self.counts.items() if v)
        text = f"{self.status}: {where} [{self.format}]"
        if self.session_id:
            text += f" -> {self.session_id}"
        if shown:
            text += f": {shown}"
        if self.detail:
            text += f" ({self.detail})"
        return text


@dataclass(slots=True)
class ImportSummary:
    """What :func:`import_path` did: a result per source, the files it could not tell."""

    sources: list[SourceResult] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    """Files whose format could not be told (nothing imported from them)."""
    unreadable: list[str] = field(default_factory=list)
    """Files that could not be read or parsed, with why."""
    unchanged_files: int = 0
    """Files skipped unread: their size, time and tail are those of their last import."""
    issues: dict[str, list[LineIssue]] = field(default_factory=dict)
    """The lines skipped or recovered, by file."""

    def of(self, status: str) -> list[SourceResult]:
        """The sources that ended with ``status``."""
        return [s for s in self.sources if s.status == status]

    def lines(self) -> list[str]:
        """The summary as lines of text for a person: one per source, then the totals."""
        out = [s.line() for s in self.sources]
        for path, found in self.issues.items():
            skipped = sum(i.action == "skipped" for i in found)
            if skipped:
                out.append(f"{path}: {skipped} line(s) skipped")
            if any(i.action == "unfinished" for i in found):
                out.append(
                    f"{path}: its last line is still being written (the next import reads it)"
                )
        out += [f"unknown format: {p}" for p in self.unknown]
        out += [f"unreadable: {p}" for p in self.unreadable]
        tally = {k: len(self.of(k)) for k in _STATUSES}
        shown = ", ".join(f"{n} {k}" for k, n in tally.items() if n)
        out.append(
            f"{len(self.sources)} source(s){': ' + shown if shown else ''}; "
            f"{self.unchanged_files} file(s) unchanged, {len(self.unknown)} of unknown format"
        )
        return out

    def as_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready mapping."""
        return {
            "sources": [
                {
                    "format": s.format,
                    "source_id": s.source_id,
                    "files": s.files,
                    "status": s.status,
                    "session_id": s.session_id,
                    "counts": s.counts,
                    "detail": s.detail,
                }
                for s in self.sources
            ],
            "unknown": self.unknown,
            "unreadable": self.unreadable,
            "unchanged_files": self.unchanged_files,
            "issues": {
                p: [{"line": i.line, "action": i.action, "reason": i.reason} for i in found]
                for p, found in self.issues.items()
            },
        }


_STATUSES = ("imported", "continued", "up to date", "conflict", "refused")
