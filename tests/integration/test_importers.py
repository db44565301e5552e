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


async def test_codex_compaction_context_is_its_replacement_history(
    store: SessionStore, tmp_path: Path
) -> None:
    def item(role: str, text: str) -> dict[str, Any]:
        kind = "input_text" if role == "user" else "output_text"
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}

    records = [
        {"type": "session_meta", "payload": {"id": "t-1", "cwd": str(tmp_path)}},
        {"type": "response_item", "payload": item("user", "old question")},
        {"type": "response_item", "payload": item("assistant", "old answer")},
        {"type": "response_item", "payload": item("user", "kept question")},
        {
            "type": "compacted",
            "payload": {
                "message": "summary",
                "replacement_history": [
                    item("user", "kept question"),
                    {"type": "compaction", "encrypted_content": "opaque"},
                ],
            },
        },
        {"type": "response_item", "payload": item("assistant", "new answer")},
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(jsonl(*records))
    session = (await import_file(store, path))[0]
    context = await store.context(session.session_id)
    texts = [
        b.text if b.type == "text" else b.data["type"] for n in context.nodes for b in n.content
    ]
    assert texts == ["summary", "kept question", "compaction", "new answer"]
    assert context.nodes[0].node_type == "compaction"
    path_nodes = await store.active_path(session.session_id)
    assert len(path_nodes) == 7


async def test_tool_results_without_ids_answer_the_open_call(store: SessionStore) -> None:
    session = (await import_file(store, CORPUS / "codex/agent-sessions__codex-large.jsonl"))[0]
    blocks = [b for n in await store.active_path(session.session_id) for b in n.content]
    calls = [b for b in blocks if b.type == "tool_call"]
    results = [b for b in blocks if b.type == "tool_result"]
    assert [c.name for c in calls] == ["run_shell_command"]
    assert [r.tool_call_id for r in results] == [calls[0].tool_call_id]


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


async def test_codex_threads_become_fork_and_sub_agents(
    store: SessionStore, tmp_path: Path
) -> None:
    def say(role: str, text: str) -> dict[str, Any]:
        part = {"type": "input_text" if role == "user" else "output_text", "text": text}
        return {
            "type": "response_item",
            "payload": {"type": "message", "role": role, "content": [part]},
        }

    records = [
        {"type": "session_meta", "payload": {"id": "main-thread", "cwd": str(tmp_path)}},
        say("user", "m1"),
        say("assistant", "m2"),
        {"type": "session_meta", "payload": {"id": "fork-thread", "forked_from_id": "main-thread"}},
        say("user", "f1"),
        {
            "type": "session_meta",
            "payload": {
                "id": "sub-thread",
                "parent_thread_id": "main-thread",
                "source": {"subagent": {"thread_spawn": {}}},
            },
        },
        say("user", "s1"),
        say("assistant", "s2"),
        {"type": "session_meta", "payload": {"id": "main-thread"}},
        say("assistant", "m3"),
    ]
    path = tmp_path / "threads.jsonl"
    path.write_bytes(jsonl(*records))
    session = (await import_file(store, path))[0]
    _, rows = await export_rows(store, session.session_id)
    agents = {a["agent_type"]: a for a in rows["agent"]}
    assert set(agents) == {"main", "fork", "sub"}
    text = {n["node_id"]: orjson.loads(n["content_json"])[0]["text"] for n in rows["node"]}
    owner = {text[n["node_id"]]: n["agent_id"] for n in rows["node"]}
    parent = {text[n["node_id"]]: text.get(n["parent_id"]) for n in rows["node"]}
    assert owner == {
        "m1": agents["main"]["agent_id"],
        "m2": agents["main"]["agent_id"],
        "m3": agents["main"]["agent_id"],
        "f1": agents["fork"]["agent_id"],
        "s1": agents["sub"]["agent_id"],
        "s2": agents["sub"]["agent_id"],
    }
    assert text[agents["fork"]["fork_from_node_id"]] == "m2"
    assert parent == {"m1": None, "m2": "m1", "f1": "m2", "s1": None, "s2": "s1", "m3": "m2"}
    assert agents["sub"]["parent_agent_id"] == agents["main"]["agent_id"]
    path_texts = [b.text for n in await store.active_path(session.session_id) for b in n.content]
    assert path_texts == ["m1", "m2", "m3"]
