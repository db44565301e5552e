"""A live append marked as history recorded elsewhere may open a branch at any node."""

from __future__ import annotations

import pytest

from soong_store import BranchError, SessionStore
from soong_store.check.run import check_store

TEXT = [{"type": "text", "text": "t"}]
RECORDED = {"imported_from": {"format": "openai-agents"}}


async def test_a_recorded_node_opens_a_branch_at_an_assistant_node(store: SessionStore) -> None:
    sid = (await store.create_session(".")).session_id
    await store.append_node(sid, "user", "message", TEXT)
    answer = await store.append_node(sid, "assistant", "message", TEXT)
    await store.append_node(sid, "tool", "message", TEXT, metadata=RECORDED)
    with pytest.raises(BranchError):
        await store.append_node(sid, "tool", "message", TEXT, parent_id=answer.node_id)
    again = await store.append_node(
        sid, "tool", "message", TEXT, parent_id=answer.node_id, metadata=RECORDED
    )
    assert again.parent_id == answer.node_id
    await store.switch_node(sid, None)
    root = await store.append_node(sid, "assistant", "message", TEXT, metadata=RECORDED)
    assert root.parent_id is None
    assert (await check_store(store, sid)).ok
