"""The store's writer through the API: calls after close refused, failures isolated."""

from __future__ import annotations

import asyncio

import pytest

from soong_store import NotFound, SessionStore, StoreClosed
from tests.backends import Backend
from tests.conftest import text as blocks

pytestmark = pytest.mark.asyncio


async def test_store_refuses_calls_after_close(backend: Backend):
    store = backend.store()
    with pytest.raises(StoreClosed):
        await store.create_session(cwd=".")
    await store.open()
    sid = (await store.create_session(cwd=".")).session_id
    await store.close()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.append_node(sid, "user", "message", blocks("x"))
    with pytest.raises(StoreClosed):
        await store.get_session(sid)
    with pytest.raises(StoreClosed):
        async with store.transaction(sid):
            pass


async def test_writer_survives_many_failures(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    bad = [
        store.append_node(sid, "user", "message", blocks("x"), parent_id=f"node_{i}")
        for i in range(30)
    ]
    good = [store.append_event(sid, f"ok{i}") for i in range(30)]
    outcomes = await asyncio.gather(*bad, *good, return_exceptions=True)
    assert all(isinstance(o, NotFound) for o in outcomes[:30])
    assert [o.seq for o in outcomes[30:]] == list(range(2, 32))  # type: ignore[union-attr]
