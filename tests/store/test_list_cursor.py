"""``list_sessions(after=...)``: pages by key, newest first, none lost or repeated."""

from __future__ import annotations

import pytest

from soong_store import InvalidArgument, SessionStore
from tests.conftest import text

pytestmark = pytest.mark.asyncio


async def test_pages_by_key_cover_the_listing_once(store: SessionStore) -> None:
    sids = [(await store.create_session(cwd="/p")).session_id for _ in range(7)]
    await store.append_node(sids[2], "user", "message", text("moves it to the top"))
    everything = [s.session_id for s in await store.list_sessions()]
    paged: list[str] = []
    page = await store.list_sessions(limit=3)
    while page:
        paged += [s.session_id for s in page]
        page = await store.list_sessions(limit=3, after=page[-1])
    assert paged == everything
    assert paged[0] == sids[2]
    assert sorted(paged) == sorted(sids)


async def test_a_key_page_keeps_the_status_filter(store: SessionStore) -> None:
    sids = [(await store.create_session(cwd="/p")).session_id for _ in range(4)]
    await store.archive_session(sids[1])
    active = await store.list_sessions(status="active")
    rest = await store.list_sessions(status="active", after=active[0])
    assert [s.session_id for s in rest] == [s.session_id for s in active[1:]]
    assert sids[1] not in [s.session_id for s in rest]


@pytest.mark.parametrize("bad", ["sess_20260101_000000_abcd", 3, {"session_id": "x"}])
async def test_after_must_be_a_listed_record(store: SessionStore, bad: object) -> None:
    await store.create_session(cwd="/p")
    with pytest.raises(InvalidArgument, match="after"):
        await store.list_sessions(after=bad)  # type: ignore[arg-type]
