"""A session's counts as the read path gives them (``show`` and the export print them)."""

from __future__ import annotations

from functools import partial

import pytest

from soong_store import NotFound, SessionStore
from soong_store.read.session_reads import session_counts
from soong_store.store import run_read
from tests.conftest import text


async def counts_of(store: SessionStore, sid: str) -> dict[str, int]:
    return await run_read(store, partial(session_counts, session_id=sid))


async def test_a_session_never_written_counts_its_created_event(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    assert await counts_of(store, sid) == {
        "agents": 1,
        "runs": 0,
        "nodes": 0,
        "events": 1,
        "artifacts": 0,
    }


async def test_counts_of_every_kind_are_the_session_s_own(store: SessionStore) -> None:
    session = await store.create_session(cwd=".")
    sid, other = session.session_id, (await store.create_session(cwd=".")).session_id
    await store.start_run(sid, session.root_agent_id)
    await store.create_agent(sid, "sub")
    for word in ("one", "two", "three"):
        await store.append_node(sid, "user", "message", text(word))
    await store.put_artifact(sid, b"bytes", filename="a.txt")
    await store.append_node(other, "user", "message", text("elsewhere"))

    counts = await counts_of(store, sid)

    assert counts["agents"] == 2 and counts["runs"] == 1 and counts["artifacts"] == 1
    assert counts["nodes"] == 3 and counts["events"] >= 3
    assert counts == {
        "agents": 2,
        "runs": 1,
        "nodes": 3,
        "events": counts["events"],
        "artifacts": 1,
    }


async def test_counts_of_no_session_are_not_found(store: SessionStore) -> None:
    missing = "sess_20260101_000000_00000000"
    with pytest.raises(NotFound, match=missing):
        await counts_of(store, missing)
