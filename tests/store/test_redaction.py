"""Redaction: a node's content replaced by a ``redacted`` block, and what only it named removed."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from soong_store import (
    ArtifactRefBlock,
    InvalidArgument,
    InvalidIdentifier,
    JsonBlock,
    NotFound,
    RedactedBlock,
    SessionStore,
    TextBlock,
)
from soong_store.check.run import check_store
from soong_store.transfer import export_session, import_session
from tests.backends import Backend
from tests.helpers import snapshot

pytestmark = pytest.mark.asyncio

SECRET = "sk-live-QQXZ7redactme"


def artifact_files(home: Path) -> list[str]:
    root = home / "artifacts"
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def _exchange(store: SessionStore) -> tuple[str, list[str]]:
    """A session: a user message, a tool call (with a run, metadata, a count), its result."""
    s = await store.create_session(cwd=".")
    sid = s.session_id
    run = await store.start_run(sid, s.root_agent_id)
    user = await store.append_node(sid, "user", "message", [TextBlock(text=f"my key {SECRET}")])
    call = await store.append_node(
        sid,
        "assistant",
        "message",
        [{"type": "tool_call", "tool_call_id": "c1", "name": "login", "arguments": {"k": SECRET}}],
        run_id=run.run_id,
        metadata={"model": "m1"},
        token_count=42,
    )
    result = await store.append_node(
        sid,
        "tool",
        "message",
        [
            {
                "type": "tool_result",
                "tool_call_id": "c1",
                "content": [{"type": "text", "text": "ok"}],
            }
        ],
        run_id=run.run_id,
    )
    return sid, [user.node_id, call.node_id, result.node_id]


async def test_the_node_keeps_its_place_and_loses_its_content(store: SessionStore):
    sid, (user, call, result) = await _exchange(store)
    before = await store.get_node(sid, call)
    redacted = await store.redact_node(sid, call, reason="credential pasted")
    assert redacted.content == [RedactedBlock(reason="credential pasted")]
    assert redacted.token_count is None
    kept = ("node_id", "node_seq", "parent_id", "role", "node_type", "agent_id", "run_id")
    for name in (*kept, "metadata", "created_at", "session_id"):
        assert getattr(redacted, name) == getattr(before, name), name
    assert await store.get_node(sid, call) == redacted
    path = await store.active_path(sid)
    assert [n.node_id for n in path] == [user, call, result]
    assert path[1].content == [RedactedBlock(reason="credential pasted")]
    events = await store.timeline(sid)
    assert events[-1].event_type == "node_redacted"
    assert events[-1].node_id == call and events[-1].payload == {"reason": "credential pasted"}
    assert SECRET not in orjson.dumps([e.model_dump(mode="json") for e in events]).decode()


async def test_search_no_longer_finds_the_node(store: SessionStore):
    sid, (user, call, _) = await _exchange(store)
    assert {h.node_id for h in await store.search(SECRET)} == {user, call}
    await store.redact_node(sid, call, reason="secret")
    assert {h.node_id for h in await store.search(SECRET)} == {user}
    await store.redact_node(sid, user, reason="secret")
    assert await store.search(SECRET) == []


async def test_no_cache_serves_the_old_content(backend: Backend):
    async with backend.store() as writer, backend.store() as other:
        sid, (user, call, result) = await _exchange(writer)
        for store in (writer, other):  # each has read (and may hold) the whole path
            assert len((await store.context(sid)).nodes) == 3
            await store.active_path(sid, call)
        await writer.redact_node(sid, user, reason="gone")
        for store in (writer, other):
            assert (await store.context(sid)).nodes[0].content == [RedactedBlock(reason="gone")]
            path = await store.active_path(sid, call)
            assert path[0].content == [RedactedBlock(reason="gone")]


async def test_artifacts_only_its_blocks_named_are_deleted(backend: Backend):
    async with backend.store(spill_bytes=1024) as store:
        s = await store.create_session(cwd=".")
        sid = s.session_id
        shared = await store.put_artifact(sid, b"shared bytes", filename="a.txt")
        own = await store.put_artifact(sid, b"own bytes", filename="b.txt")
        ref = ArtifactRefBlock(artifact_id=shared.artifact_id, summary="shared")
        first = await store.append_node(
            sid,
            "user",
            "message",
            [
                ref,
                ArtifactRefBlock(artifact_id=own.artifact_id),
                JsonBlock(data={"rows": ["x" * 100] * 40}),
            ],
        )
        spilled = first.content[2]
        assert isinstance(spilled, JsonBlock) and spilled.artifact_ref is not None
        second = await store.append_node(sid, "assistant", "message", [ref])
        fork = await store.fork_session(sid, first.node_id)
        forked_files = {a.artifact_id: a for a in await store.list_artifacts(fork.session_id)}
        files_before = artifact_files(backend.home)

        await store.redact_node(sid, first.node_id, reason="attachment with personal data")
        left = {a.artifact_id for a in await store.list_artifacts(sid)}
        assert left == {shared.artifact_id}
        with pytest.raises(NotFound):
            await store.get_artifact(own.artifact_id)
        with pytest.raises(NotFound):
            await store.get_artifact(spilled.artifact_ref)
        assert await store.read_artifact(shared.artifact_id) == b"shared bytes"
        gone = {own.path, (await _path_of(files_before, spilled.artifact_ref))}
        assert set(artifact_files(backend.home)) == set(files_before) - gone
        for art in forked_files.values():  # the fork's copies stay whole
            assert await store.read_artifact(art.artifact_id)

        await store.redact_node(sid, second.node_id, reason="done")
        assert await store.list_artifacts(sid) == []
        assert shared.path not in artifact_files(backend.home)
        report = await check_store(store)
        assert report.ok, report.problems


async def _path_of(files: list[str], artifact_id: str) -> str:
    (found,) = [f for f in files if artifact_id in f]
    return found


@pytest.mark.parametrize("reason", [None, "", "   ", "x" * 1001, 5, b"bytes", "\ud800"], ids=repr)
async def test_a_bad_reason_is_refused_and_nothing_changes(
    store: SessionStore, backend: Backend, reason: Any
):
    sid, (_, call, _) = await _exchange(store)
    before = snapshot(backend)
    with pytest.raises(InvalidArgument, match="invalid reason"):
        await store.redact_node(sid, call, reason=reason)
    assert snapshot(backend) == before


async def test_unknown_ids_are_refused(store: SessionStore, backend: Backend):
    sid, (_, call, _) = await _exchange(store)
    before = snapshot(backend)
    with pytest.raises(NotFound, match="node_nope"):
        await store.redact_node(sid, "node_nope", reason="r")
    with pytest.raises(NotFound):
        await store.redact_node("sess_20990101_000000_abcd", call, reason="r")
    with pytest.raises(InvalidIdentifier):
        await store.redact_node("no such; session", call, reason="r")
    with pytest.raises(InvalidArgument):
        await store.redact_node(sid, "", reason="r")
    assert snapshot(backend) == before


async def test_an_archived_session_is_redacted_too(store: SessionStore):
    sid, (user, _, _) = await _exchange(store)
    await store.archive_session(sid)
    node = await store.redact_node(sid, user, reason="erasure request")
    assert node.content == [RedactedBlock(reason="erasure request")]


async def test_a_result_under_a_redacted_call_is_still_answered(store: SessionStore):
    sid, (_, call, result) = await _exchange(store)
    await store.redact_node(sid, call, reason="secret arguments")
    later = [{"type": "tool_result", "tool_call_id": "c1", "content": [], "is_error": True}]
    await store.append_node(sid, "tool", "message", later, parent_id=result)
    report = await check_store(store, sid)
    assert report.ok and not [n for n in report.notes if "tool" in n], report


async def test_check_export_and_import_take_redacted_nodes(backend: Backend):
    async with backend.store() as store:
        sid, (user, call, _) = await _exchange(store)
        await store.redact_node(sid, call, reason="secret")
        out = io.StringIO()
        await export_session(store, sid, out)
        assert out.getvalue().count(SECRET) == 1  # the user's node, not redacted
        lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
        result = await import_session(store, [orjson.dumps(line) for line in lines], new_id=True)
        copied = await store.list_nodes(result.session_id)
        assert copied[1].content == [RedactedBlock(reason="secret")]
        report = await check_store(store)
        assert report.ok, report.problems
