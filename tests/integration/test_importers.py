"""Importers: what an import keeps (tree, times, ids, tools, compactions, agents) and refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from soong_store import NodeRecord, SessionStore
from soong_store.importers import import_file
from tests.integration.test_importers_corpus import CORPUS, SUBAGENT, export_rows


def jsonl(*records: Any) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


async def all_nodes(store: SessionStore, session_id: str) -> list[dict[str, Any]]:
    _, rows = await export_rows(store, session_id)
    return rows["node"]


def origin(node: NodeRecord | dict[str, Any]) -> dict[str, Any]:
    meta = node.metadata if isinstance(node, NodeRecord) else orjson.loads(node["metadata_json"])
    found: dict[str, Any] = meta["imported_from"]
    return found


async def test_every_node_names_its_source(store: SessionStore, tmp_path: Path) -> None:
    path = CORPUS / "claude-code/claude-code-log__dag_compact_after_rewind.jsonl"
    session = (await import_file(store, path, cwd=tmp_path))[0]
    assert session.metadata["imported_from"]["format"] == "claude-code"
    assert session.metadata["imported_from"]["source_session_id"] == "s1"
    nodes = await all_nodes(store, session.session_id)
    assert {origin(n)["format"] for n in nodes} == {"claude-code"}
    assert [origin(n)["id"] for n in nodes][:3] == ["u1", "a1", "b1u"]
    assert all(not n["node_id"].startswith(("u1", "a1")) for n in nodes)


async def test_failed_tools_have_is_error_and_a_tool_failed_event(store: SessionStore) -> None:
    path = CORPUS / "claude-code/claude-code-log__edge_cases.jsonl"
    session = (await import_file(store, path))[0]
    failed = [e for e in await store.timeline(session.session_id) if e.event_type == "tool_failed"]
    assert [(e.level, e.tool_call_id) for e in failed] == [("error", "tool_edge_001")]
    assert failed[0].node_id is not None
    node = await store.get_node(session.session_id, failed[0].node_id)
    assert node.role == "tool"
    assert node.content[0].type == "tool_result" and node.content[0].is_error


async def test_sub_agent_transcripts_become_sub_agents(store: SessionStore) -> None:
    session = (await import_file(store, CORPUS / f"{SUBAGENT}.jsonl"))[0]
    _, rows = await export_rows(store, session.session_id)
    sub = next(a for a in rows["agent"] if a["agent_type"] == "sub")
    assert sub["parent_agent_id"] == session.root_agent_id
    assert orjson.loads(sub["metadata_json"])["imported_from"]["meta"] == {
        "agentType": "general-purpose",
        "spawnDepth": 1,
    }
    owned = [origin(n)["id"] for n in rows["node"] if n["agent_id"] == sub["agent_id"]]
    assert owned == ["cu1", "ca1", "cu2", "catt1"]
    assert [origin(n)["id"] for n in await store.active_path(session.session_id)] == [
        "psys1",
        "pu1",
        "pa1",
    ]
