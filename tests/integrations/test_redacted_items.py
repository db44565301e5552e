"""A redacted node read back through the SDK adapters: said to be redacted, never a failure."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents import set_tracing_disabled

from soong_store import SessionStore
from soong_store.integrations.openai_agents import SoongSession

set_tracing_disabled(True)
pytestmark = pytest.mark.asyncio


async def test_an_agents_session_reads_a_redacted_item(tmp_path: Path) -> None:
    async with SessionStore(home=tmp_path / "home") as store:
        session = SoongSession("redacted", store=store)
        call = {
            "type": "function_call",
            "call_id": "c1",
            "name": "login",
            "arguments": '{"password": "hunter2-secret"}',
        }
        await session.add_items([{"role": "user", "content": "log me in"}, call])
        (record,) = await store.list_sessions()
        node = (await store.active_path(record.session_id))[-1]
        await store.redact_node(record.session_id, node.node_id, reason="password")
        items = await session.get_items()
        assert items[0] == {"role": "user", "content": "log me in"}
        assert items[1] == {"role": "assistant", "content": "[redacted: password]"}
        assert "hunter2" not in repr(items)
