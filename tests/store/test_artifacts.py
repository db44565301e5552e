"""Artifacts: files written atomically, large JSON spilled, references that never dangle."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import event

from soong_store import (
    ArtifactRefBlock,
    InvalidArgument,
    InvalidContent,
    JsonBlock,
    NotFound,
    SessionArchived,
    SessionStore,
    StorageError,
    StoreClosed,
    ToolResultBlock,
)
from soong_store.check.run import check_store
from soong_store.store import runtime_of
from soong_store.write.unit_of_work import estimate_tokens
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import execute, snapshot

pytestmark = pytest.mark.asyncio


def artifact_files(home: Path) -> list[str]:
    root = home / "artifacts"
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_put_and_read_artifact(store: SessionStore, home: Path):
    s = await store.create_session(cwd=".")
    run = await store.start_run(s.session_id, s.root_agent_id)
    data = os.urandom(100_000)
    art = await store.put_artifact(
        s.session_id,
        data,
        filename="report.PDF",
        mime_type="application/pdf",
        summary="a report",
        run_id=run.run_id,
        tool_call_id="call_1",
    )
    assert art.size_bytes == len(data) and art.filename == "report.PDF"
    assert art.path == f"{s.session_id}/{art.artifact_id}.pdf"
    assert (art.mime_type, art.summary, art.run_id) == ("application/pdf", "a report", run.run_id)
    assert await store.read_artifact(art.artifact_id) == data
    assert (home / "artifacts" / art.path).read_bytes() == data
    assert [a.artifact_id for a in await store.list_artifacts(s.session_id)] == [art.artifact_id]
    assert not [p for p in artifact_files(home) if ".tmp-" in p]
    events = [e for e in await store.timeline(s.session_id) if e.event_type == "artifact_created"]
    assert events[0].payload == {"artifact_id": art.artifact_id, "size_bytes": len(data)}


async def test_five_megabyte_json_round_trips_through_tool_result(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    big = {"rows": [{"id": i, "name": f"row {i}", "tags": ["a", "b"]} for i in range(110_000)]}
    assert len(orjson.dumps(big)) > 5_000_000
    called = [{"type": "tool_call", "tool_call_id": "c1", "name": "query", "arguments": {}}]
    await store.append_node(sid, "assistant", "message", called)
    node = await store.append_node(
        sid,
        "tool",
        "message",
        [
            {
                "type": "tool_result",
                "tool_call_id": "c1",
                "content": [{"type": "text", "text": "ok"}, {"type": "json", "data": big}],
            }
        ],
    )
    result = node.content[0]
    assert isinstance(result, ToolResultBlock)
    spilled = result.content[1]
    assert isinstance(spilled, JsonBlock) and spilled.artifact_ref is not None
    assert spilled.summary is not None and len(spilled.summary) <= 600
    assert "rows" in spilled.summary and "110000 items" in spilled.summary
    assert orjson.loads(await store.read_artifact(spilled.artifact_ref)) == big
    art = await store.get_artifact(spilled.artifact_ref)
    assert (art.node_id, art.tool_call_id, art.mime_type) == (
        node.node_id,
        "c1",
        "application/json",
    )
    view = await store.context(sid)
    stored = view.nodes[0].model_dump_json()
    assert len(stored) < 2_000 and "row 109999" not in stored


@pytest.mark.parametrize(
    ("size", "spilled"), [(16 * 1024 - 2, False), (16 * 1024 - 1, False), (16 * 1024 + 1, True)]
)
async def test_byte_threshold(backend: Backend, size: int, spilled: bool):
    async with backend.store(spill_tokens=10**9) as store:
        sid = (await store.create_session(cwd=".")).session_id
        data = "x" * (size - 2)  # the JSON string adds two quotes
        assert len(orjson.dumps(data)) == size
        node = await store.append_node(
            sid, "tool", "message", [{"type": "json", "data": data}], event="tool_done"
        )
    block = node.content[0]
    assert isinstance(block, JsonBlock)
    assert (block.artifact_ref is not None) is spilled
    if not spilled:
        assert block.data == data


@pytest.mark.parametrize(("size", "spilled"), [(16_000, False), (16_004, True)])
async def test_default_token_threshold_for_ascii(store: SessionStore, size: int, spilled: bool):
    sid = (await store.create_session(cwd=".")).session_id
    data = "x" * (size - 2)
    node = await store.append_node(sid, "tool", "message", [{"type": "json", "data": data}])
    block = node.content[0]
    assert isinstance(block, JsonBlock) and (block.artifact_ref is not None) is spilled


async def test_token_threshold_spills_wide_text(backend: Backend):
    async with backend.store(spill_tokens=1_000) as store:
        sid = (await store.create_session(cwd=".")).session_id
        wide = "字" * 1_200  # 3,602 bytes, well under 16 KiB, ~1,200 tokens
        ascii_text = "a" * 3_600  # same bytes, ~900 tokens
        node = await store.append_node(
            sid,
            "tool",
            "message",
            [{"type": "json", "data": wide}, {"type": "json", "data": ascii_text}],
        )
        first, second = node.content
        assert isinstance(first, JsonBlock) and first.artifact_ref is not None
        assert isinstance(second, JsonBlock) and second.data == ascii_text
    assert estimate_tokens(orjson.dumps(wide)) > 1_000 > estimate_tokens(orjson.dumps(ascii_text))


async def test_thresholds_are_configurable_and_validated(backend: Backend):
    async with backend.store(spill_bytes=64) as store:
        sid = (await store.create_session(cwd=".")).session_id
        node = await store.append_node(sid, "tool", "message", [{"type": "json", "data": "y" * 80}])
        assert isinstance(node.content[0], JsonBlock) and node.content[0].artifact_ref
    with pytest.raises(InvalidArgument):
        backend.store(spill_bytes=0)


async def test_attachment_reference_round_trips_and_is_checked(store: SessionStore):
    a = (await store.create_session(cwd=".")).session_id
    b = (await store.create_session(cwd=".")).session_id
    art = await store.put_artifact(a, b"\x89PNG...", filename="cat.png", mime_type="image/png")
    block = ArtifactRefBlock(artifact_id=art.artifact_id, summary="a cat", mime_type="image/png")
    node = await store.append_node(a, "user", "message", [*text("look"), block])
    assert (await store.get_node(a, node.node_id)).content[1] == block
    before = snapshot(store)
    with pytest.raises(NotFound):
        await store.append_node(b, "user", "message", [block])
    with pytest.raises(NotFound):
        await store.append_node(
            a, "user", "message", [{"type": "artifact_ref", "artifact_id": "art_x"}]
        )
    with pytest.raises(NotFound):
        await store.append_node(
            a, "tool", "message", [{"type": "json", "summary": "s", "artifact_ref": "art_x"}]
        )
    assert snapshot(store) == before


async def test_artifact_commits_with_node_in_one_unit(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    async with store.transaction(sid) as tx:
        aid = tx.add_artifact(b"attached bytes", filename="notes.txt")
        nid = tx.add_node("user", "message", [{"type": "artifact_ref", "artifact_id": aid}])
    assert [a.artifact_id for a in tx.artifacts] == [aid]
    assert tx.nodes[0].node_id == nid
    assert await store.read_artifact(aid) == b"attached bytes"


async def test_failed_unit_leaves_no_row_and_no_file(store: SessionStore, home: Path):
    sid = (await store.create_session(cwd=".")).session_id
    before = snapshot(store)
    with pytest.raises(NotFound):
        async with store.transaction(sid) as tx:
            tx.add_artifact(b"x" * 1000)
            tx.add_node("tool", "message", [{"type": "json", "data": "z" * 20_000}])
            tx.add_event("bad", node_id="node_missing")
    assert snapshot(store) == before
    assert artifact_files(home) == []


async def test_failure_at_commit_leaves_no_row_and_no_file(store: SessionStore, home: Path):
    sid = (await store.create_session(cwd=".")).session_id
    engine = runtime_of(store).write_engine
    assert engine is not None

    def fail(conn: Any) -> None:
        raise OSError(28, "No space left on device (injected)")

    before = snapshot(store)
    event.listen(engine, "commit", fail)
    try:
        with pytest.raises(StorageError):
            await store.put_artifact(sid, b"doomed")
        with pytest.raises(StorageError):
            await store.append_node(
                sid, "tool", "message", [{"type": "json", "data": "q" * 30_000}]
            )
    finally:
        event.remove(engine, "commit", fail)
    assert snapshot(store) == before
    assert artifact_files(home) == []
    assert await store.gc(min_age=0) == []
    assert (await store.put_artifact(sid, b"fine")).size_bytes == 4


async def test_files_of_units_that_do_not_commit_are_removed(store: SessionStore, home: Path):
    """Files start as they are added, so every way of not committing must take them away."""
    sid = (await store.create_session(cwd=".")).session_id
    big = [{"type": "json", "data": "z" * 20_000}]
    before = snapshot(store)
    with pytest.raises(RuntimeError):
        async with store.transaction(sid) as tx:
            tx.add_node("tool", "message", big)
            tx.add_artifact(b"attached")
            raise RuntimeError("the caller changed its mind")
    with pytest.raises(InvalidContent, match="non-finite"):  # found while its file is written
        async with store.transaction(sid) as tx:
            tx.add_node("tool", "message", [{"type": "json", "data": [["x" * 20_000, math.nan]]}])
    with pytest.raises(InvalidContent):  # a later block fails after the JSON spilled
        await store.append_node(sid, "tool", "message", [*big, {"type": "text", "text": "\ud800"}])
    await store.close()  # every write started is over once the store is closed
    assert snapshot(store) == before
    assert artifact_files(home) == []


async def test_unit_committing_after_close_drops_its_files(backend: Backend, home: Path):
    store = backend.store()
    await store.open()
    sid = (await store.create_session(cwd=".")).session_id
    with pytest.raises(StoreClosed):
        async with store.transaction(sid) as tx:
            tx.add_node("tool", "message", [{"type": "json", "data": "z" * 20_000}])
            await store.close()
    assert artifact_files(home) == []
    with pytest.raises(StoreClosed):
        async with store.transaction(sid) as tx:
            tx.add_artifact(b"too late")


async def test_full_disk_while_writing_the_file(store: SessionStore, home: Path, monkeypatch):
    sid = (await store.create_session(cwd=".")).session_id
    before = snapshot(store)
    real_fsync = os.fsync

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(StorageError, match="No space"):
        await store.put_artifact(sid, b"x" * 10_000)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert snapshot(store) == before
    assert artifact_files(home) == []
    assert await store.read_artifact((await store.put_artifact(sid, b"ok")).artifact_id) == b"ok"


CRASHER = textwrap.dedent(
    """
    import asyncio, sys, time
    from sqlalchemy import event
    from soong_store import SessionStore
    from soong_store.store import runtime_of

    async def main(home, url, sid):
        async with SessionStore(home=home, url=url) as store:
            def hang(conn):
                # Only the artifact's commit: the writer may commit other work first.
                if not conn.exec_driver_sql("SELECT count(*) FROM artifacts").scalar():
                    return
                print("committing", flush=True)
                time.sleep(60)
            event.listen(runtime_of(store).write_engine, "commit", hang)
            await store.put_artifact(sid, b"orphan bytes", filename="o.bin")

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_kill_between_file_and_commit_leaves_orphan_for_gc(backend: Backend, home: Path):
    async with backend.store() as store:
        sid = (await store.create_session(cwd=".")).session_id
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHER, str(home), backend.url, sid],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "committing"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    orphans = artifact_files(home)
    assert len(orphans) == 1 and orphans[0].endswith(".bin")
    assert execute(backend, "SELECT count(*) FROM artifacts") == [(0,)]
    async with backend.store() as store:
        assert await store.gc(min_age=600) == []  # too young: could be in flight
        assert await store.gc(dry_run=True, min_age=0) == orphans
        assert artifact_files(home) == orphans
        assert await store.gc(min_age=0) == orphans
        assert artifact_files(home) == []
        await store.put_artifact(sid, b"after the crash")


def inodes(home: Path) -> set[int]:
    return {(home / "artifacts" / rel).stat().st_ino for rel in artifact_files(home)}


async def test_fork_links_files_of_its_own_and_delete_keeps_the_other_whole(
    store: SessionStore, home: Path
):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    attachment = await store.put_artifact(sid, b"shared bytes", filename="a.txt")
    n1 = await store.append_node(
        sid, "user", "message", [{"type": "artifact_ref", "artifact_id": attachment.artifact_id}]
    )
    n2 = await store.append_node(sid, "tool", "message", [{"type": "json", "data": "b" * 20_000}])
    lonely = await store.put_artifact(sid, b"only in the parent")
    fork = await store.fork_session(sid, n2.node_id)
    assert len(artifact_files(home)) == 5 and len(inodes(home)) == 3  # links, no copies
    fork_arts = await store.list_artifacts(fork.session_id)
    assert len(fork_arts) == 2
    assert all(
        a.path == f"{fork.session_id}/{a.artifact_id}{Path(a.path).suffix}" for a in fork_arts
    )
    path = await store.active_path(fork.session_id)
    ref = path[0].content[0]
    assert isinstance(ref, ArtifactRefBlock) and ref.artifact_id != attachment.artifact_id
    assert await store.read_artifact(ref.artifact_id) == b"shared bytes"
    spilled = path[1].content[0]
    assert isinstance(spilled, JsonBlock) and spilled.artifact_ref is not None
    assert orjson.loads(await store.read_artifact(spilled.artifact_ref)) == "b" * 20_000
    assert n1.node_id != path[0].node_id

    await store.delete_session(sid)
    remaining = artifact_files(home)
    assert len(remaining) == 2 and all(p.startswith(fork.session_id) for p in remaining)
    assert not any(lonely.artifact_id in p for p in remaining)
    assert await store.read_artifact(ref.artifact_id) == b"shared bytes"
    await store.delete_session(fork.session_id)
    assert artifact_files(home) == []
    assert execute(store, "SELECT count(*) FROM artifacts") == [(0,)]


async def test_a_file_an_old_style_fork_names_stays_until_its_last_row_goes(
    store: SessionStore, home: Path
):
    """Forks made by earlier versions name their parent's file instead of a link of their own."""
    parent = (await store.create_session(cwd=".")).session_id
    art = await store.put_artifact(parent, b"old fork", filename="a.txt")
    await store.append_node(
        parent, "user", "message", [{"type": "artifact_ref", "artifact_id": art.artifact_id}]
    )
    fork = await store.fork_session(parent, (await store.active_path(parent))[-1].node_id)
    (copy,) = await store.list_artifacts(fork.session_id)
    execute(
        store,
        "UPDATE artifacts SET path = :path WHERE artifact_id = :id",
        {"path": art.path, "id": copy.artifact_id},
    )
    (home / "artifacts" / copy.path).unlink()
    assert (await check_store(store)).ok
    await store.delete_session(parent)
    assert artifact_files(home) == [art.path]
    assert await store.read_artifact(copy.artifact_id) == b"old fork"
    await store.delete_session(fork.session_id)
    assert artifact_files(home) == []


HOSTILE_NAMES = [
    "../../etc/passwd",
    "a/b",
    "..",
    ".",
    "a\\b",
    "x\x00y",
    "line\nbreak",
    "",
    "n" * 256,
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
async def test_hostile_filenames_refused(store: SessionStore, home: Path, name: str):
    sid = (await store.create_session(cwd=".")).session_id
    before = snapshot(store)
    with pytest.raises(InvalidArgument):
        await store.put_artifact(sid, b"data", filename=name)
    assert snapshot(store) == before and artifact_files(home) == []


async def test_odd_but_safe_filenames_stay_inside_the_session_folder(
    store: SessionStore, home: Path
):
    sid = (await store.create_session(cwd=".")).session_id
    for name in ["..hidden", "weird name.tar.gz", "ünï.çødé", "x...y", "a.b" + "c" * 30]:
        art = await store.put_artifact(sid, b"d", filename=name)
        path = (home / "artifacts" / art.path).resolve()
        assert path.parent == (home / "artifacts" / sid).resolve()
        assert art.filename == name


@pytest.mark.parametrize(
    ("data", "kwargs"),
    [
        ("a string", {}),
        ({"a": 1}, {}),
        (None, {}),
        (b"x", {"mime_type": "not a mime"}),
        (b"x", {"summary": 5}),
        (b"x", {"node_id": "node_' OR 1=1"}),
    ],
)
async def test_bad_artifact_input_refused(store: SessionStore, home: Path, data, kwargs):
    sid = (await store.create_session(cwd=".")).session_id
    before = snapshot(store)
    with pytest.raises(InvalidArgument):
        await store.put_artifact(sid, data, **kwargs)
    assert snapshot(store) == before and artifact_files(home) == []


async def test_absurd_size_refused_before_writing(backend: Backend, home: Path):
    async with backend.store(max_artifact_bytes=1024) as store:
        sid = (await store.create_session(cwd=".")).session_id
        with pytest.raises(InvalidArgument, match="over the limit"):
            await store.put_artifact(sid, b"x" * 1025)
        with pytest.raises(InvalidArgument):
            await store.append_node(
                sid, "tool", "message", [{"type": "json", "data": "x" * 20_000}]
            )
    assert artifact_files(home) == []


async def test_unknown_links_and_archived_session_refused(store: SessionStore, home: Path):
    s = await store.create_session(cwd=".")
    with pytest.raises(NotFound):
        await store.put_artifact(s.session_id, b"x", node_id="node_unknown")
    with pytest.raises(NotFound):
        await store.put_artifact(s.session_id, b"x", run_id="run_unknown")
    with pytest.raises(NotFound):
        await store.read_artifact("art_unknown")
    await store.archive_session(s.session_id)
    with pytest.raises(SessionArchived):
        await store.put_artifact(s.session_id, b"x")
    assert artifact_files(home) == []


async def test_tampered_path_cannot_escape(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    art = await store.put_artifact(sid, b"x")
    execute(
        store,
        "UPDATE artifacts SET path='../../../etc/hostname' WHERE artifact_id = :id",
        {"id": art.artifact_id},
    )
    with pytest.raises(StorageError, match="is not <session>/<file>"):
        await store.read_artifact(art.artifact_id)


async def test_missing_file_is_a_storage_error(store: SessionStore, home: Path):
    sid = (await store.create_session(cwd=".")).session_id
    art = await store.put_artifact(sid, b"x")
    (home / "artifacts" / art.path).unlink()
    with pytest.raises(StorageError, match="missing"):
        await store.read_artifact(art.artifact_id)


async def test_symlinked_session_folder_is_not_followed(store: SessionStore, home: Path, tmp_path):
    sid = (await store.create_session(cwd=".")).session_id
    outside = tmp_path / "outside"
    outside.mkdir()
    (home / "artifacts").mkdir(exist_ok=True)
    (home / "artifacts" / sid).symlink_to(outside, target_is_directory=True)
    with pytest.raises(StorageError):
        await store.put_artifact(sid, b"x")
    assert list(outside.iterdir()) == []
    assert execute(store, "SELECT count(*) FROM artifacts") == [(0,)]
