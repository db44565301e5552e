"""Imports into a store made with ``scrub=``: the source's credentials are never stored.

Both ways an import writes are checked: a new conversation (written as one export through
the transfer path) and a transcript that grew (its new records appended to the held
session), which must also find the held, scrubbed records unchanged.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson

from soong_store import SecretScrubber
from soong_store.importers import import_file, import_path
from soong_store.transfer import export_session
from tests.backends import Backend
from tests.helpers import snapshot

SECRET = "sk-ant-api03-" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9z0X1c2V3b4N5m6" + "-_AbCdEfGh"
OTHER = "AKIA" + "IOSFODNN7EXAMPLE"


def record(i: int, text: str) -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {
        "parentUuid": f"s-{i - 1}" if i else None,
        "type": role,
        "uuid": f"s-{i}",
        "sessionId": "scrubbed-session",
        "timestamp": f"2026-01-01T00:00:0{i}Z",
        "cwd": "/work",
        "message": {"role": role, "content": [{"type": "text", "text": text}]},
    }


def transcript(path: Path, texts: list[str]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(record(i, t)) + b"\n" for i, t in enumerate(texts)))
    return path


async def assert_clean(backend: Backend, store: Any, session_id: str, *secrets: str) -> None:
    stored = repr(snapshot(backend))
    out = io.StringIO()
    await export_session(store, session_id, out)
    for secret in secrets:
        assert secret not in stored
        assert secret not in out.getvalue()


async def test_an_imported_conversation_is_scrubbed(backend: Backend, tmp_path: Path) -> None:
    path = transcript(tmp_path / "s.jsonl", [f"my key is {SECRET}", "noted", f"id {OTHER}"])
    async with backend.store(scrub=SecretScrubber()) as store:
        [session] = await import_file(store, path, "claude-code")
        nodes = await store.list_nodes(session.session_id)
        texts = [node.content[0].text for node in nodes]  # type: ignore[union-attr]
        assert texts == [
            "my key is [REDACTED:anthropic-api-key]",
            "noted",
            "id [REDACTED:aws-access-key-id]",
        ]
        await assert_clean(backend, store, session.session_id, SECRET, OTHER)


async def test_a_grown_transcript_continues_scrubbed(backend: Backend, tmp_path: Path) -> None:
    folder = tmp_path / "agent-home"
    folder.mkdir()
    texts = [f"key {SECRET}", "ok"]
    path = transcript(folder / "scrubbed-session.jsonl", texts)
    async with backend.store(scrub=SecretScrubber()) as store:
        first = await import_path(store, folder)
        assert [s.status for s in first.sources] == ["imported"]
        transcript(path, [*texts, f"and {OTHER}", "done"])
        grown = await import_path(store, folder)
        assert [s.status for s in grown.sources] == ["continued"], grown.lines()
        sid = grown.sources[0].session_id
        assert len(await store.list_nodes(sid)) == 4
        await assert_clean(backend, store, sid, SECRET, OTHER)
        path.touch()
        again = await import_path(store, folder)
        assert [s.status for s in again.sources] == ["up to date"], again.lines()


async def test_a_home_imported_unscrubbed_is_a_conflict_when_scrubbed(
    backend: Backend, tmp_path: Path
) -> None:
    folder = tmp_path / "agent-home"
    folder.mkdir()
    path = transcript(folder / "scrubbed-session.jsonl", [f"key {SECRET}", "ok"])
    async with backend.store() as plain:
        await import_path(plain, folder)
    path.touch()  # read again, not skipped as an unchanged file
    async with backend.store(scrub=SecretScrubber()) as store:
        again = await import_path(store, folder)
        assert [s.status for s in again.sources] == ["conflict"], again.lines()
