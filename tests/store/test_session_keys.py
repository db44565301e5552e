"""Session keys: an outside name finds one session, taken once, and goes with its session."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from soong_store import SessionStore
from soong_store.importers import import_report
from soong_store.store import run_read
from soong_store.write import session_keys
from tests.importers.test_importers_corpus import CORPUS

PI_SMALL = CORPUS / "pi/agent-sessions__pi-small.jsonl"


async def key_of(store: SessionStore, namespace: str, key: str) -> str | None:
    return await run_read(store, lambda c: session_keys.lookup(c, namespace, key))


async def test_concurrent_imports_of_one_file_write_one_session(
    store: SessionStore, tmp_path: Path
) -> None:
    copies = [shutil.copy(PI_SMALL, tmp_path / f"copy{i}.jsonl") for i in range(3)]
    reports = await asyncio.gather(*(import_report(store, p, cwd=tmp_path) for p in copies))
    written = [s for r in reports for s in r.sessions]
    assert len(written) == 1
    assert len(await store.list_sessions()) == 1
    skipped = [s for r in reports for s in r.summaries if s.already_imported]
    assert [s.session_id for s in skipped] == [written[0].session_id] * 2


async def test_an_import_claims_its_source_key(store: SessionStore, tmp_path: Path) -> None:
    report = await import_report(store, PI_SMALL, cwd=tmp_path)
    summary = report.summaries[0]
    assert await key_of(store, "import:pi", summary.source_id) == summary.session_id


async def test_a_deleted_session_lets_go_of_its_key(store: SessionStore, tmp_path: Path) -> None:
    first = await import_report(store, PI_SMALL, cwd=tmp_path)
    await store.delete_session(first.sessions[0].session_id)
    assert await key_of(store, "import:pi", first.summaries[0].source_id) is None
    again = await import_report(store, PI_SMALL, cwd=tmp_path)
    assert len(again.sessions) == 1 and not again.summaries[0].already_imported
