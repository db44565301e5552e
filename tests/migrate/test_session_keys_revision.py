"""Revision 0003 keys the sessions an import wrote before it, from their metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_store import SessionStore
from soong_store.backends.sqlite.search import DROP
from soong_store.importers import import_report
from tests.conftest import connect_raw, db_path, undo_owner_revision
from tests.importers.test_importers_corpus import CORPUS

pytestmark = pytest.mark.sqlite


async def test_sessions_imported_before_the_revision_are_still_found(tmp_path: Path) -> None:
    home = tmp_path / "home"
    source = CORPUS / "pi/agent-sessions__pi-small.jsonl"
    async with SessionStore(home=home) as store:
        first = await import_report(store, source, cwd=tmp_path)
    raw = connect_raw(db_path(home))
    try:  # the database as revision 0002 left it: no keys
        raw.execute("DROP TABLE session_keys")
        for statement in DROP:  # and revision 0004's search index, which comes after it
            raw.execute(statement)
        raw.execute("DROP TABLE search_text")
        raw.execute("DROP TABLE home_identity")  # and revision 0007's home id
        raw.execute("DROP TABLE keyed_states")  # and revision 0008's keyed states
        raw.execute("DROP TABLE run_usage")  # and revision 0010's usage ledger
        undo_owner_revision(raw)  # and revision 0009's owners and keys
        raw.execute("UPDATE alembic_version SET version_num = '0002'")
        raw.commit()
    finally:
        raw.close()
    async with SessionStore(home=home) as store:
        again = await import_report(store, source, cwd=tmp_path)
        assert again.sessions == []
        assert again.summaries[0].already_imported
        assert again.summaries[0].session_id == first.sessions[0].session_id
