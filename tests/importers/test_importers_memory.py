"""Memory of an import of another agent's file: the tree's shape, not the content (issue 11)."""

from __future__ import annotations

import errno
import io
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from soong_store import SessionStore, StorageError
from soong_store.importers import _spool, import_report
from tests.importers.test_importers import all_nodes

TEXT = 20_000
"""Bytes of text on each line of the long transcript."""


def claude(path: Path, session: str, lines: int, size: int) -> Path:
    """A linear Claude Code transcript, each line ``size`` characters of text of its own."""
    with path.open("wb") as out:
        for i in range(lines):
            role = "user" if i % 2 == 0 else "assistant"
            record = {
                "parentUuid": f"{session}-{i - 1}" if i else None,
                "type": role,
                "uuid": f"{session}-{i}",
                "sessionId": session,
                "timestamp": "2026-01-01T00:00:00Z",
                "message": {"role": role, "content": [{"type": "text", "text": _text(i, size)}]},
            }
            out.write(orjson.dumps(record) + b"\n")
    return path


def pi(path: Path, session: str, lines: int, size: int) -> Path:
    """A linear pi session of ``lines`` messages, each ``size`` characters of text of its own."""
    with path.open("wb") as out:
        out.write(orjson.dumps({"type": "session", "version": 3, "id": session}) + b"\n")
        for i in range(lines):
            record = {
                "type": "message",
                "id": f"{session}-{i}",
                "parentId": f"{session}-{i - 1}" if i else session,
                "timestamp": "2026-01-01T00:00:00Z",
                "message": {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": _text(i, size),
                },
            }
            out.write(orjson.dumps(record) + b"\n")
    return path


def codex(path: Path, session: str, lines: int, size: int) -> Path:
    """A Codex rollout of ``lines`` message items, each ``size`` characters of text of its own."""
    with path.open("wb") as out:
        out.write(orjson.dumps({"type": "session_meta", "payload": {"id": session}}) + b"\n")
        for i in range(lines):
            item = {
                "type": "message",
                "role": "user" if i % 2 == 0 else "assistant",
                "content": [{"type": "output_text", "text": _text(i, size)}],
            }
            record = {"type": "response_item", "timestamp": "2026-01-01T00:00:00Z", "payload": item}
            out.write(orjson.dumps(record) + b"\n")
    return path


def _text(index: int, size: int) -> str:
    return (f"{index:07d} " * (size // 8 + 1))[:size]


@pytest.mark.parametrize("write", [claude, codex, pi])
async def test_a_long_transcript_is_imported_holding_a_few_entries_at_a_time(
    store: SessionStore, tmp_path: Path, write: Callable[[Path, str, int, int], Path]
) -> None:
    lines = 1500  # 30 MB of text
    path = write(tmp_path / "long.jsonl", "long", lines, TEXT)
    warm = write(tmp_path / "warm.jsonl", "warm", 4, 100)
    await import_report(store, warm, cwd=tmp_path)  # first uses of the store's caches
    tracemalloc.start()
    try:
        report = await import_report(store, path, cwd=tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.summaries[0].counts["nodes"] == lines
    nodes = await all_nodes(store, report.sessions[0].session_id)
    assert [orjson.loads(n["content_json"])[-1]["text"] for n in nodes] == [
        _text(i, TEXT) for i in range(lines)
    ]
    # What the import holds besides the shape is bounded by the store (a page of rows, the
    # search index's pending megabyte), not by the file: a quarter of the lines is ample.
    held = peak / TEXT
    assert held < lines / 4, f"{peak:,} bytes at the peak: {held:.0f} lines' text of {lines}"


class _FullDisk(io.BytesIO):
    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


async def test_a_full_disk_under_the_parked_content_is_a_storage_error(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = claude(tmp_path / "t.jsonl", "full", 3, 100)
    monkeypatch.setattr(_spool.tempfile, "TemporaryFile", _FullDisk)
    with pytest.raises(StorageError, match="No space left on device"):
        await import_report(store, path, cwd=tmp_path)
    assert await store.list_sessions() == []
