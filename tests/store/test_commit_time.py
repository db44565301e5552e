"""The rows one writer transaction writes carry one time: the transaction's."""

from __future__ import annotations

import pytest

from soong_store import SessionStore
from tests.conftest import text

pytestmark = pytest.mark.asyncio


async def test_a_node_its_event_and_the_session_update_share_one_time(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    node = await store.append_node(sid, "user", "message", text("q"))
    [event] = [e for e in await store.timeline(sid) if e.node_id == node.node_id]
    session = await store.get_session(sid)
    assert event.created_at == node.created_at == session.updated_at


async def test_the_nodes_of_one_unit_share_one_time_and_the_next_unit_is_later(
    store: SessionStore,
):
    sid = (await store.create_session(cwd=".")).session_id
    async with store.transaction(sid) as tx:
        first = tx.add_node("user", "message", text("q"))
        tx.add_node("assistant", "message", text("a"), parent_id=first)
        tx.add_event("unit_mark", node_id=first)
    times = {record.created_at for record in [*tx.nodes, *tx.events]}
    assert len(times) == 1
    later = await store.append_node(sid, "user", "message", text("again"))
    assert later.created_at > times.pop()
