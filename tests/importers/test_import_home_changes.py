"""A file that changes while it is imported: imported as it was when read, or reported.

A transcript is appended to, truncated or rewritten (one record's text changed, same size) at
one of three moments of its import: in the middle of the parser's first reading of it, between
that reading and the second (the parsers read a file twice: its links, then its records), or
after it was read and before its session is written. The import then either holds exactly what
one import of the file as it was gives, or reports the file as changed while it was read and
writes nothing of it; never a mix. ``check`` passes after every import, and the next import
brings the store to the file as it now is (or reports the changed history as a conflict).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import _read, import_path, sources
from tests.importers.conftest import CORPUS, session_shapes


@dataclass(frozen=True)
class Source:
    """A corpus file, and the record text a rewrite changes (in line ``line``, same size)."""

    path: Path
    line: int
    old: bytes
    new: bytes


FILES = {
    "claude-code": Source(  # larger than a reader's buffer: a cut shows in the first reading
        CORPUS / "claude-code" / "agent-sessions__claude-small.jsonl",
        19,
        b'"text":"Partial reply"',
        b'"text":"Partial roply"',
    ),
    "codex": Source(
        CORPUS / "codex" / "agent-sessions__codex-large.jsonl",
        4,
        b'"text":"Start"',
        b'"text":"Stort"',
    ),
    "pi": Source(
        CORPUS / "pi" / "agent-sessions__openclaw-large.jsonl",
        9,
        b'"text":"Done"',
        b'"text":"Dune"',
    ),
}
KEPT = 4
"""The lines a truncated file keeps; an appended-to file starts without its last four."""


def _versions(source: Source, change: str) -> tuple[bytes, bytes]:
    """The file before and after the change."""
    data = source.path.read_bytes()
    lines = data.splitlines(keepends=True)
    if change == "append":
        return b"".join(lines[:-4]), data
    if change == "truncate":
        return data, b"".join(lines[:KEPT])
    changed = lines[source.line - 1].replace(source.old, source.new, 1)
    assert changed != lines[source.line - 1] and len(changed) == len(lines[source.line - 1])
    return data, b"".join(lines[: source.line - 1] + [changed] + lines[source.line :])


_SHAPES: dict[bytes, dict[str, Any]] = {}


async def _one_shot(root: Path, name: str, data: bytes) -> dict[str, Any]:
    """What one import of a file holding ``data`` gives."""
    if data not in _SHAPES:
        (root / "file").mkdir(parents=True)
        (root / "file" / name).write_bytes(data)
        async with SessionStore(home=root / "store") as store:
            await import_path(store, root / "file" / name, cwd=CORPUS)
            _SHAPES[data] = await session_shapes(store)
    return _SHAPES[data]


def _change(target: Path, before: bytes, after: bytes, change: str) -> None:
    """Change the file in place, as a tool writing it would (no rename)."""
    with target.open("r+b") as file:
        if change == "append":
            file.seek(0, 2)
            file.write(after[len(before) :])
        else:
            file.truncate(0) if change == "truncate" else file.seek(0)
            file.seek(0)
            file.write(after)


def _hook(
    monkeypatch: pytest.MonkeyPatch, moment: str, at_line: int, act: Callable[[], None]
) -> list[bool]:
    """Run ``act`` once at ``moment`` of the import; the returned list says it ran.

    In the first reading it runs after the reading's line ``at_line``; between readings, when
    the first reading ends (where it went to the end or its parser stopped it early).
    """
    ran: list[bool] = []

    def once() -> None:
        if not ran:
            ran.append(True)
            act()

    if moment == "before write":
        build = sources.build

        def build_then_change(*args: Any, **kwargs: Any) -> Any:
            once()
            return build(*args, **kwargs)

        monkeypatch.setattr(sources, "build", build_then_change)
    elif moment == "between readings":
        readings = _read.JsonLines.__iter__

        def read_then_change(self: _read.JsonLines) -> Iterator[tuple[int, dict[str, Any]]]:
            try:
                yield from readings(self)
            finally:
                once()

        monkeypatch.setattr(_read.JsonLines, "__iter__", read_then_change)
    else:  # a file read a line at a time (a small one is read in one call: no moment inside)
        monkeypatch.setattr(_read, "_WHOLE", 0)
        read_line = _read._read_line
        calls = [0]

        def read_line_then_change(file: BinaryIO) -> bytes:
            line = read_line(file)
            calls[0] += 1
            if calls[0] == at_line:
                once()
            return line

        monkeypatch.setattr(_read, "_read_line", read_line_then_change)
    return ran


def _outcome(fmt: str, change: str, moment: str) -> str:
    """What the first import holds: the file ``before`` or ``after`` the change, or ``reported``.

    A Codex rollout's first reading stops at its ``session_meta`` (its thread, all that reading
    needs); the second, whole reading then reads the file as it is by then, which still begins
    as the first reading saw it. The change "in the first reading" (at the third line read)
    falls in that second reading, after the reader has taken this small file's bytes.
    """
    if moment == "before write":
        return "before"
    if fmt == "codex":
        return "after" if moment == "between readings" else "before"
    if change == "append":
        return "before"
    if change == "truncate":
        return "reported"
    return "reported"


@pytest.mark.parametrize("moment", ["first reading", "between readings", "before write"])
@pytest.mark.parametrize("change", ["append", "truncate", "rewrite"])
@pytest.mark.parametrize("fmt", sorted(FILES))
async def test_a_file_changed_while_imported_is_imported_as_read_or_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, change: str, moment: str
) -> None:
    source = FILES[fmt]
    before, after = _versions(source, change)
    shapes = {
        "before": await _one_shot(tmp_path / "before", source.path.name, before),
        "after": await _one_shot(tmp_path / "after", source.path.name, after),
        "reported": {},
    }
    target = tmp_path / "home" / source.path.name
    target.parent.mkdir()
    target.write_bytes(before)
    # In the first reading: after the line a rewrite changes (the reader has it already).
    at_line = source.line if change == "rewrite" else 3
    ran = _hook(monkeypatch, moment, at_line, lambda: _change(target, before, after, change))
    outcome = _outcome(fmt, change, moment)
    async with SessionStore(home=tmp_path / "store") as store:
        summary = await import_path(store, target, cwd=CORPUS)
        assert ran
        monkeypatch.undo()
        reported = [u for u in summary.unreadable if "changed while it was read" in u]
        assert bool(reported) == (outcome == "reported"), summary.lines()
        statuses = [s.status for s in summary.sources]
        assert statuses == ([] if reported else ["imported"]), summary.lines()
        assert await session_shapes(store) == shapes[outcome]
        assert (await check_store(store)).ok

        again = await import_path(store, target, cwd=CORPUS)
        assert not again.unreadable, again.lines()
        if outcome == "before" and change != "append":  # its history changed since
            assert [s.status for s in again.sources] == ["conflict"], again.lines()
            assert await session_shapes(store) == shapes["before"]
        else:
            assert await session_shapes(store) == shapes["after"]
        assert (await check_store(store)).ok


@pytest.mark.parametrize("fmt", sorted(FILES))
async def test_a_last_line_still_being_written_waits_for_the_next_import(
    tmp_path: Path, fmt: str
) -> None:
    source = FILES[fmt]
    data = source.path.read_bytes()
    lines = data.splitlines(keepends=True)
    half = b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2]
    target = tmp_path / "home" / source.path.name
    target.parent.mkdir()
    target.write_bytes(half)
    async with SessionStore(home=tmp_path / "store") as store:
        first = await import_path(store, target, cwd=CORPUS)
        (found,) = first.issues.values()
        assert [(i.line, i.action) for i in found] == [(len(lines), "unfinished")]
        assert not any("skipped" in line for line in first.lines())
        assert any("still being written" in line for line in first.lines())
        with target.open("ab") as file:  # the writer finishes its line
            file.write(lines[-1][len(lines[-1]) // 2 :])
        second = await import_path(store, target, cwd=CORPUS)
        assert [s.status for s in second.sources] == ["continued"]
        assert not second.issues
        assert await session_shapes(store) == await _one_shot(
            tmp_path / "whole", source.path.name, data
        )
        assert (await check_store(store)).ok
