"""``check`` accepts owners and keys the API writes and reports one it would refuse."""

from __future__ import annotations

from soong_store import SessionStore
from soong_store.check.run import check_store
from tests.conftest import text
from tests.helpers import execute


async def test_owned_and_keyed_sessions_check_clean(store: SessionStore) -> None:
    made = await store.create_session("/p", owner="alice@example.com", key="chat: 7")
    await store.append_node(made.session_id, "user", "message", text("hi"))
    await store.create_session("/p", key="chat: 7")
    report = await check_store(store)
    assert report.ok, report.problems


async def test_a_bad_owner_is_reported_with_its_session(store: SessionStore) -> None:
    made = await store.create_session("/p", owner="alice")
    execute(
        store, "UPDATE sessions SET owner = 'a b' WHERE session_id = :sid", {"sid": made.session_id}
    )
    report = await check_store(store)
    assert not report.ok
    assert any(made.session_id in str(p) and "owner" in str(p) for p in report.problems)
