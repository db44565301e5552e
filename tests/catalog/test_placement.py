"""Where pairs live: SQLite moves idle ones to shard files, PostgreSQL keeps every one in place.

With the move limits made small (a hot bound of 3), ten written sessions are more than the main
file keeps on SQLite; on PostgreSQL the catalog names the database itself for every session and
nothing moves. Either way every read returns what it returned before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from soong_store.catalog import lookup as catalog
from tests.backends import Backend
from tests.conftest import text
from tests.shard_support import limited, placements, settle

pytestmark = pytest.mark.asyncio


@pytest.fixture
def small_limits() -> Iterator[Any]:
    with limited() as limits:
        yield limits


async def test_idle_pairs_move_only_on_a_backend_that_places_them(
    backend: Backend, small_limits: Any
) -> None:
    async with backend.store() as store:
        sids = []
        for i in range(10):
            sid = (await store.create_session(cwd="/p")).session_id
            await store.append_node(sid, "user", "message", text(f"q{i}"))
            await store.append_node(sid, "assistant", "message", text(f"a{i}"))
            sids.append(sid)
        before = {sid: (await store.active_path(sid), await store.timeline(sid)) for sid in sids}
        if backend.name == "sqlite":
            placed = await settle(store)
            assert {file for file, _ in placed.values()} != {catalog.MAIN}
        else:
            await store.append_node(sids[0], "user", "message", text("again"))
            placed = await placements(store)
            assert {file for file, _ in placed.values()} == {catalog.MAIN}
            assert {epoch for _, epoch in placed.values()} == {0}
            before.pop(sids[0])
        for sid, (path, events) in before.items():
            assert await store.active_path(sid) == path
            assert await store.timeline(sid) == events
