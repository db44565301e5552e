"""A revision that changes every session's tables reaches them on PostgreSQL (no shards there)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import soong_store
from soong_store import SessionStore
from soong_store.check.run import check_store
from tests.conftest import text as text_block
from tests.pair_revision import install_revision, use_newest_factory

pytestmark = pytest.mark.postgresql


def nodes_columns(url: str) -> dict[str, list[str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT table_name, column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name LIKE 'nodes%' "
                    "ORDER BY table_name, ordinal_position"
                )
            ).all()
    finally:
        engine.dispose()
    found: dict[str, list[str]] = {}
    for table, column in rows:
        found.setdefault(str(table), []).append(str(column))
    return found


async def test_revision_adds_the_column_to_every_nodes_table(
    pg_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home, url=pg_database_url) as store:
        sids = []
        for i in range(3):
            sid = (await store.create_session(cwd="/p")).session_id
            await store.append_node(sid, "user", "message", text_block(f"q{i}"))
            sids.append(sid)
    before = nodes_columns(pg_database_url)
    assert len(before) == 3 and not any("flags" in cols for cols in before.values())
    revision = install_revision(tmp_path, monkeypatch)
    soong_store.upgrade(pg_database_url)
    assert soong_store.current_revision(pg_database_url) == revision
    after = nodes_columns(pg_database_url)
    assert {name: cols[:-1] for name, cols in after.items()} == before
    assert all(cols[-1] == "flags" for cols in after.values())
    use_newest_factory(monkeypatch)
    async with SessionStore(home=home, url=pg_database_url) as store:
        await store.append_node(sids[0], "assistant", "message", text_block("a"))
        assert len(await store.active_path(sids[0])) == 2
        assert (await check_store(store)).ok
