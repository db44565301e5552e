"""A session's pair is created with its first write; until then it reads as an empty session."""

from __future__ import annotations

import io

import pytest

from soong_store import NotFound, SessionStore
from soong_store.check.run import check_store
from soong_store.model.ids import new_id
from soong_store.transfer import export_session, import_session
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import events_table, nodes_table, table_names

pytestmark = pytest.mark.asyncio


def has_pair(backend: Backend, sid: str) -> bool:
    return {nodes_table(sid), events_table(sid)} <= table_names(backend)


async def test_a_session_never_written_reads_as_empty(store: SessionStore, backend: Backend):
    sid = (await store.create_session(cwd="/p")).session_id
    missing = new_id("node")
    assert await store.active_path(sid) == []
    context = await store.context(sid)
    assert (context.nodes, context.token_count) == ([], 0)
    events = await store.timeline(sid)
    assert [(e.seq, e.event_type, e.payload) for e in events] == [
        (1, "session_created", {"cwd": "/p", "parent_session_id": None})
    ]
    assert await store.timeline(sid, after_seq=1) == []
    assert await store.timeline(sid, run_id="run_x") == []
    for read in (store.get_node, store.children, store.active_path):
        with pytest.raises(NotFound, match=missing):
            await read(sid, missing)
    assert not has_pair(backend, sid)


async def test_the_first_write_of_any_kind_creates_the_pair(store: SessionStore, backend: Backend):
    sid = (await store.create_session(cwd="/p")).session_id
    before = await store.timeline(sid)
    run = await store.start_run(sid, (await store.get_session(sid)).root_agent_id)
    assert has_pair(backend, sid)
    events = await store.timeline(sid)
    assert events[0] == before[0]
    assert [e.event_type for e in events] == ["session_created", "run_started"]
    assert [e.seq for e in events] == [1, 2]
    assert (await store.get_run(run.run_id)).status == "running"


async def test_archiving_a_session_never_written(store: SessionStore, backend: Backend):
    sid = (await store.create_session(cwd="/p")).session_id
    archived = await store.archive_session(sid)
    assert archived.status == "archived"
    events = await store.timeline(sid)
    assert [e.event_type for e in events] == ["session_created", "session_archived"]


async def test_a_failed_first_write_leaves_no_pair(store: SessionStore, backend: Backend):
    sid = (await store.create_session(cwd="/p")).session_id
    with pytest.raises(NotFound):
        await store.append_node(sid, "user", "message", text("x"), parent_id=new_id("node"))
    assert not has_pair(backend, sid)
    await store.append_node(sid, "user", "message", text("x"))
    assert [e.event_type for e in await store.timeline(sid)] == [
        "session_created",
        "node_created",
    ]


async def test_delete_of_a_session_never_written(store: SessionStore, backend: Backend):
    sid = (await store.create_session(cwd="/p")).session_id
    await store.delete_session(sid)
    with pytest.raises(NotFound):
        await store.get_session(sid)
    again = (await store.create_session(cwd="/p")).session_id
    await store.append_node(again, "user", "message", text("x"))
    await store.delete_session(again)
    assert not has_pair(backend, again)


async def test_export_import_and_check_of_a_session_never_written(
    store: SessionStore, backend: Backend
):
    sid = (await store.create_session(cwd="/p")).session_id
    assert (await check_store(store, sid)).ok
    out = io.StringIO()
    await export_session(store, sid, out)
    lines = out.getvalue().splitlines()
    copy = await import_session(store, lines, new_id=True)
    events = await store.timeline(copy.session_id)
    assert [e.event_type for e in events] == ["session_created"]
    assert await store.active_path(copy.session_id) == []
    report = await check_store(store)
    assert report.ok, report.problems
