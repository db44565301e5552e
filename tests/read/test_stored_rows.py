"""What the store reads back from its file equals a validated build of the stored rows; a row
edited on disk raises ``StorageError`` from every read, never a half-built record.

SQLite-only, on purpose: the rows are read, and edited, through a connection of their own on the
store's file while the store is closed.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore, StorageError
from soong_store.model.records import NodeRecord
from soong_store.read import session_reads as reads
from soong_store.store import run_read
from tests.conftest import connect_raw, db_path, text
from tests.model.test_row_records import (
    assert_same_record,
    validated_event,
    validated_node,
)

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]

BIG = {"rows": [{"i": i, "name": f"row {i}"} for i in range(2000)]}  # spilled to an artifact


async def _varied_session(store: SessionStore) -> str:
    sid = (await store.create_session(cwd=str(store.home))).session_id
    art = await store.put_artifact(sid, b"\x89PNG...", filename="a.png", mime_type="image/png")
    contents: list[list[dict[str, Any]]] = [
        text("héllo wörld — 日本語 😀"),
        [
            {"type": "text", "text": "calling"},
            {"type": "tool_call", "tool_call_id": "c1", "name": "grep", "arguments": {"q": "ü"}},
        ],
        [
            {
                "type": "tool_result",
                "tool_call_id": "c1",
                "content": [{"type": "text", "text": "found"}, {"type": "json", "data": [1, 2.5]}],
                "is_error": True,
            }
        ],
        [{"type": "json", "data": None}, {"type": "json", "data": BIG}],
        [{"type": "artifact_ref", "artifact_id": art.artifact_id, "summary": "a picture"}],
        [{"type": "tool_call", "tool_call_id": "c2", "name": "noop", "arguments": None}],
    ]
    roles = ["user", "assistant", "tool", "assistant", "user", "assistant"]
    for i, (role, content) in enumerate(zip(roles, contents, strict=True)):
        await store.append_node(
            sid,
            role,
            "compaction" if i == 3 else "message",
            content,
            metadata=None if i % 2 else {"i": i, "note": "ß", "nested": [True, None]},
            token_count=None if i == 1 else 10 * i,
        )
    await store.append_event(sid, "tool_progress", payload={"step": "ü", "of": [1, 2]})
    await store.append_event(sid, "custom", level="warning")
    return sid


def _rows(home: Path, table: str, order: str) -> list[dict[str, Any]]:
    con = connect_raw(db_path(home))
    try:
        cursor = con.execute(f'SELECT * FROM "{table}" ORDER BY {order}')
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()


def _uncached_path(store: SessionStore, sid: str, limit: int | None = None) -> Any:
    return run_read(store, partial(reads.active_path, session_id=sid, node_id=None, limit=limit))


async def test_every_read_of_stored_nodes_and_events_equals_their_validated_rows(home: Path):
    async with SessionStore(home=home) as store:
        sid = await _varied_session(store)
    nodes = [validated_node(row, sid) for row in _rows(home, f"nodes_{sid}", "node_seq")]
    events = [validated_event(row, sid) for row in _rows(home, f"events_{sid}", "seq")]
    assert any(isinstance(n.metadata, dict) for n in nodes) and len(events) >= 8

    async with SessionStore(home=home) as store:
        for got, shared in (
            (await _uncached_path(store, sid), False),
            (await store.active_path(sid), True),  # fills the cache
            (await store.active_path(sid), True),  # from it
            ([await store.get_node(sid, node.node_id) for node in nodes], False),
        ):
            assert len(got) == len(nodes)
            for fast, slow in zip(got, nodes, strict=True):
                assert_same_record(fast, slow, read_only=shared)
        context = await store.context(sid)
        for fast, slow in zip(context.nodes, nodes[3:], strict=True):
            assert_same_record(fast, slow, read_only=True)
        got_events = await store.timeline(sid)
        assert len(got_events) == len(events)
        for fast_event, slow_event in zip(got_events, events, strict=True):
            assert_same_record(fast_event, slow_event)


def _edit(home: Path, sql: str, *args: Any) -> None:
    con = connect_raw(db_path(home))
    try:
        assert con.execute(sql, args).rowcount == 1
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("content_json", '[{"type":"text","text":"cut', "stored content of node"),
        ("content_json", '[{"type":"text","text":["a"]}]', "stored content of node"),
        ("content_json", '[{"type":"tool_call","tool_call_id":"","name":"x"}]', "stored content"),
        ("content_json", '[{"type":"artifact_ref"}]', "stored content of node"),
        ("metadata_json", "{'single': 'quotes'}", "stored metadata_json is damaged"),
    ],
)
async def test_a_node_row_edited_on_disk_fails_every_path_read(
    home: Path, column: str, value: str, message: str
):
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=str(home))).session_id
        ids = [
            (await store.append_node(sid, "user", "message", text(f"n{i}"))).node_id
            for i in range(5)
        ]
        await store.append_event(sid, "after")
    _edit(home, f'UPDATE "nodes_{sid}" SET {column} = ? WHERE node_id = ?', value, ids[2])

    async with SessionStore(home=home) as store:
        reads_of_path = [
            lambda: _uncached_path(store, sid),
            lambda: store.active_path(sid),
            lambda: store.context(sid),
            lambda: store.context(sid, limit=4),
            lambda: store.get_node(sid, ids[2]),
        ]
        for read in reads_of_path:
            with pytest.raises(StorageError, match=message):
                await read()
        # Nodes below the damage are still read, and whole.
        tail = await store.active_path(sid, limit=2)
        assert [n.node_id for n in tail] == ids[3:]
        assert all(isinstance(n, NodeRecord) and n.content[0].text for n in tail)
        # The events, on their own table, are not affected.
        assert len(await store.timeline(sid)) >= 6


async def test_an_event_row_edited_on_disk_fails_the_timeline_page_holding_it(home: Path):
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=str(home))).session_id
        for i in range(5):
            await store.append_event(sid, "step", payload={"i": i})
        seqs = [event.seq for event in await store.timeline(sid)]
    _edit(home, f'UPDATE "events_{sid}" SET payload_json = ? WHERE seq = ?', '{"i": 2', seqs[3])

    async with SessionStore(home=home) as store:
        with pytest.raises(StorageError, match="stored payload_json is damaged"):
            await store.timeline(sid)
        with pytest.raises(StorageError, match="stored payload_json is damaged"):
            await store.timeline(sid, after_seq=seqs[2], limit=1)
        after = await store.timeline(sid, after_seq=seqs[3])
        assert [event.seq for event in after] == seqs[4:]
