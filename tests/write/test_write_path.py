"""The write path hands out records built from the values it wrote: nothing read back on the way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.model import content, records

pytestmark = pytest.mark.asyncio


def spy_on_decoding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The JSON columns turned back into values, and each whole content parsed back."""
    decoded: list[str] = []
    column, parse = records._stored, content.CONTENT.validate_json

    def stored(row: Any, name: str) -> Any:
        decoded.append(name)
        return column(row, name)

    def parsed(text: Any) -> Any:
        decoded.append("content_json")
        return parse(text)

    monkeypatch.setattr(records, "_stored", stored)
    monkeypatch.setattr(content, "content_from_json", parsed)
    monkeypatch.setattr(records, "content_from_json", parsed)
    return decoded


async def test_a_units_records_decode_no_column_and_equal_what_a_read_returns(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    sid = (await store.create_session(cwd=tmp_path)).session_id
    decoded = spy_on_decoding(monkeypatch)
    async with store.transaction(sid) as tx:
        nid = tx.add_node(
            "user",
            "message",
            [{"type": "json", "data": (1, (2,))}, {"type": "text", "text": "t"}],
            metadata={"tags": ("a", "b"), "n": 1},
        )
        tx.add_event("checked", node_id=nid, payload=[("x", 1)])
        tx.add_artifact(b"bytes", metadata=("m",))
    assert decoded == []
    node, (event, created), artifact = tx.nodes[0], tx.events, tx.artifacts[0]
    assert node.metadata == {"tags": ["a", "b"], "n": 1}
    assert type(node.metadata["tags"]) is list and node.content[0].data == [1, [2]]
    assert event.payload == [["x", 1]] and type(event.payload[0]) is list
    assert artifact.metadata == ["m"]
    assert created.payload == {"artifact_id": artifact.artifact_id, "size_bytes": 5}
    assert node == await store.get_node(sid, nid)
    assert [event, created] == (await store.timeline(sid))[-2:]
    assert artifact == await store.get_artifact(artifact.artifact_id)
    assert decoded, "the reads decode the columns the write did not"


async def test_append_node_and_append_event_decode_nothing_either(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    sid = (await store.create_session(cwd=tmp_path)).session_id
    decoded = spy_on_decoding(monkeypatch)
    node = await store.append_node(
        sid, "user", "message", [{"type": "text", "text": "hi"}], metadata={"k": (1,)}
    )
    event = await store.append_event(sid, "note", payload={"v": (None, 2.5)})
    assert decoded == []
    assert node.metadata == {"k": [1]} and event.payload == {"v": [None, 2.5]}
    assert node == await store.get_node(sid, node.node_id)
    assert event == (await store.timeline(sid))[-1]
