"""Importers: what an import keeps (tree, times, ids, tools, compactions, agents) and refuses."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from soong_store import InvalidArgument, NodeRecord, SessionStore, importers
from soong_store.check.run import check_store
from soong_store.cli import IMPORT_FORMATS
from soong_store.importers import FORMATS, import_file, import_report
from soong_store.transfer import export_session
from tests.backends import Backend
from tests.importers.test_importers_corpus import CORPUS, SUBAGENT, export_rows


def jsonl(*records: Any) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


async def all_nodes(store: SessionStore, session_id: str) -> list[dict[str, Any]]:
    _, rows = await export_rows(store, session_id)
    return rows["node"]


def origin(node: NodeRecord | dict[str, Any]) -> dict[str, Any]:
    meta = node.metadata if isinstance(node, NodeRecord) else orjson.loads(node["metadata_json"])
    found: dict[str, Any] = meta["imported_from"]
    return found


async def test_a_source_session_already_imported_is_skipped(
    store: SessionStore, tmp_path: Path
) -> None:
    path = CORPUS / "pi/agent-sessions__pi-small.jsonl"
    first = await import_report(store, path, cwd=tmp_path)
    again = await import_report(store, shutil.copy(path, tmp_path / "copy.jsonl"), cwd=tmp_path)
    assert again.sessions == []
    assert again.summaries[0].already_imported
    assert again.summaries[0].session_id == first.sessions[0].session_id
    assert "already imported as" in "\n".join(again.lines())
    assert len(await store.list_sessions()) == 1


async def test_damaged_lines_are_recovered_or_skipped_and_listed(
    store: SessionStore, tmp_path: Path
) -> None:
    header = {"type": "session", "version": 3, "id": "s-damaged", "cwd": str(tmp_path)}
    one = {
        "type": "message",
        "id": "a",
        "parentId": None,
        "message": {"role": "user", "content": "first"},
    }
    two = {
        "type": "message",
        "id": "b",
        "parentId": "a",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "second"}]},
    }
    three = {
        "type": "message",
        "id": "c",
        "parentId": "b",
        "message": {"role": "user", "content": "third"},
    }
    data = jsonl(header, one) + orjson.dumps(two) + orjson.dumps(three) + b"\n"
    data += b'{"type": "message", "id": "d", "parentId": "c", "mess\n[1, 2]\n"text"\n\xff\xfe\n'
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(data)
    report = await import_report(store, path, "pi")
    assert [(i.line, i.action) for i in report.issues] == [
        (3, "recovered"),
        (4, "skipped"),
        (5, "skipped"),
        (6, "skipped"),
        (7, "skipped"),
    ]
    assert "2 JSON objects joined" in report.issues[0].reason
    text = "\n".join(report.lines())
    assert "line 4: not JSON" in text and "line 5: a JSON list, not an object" in text
    path_ids = [origin(n)["id"] for n in await store.active_path(report.sessions[0].session_id)]
    assert path_ids == ["a", "b", "c"]


DEEP = b'{"type": "message", "nested": ' + b"[" * 5000 + b"]" * 5000 + b"}"
"""A line nested deeper than any JSON reader takes (orjson stops at 1,024, Python at ~1,000)."""
LINE_FORMATS = [
    ("claude-code", CORPUS / "claude-code/agent-sessions__claude-small.jsonl"),
    ("codex", CORPUS / "codex/agent-sessions__codex-small.jsonl"),
    ("pi", CORPUS / "pi/agent-sessions__pi-small.jsonl"),
    ("openhands", CORPUS / "openhands/openhands__resolver-mock-output.jsonl"),
]
DOCUMENT_FORMATS = [
    ("chatgpt", CORPUS / "librechat/chatgpt-tree.json"),
    ("librechat", CORPUS / "librechat/librechat-tree.json"),
    ("openwebui", CORPUS / "librechat/openwebui-export.json"),
    ("openhands", CORPUS / "openhands/openhands__trajs-basic_interactions.json"),
]


@pytest.mark.parametrize("fmt", ["auto", "named"])
@pytest.mark.parametrize(("name", "source"), LINE_FORMATS, ids=[f for f, _ in LINE_FORMATS])
async def test_a_line_nested_too_deep_is_skipped_like_any_damaged_line(
    store: SessionStore, tmp_path: Path, name: str, source: Path, fmt: str
) -> None:
    lines = source.read_bytes().split(b"\n")
    path = tmp_path / source.name
    path.write_bytes(b"\n".join([*lines[:2], DEEP, *lines[2:]]))
    report = await import_report(store, path, name if fmt == "named" else "auto", cwd=tmp_path)
    assert [(i.line, i.action) for i in report.issues] == [(3, "skipped")]
    assert report.issues[0].reason.startswith("not JSON")
    damaged = [summary.counts for summary in report.summaries]
    for session in report.sessions:
        await store.delete_session(session.session_id)
    clean = await import_report(store, source, name, cwd=tmp_path)
    assert damaged == [summary.counts for summary in clean.summaries]  # the rest all imported


@pytest.mark.parametrize(("name", "source"), DOCUMENT_FORMATS, ids=[f for f, _ in DOCUMENT_FORMATS])
async def test_a_document_nested_too_deep_is_refused(
    store: SessionStore, tmp_path: Path, name: str, source: Path
) -> None:
    data = source.read_bytes().lstrip()
    path = tmp_path / source.name
    path.write_bytes(data[:1] + b"[" * 5000 + b"]" * 5000 + b", " + data[1:])  # a first item
    if data[:1] == b"{":
        path.write_bytes(b'{"deep": ' + b"[" * 5000 + b"]" * 5000 + b", " + data[1:])
    with pytest.raises(InvalidArgument, match="not a JSON document"):
        await import_file(store, path, name)
    with pytest.raises(InvalidArgument, match="cannot tell the format"):
        await import_file(store, path)
    assert await store.list_sessions() == []


async def test_an_export_with_a_line_nested_too_deep_is_refused(
    store: SessionStore, tmp_path: Path
) -> None:
    original = (await import_file(store, CORPUS / "pi/agent-sessions__pi-small.jsonl"))[0]
    out = io.StringIO()
    await export_session(store, original.session_id, out)
    await store.delete_session(original.session_id)
    lines = out.getvalue().encode().split(b"\n")
    path = tmp_path / "export.jsonl"
    path.write_bytes(b"\n".join([*lines[:2], DEEP, *lines[2:]]))
    for fmt in ("auto", "soong"):
        with pytest.raises(InvalidArgument, match="line 3: not JSON"):
            await import_file(store, path, fmt)
    assert await store.list_sessions() == []


async def test_source_times_are_kept_and_bad_ones_noted(
    store: SessionStore, tmp_path: Path
) -> None:
    report = await import_report(store, CORPUS / "pi/pi-mono__large-session.jsonl", cwd=tmp_path)
    nodes = await store.active_path(report.sessions[0].session_id)
    span = nodes[-1].created_at - nodes[0].created_at
    assert span > timedelta(hours=1)
    assert nodes[0].created_at == datetime(2025, 11, 20, 23, 33, 1, 550000, tzinfo=UTC)
    records = [
        {
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "timestamp": "2025-01-01T10:00:00Z",
            "sessionId": "times",
            "message": {"role": "user", "content": "hi"},
        },
        {
            "type": "assistant",
            "uuid": "a1",
            "parentUuid": "u1",
            "timestamp": "yesterday",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        },
        {
            "type": "user",
            "uuid": "u2",
            "parentUuid": "a1",
            "timestamp": "2025-01-01T12:00:00",
            "message": {"role": "user", "content": "naive"},
        },
    ]
    path = tmp_path / "times.jsonl"
    path.write_bytes(jsonl(*records))
    report = await import_report(store, path, cwd=tmp_path)
    u1, a1, u2 = await store.active_path(report.sessions[0].session_id)
    assert a1.created_at == u1.created_at == datetime(2025, 1, 1, 10, tzinfo=UTC)
    assert origin(a1)["time_invalid"] is True
    assert origin(a1)["record"]["timestamp"] == "yesterday"
    assert u2.created_at == datetime(2025, 1, 1, 12, tzinfo=UTC)
    assert origin(u2)["time_assumed_utc"] is True


async def test_every_node_names_its_source(store: SessionStore, tmp_path: Path) -> None:
    path = CORPUS / "claude-code/claude-code-log__dag_compact_after_rewind.jsonl"
    session = (await import_file(store, path, cwd=tmp_path))[0]
    assert session.metadata["imported_from"]["format"] == "claude-code"
    assert session.metadata["imported_from"]["source_session_id"] == "s1"
    nodes = await all_nodes(store, session.session_id)
    assert {origin(n)["format"] for n in nodes} == {"claude-code"}
    assert [origin(n)["id"] for n in nodes][:3] == ["u1", "a1", "b1u"]
    assert all(not n["node_id"].startswith(("u1", "a1")) for n in nodes)


async def test_a_branch_may_open_at_an_assistant_message(
    store: SessionStore, tmp_path: Path
) -> None:
    session = (await import_file(store, CORPUS / "librechat/chatgpt-tree.json"))[0]
    nodes = await all_nodes(store, session.session_id)
    by_source = {origin(n)["id"]: n for n in nodes}
    joke = by_source["aaa20127-b9e3-44f6-afbe-a2475838625a"]
    replies = await store.children(session.session_id, joke["node_id"])
    assert [r.role for r in replies] == ["assistant", "assistant"]
    assert (await check_store(store)).ok


async def test_failed_tools_have_is_error_and_a_tool_failed_event(store: SessionStore) -> None:
    path = CORPUS / "claude-code/claude-code-log__edge_cases.jsonl"
    session = (await import_file(store, path))[0]
    failed = [e for e in await store.timeline(session.session_id) if e.event_type == "tool_failed"]
    assert [(e.level, e.tool_call_id) for e in failed] == [("error", "tool_edge_001")]
    assert failed[0].node_id is not None
    node = await store.get_node(session.session_id, failed[0].node_id)
    assert node.role == "tool"
    assert node.content[0].type == "tool_result" and node.content[0].is_error


async def test_images_become_artifacts(store: SessionStore, tmp_path: Path) -> None:
    session = (await import_file(store, CORPUS / "pi/pi-mono__compact.jsonl", cwd=tmp_path))[0]
    _, rows = await export_rows(store, session.session_id)
    assert [a["mime_type"] for a in rows["artifact"]] == ["image/png"] * 3
    data = await store.read_artifact(rows["artifact"][0]["artifact_id"])
    assert data.startswith(b"\x89PNG")
    node = await store.get_node(session.session_id, rows["artifact"][0]["node_id"])
    items = [i for b in node.content if b.type == "tool_result" for i in b.content]
    assert any(i.type == "artifact_ref" for i in items)
    kept = [x for e in origin(node)["block_extras"].values() for x in e.get("items", {}).values()]
    assert kept and all(x["type"] == "image" and "data" not in x for x in kept)


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


async def test_kept_entries_are_copied_when_a_branch_shares_them(
    store: SessionStore, tmp_path: Path
) -> None:
    def message(mid: str, parent: str | None, role: str, text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": mid,
            "parentId": parent,
            "message": {"role": role, "content": [{"type": "text", "text": text}]},
        }

    records = [
        {"type": "session", "version": 3, "id": "branchy", "cwd": str(tmp_path)},
        message("a", None, "user", "a"),
        message("b", "a", "assistant", "b"),
        message("c", "b", "user", "c"),
        message("d", "b", "user", "d (another branch)"),
        message("e", "c", "assistant", "e"),
        {
            "type": "compaction",
            "id": "k",
            "parentId": "e",
            "summary": "sum",
            "firstKeptEntryId": "b",
        },
        message("f", "k", "user", "f"),
    ]
    path = tmp_path / "branchy.jsonl"
    path.write_bytes(jsonl(*records))
    session = (await import_file(store, path))[0]
    context = await store.context(session.session_id)
    assert [origin(n)["id"] for n in context.nodes] == ["k", "b", "c", "e", "f"]
    assert [origin(n).get("kept_copy_by") for n in context.nodes[1:4]] == ["k"] * 3
    nodes = await all_nodes(store, session.session_id)
    d = next(n for n in nodes if origin(n)["id"] == "d")
    assert [
        origin(n)["id"] for n in (await store.context(session.session_id, d["node_id"])).nodes
    ] == ["a", "b", "d"]
    assert (await check_store(store)).ok


async def test_tool_results_without_ids_answer_the_open_call(store: SessionStore) -> None:
    session = (await import_file(store, CORPUS / "codex/agent-sessions__codex-large.jsonl"))[0]
    blocks = [b for n in await store.active_path(session.session_id) for b in n.content]
    calls = [b for b in blocks if b.type == "tool_call"]
    results = [b for b in blocks if b.type == "tool_result"]
    assert [c.name for c in calls] == ["run_shell_command"]
    assert [r.tool_call_id for r in results] == [calls[0].tool_call_id]


async def test_thinking_and_reasoning_are_kept_verbatim(store: SessionStore) -> None:
    session = (await import_file(store, CORPUS / "pi/pi-mono__session.jsonl"))[0]
    nodes = await all_nodes(store, session.session_id)
    thinking = [
        b
        for n in nodes
        if "kept_copy_by" not in n["metadata_json"]  # not the compaction's copies of them
        for b in orjson.loads(n["content_json"])
        if b["type"] == "json" and b["data"].get("type") == "thinking"
    ]
    assert len(thinking) == 182
    assert all(set(b["data"]) >= {"thinking", "thinkingSignature"} for b in thinking)
    codex = CORPUS / "codex/claude-code-log__rollout-2026-01-02T03-04-05-11111111.jsonl"
    session = (await import_file(store, codex))[0]
    reasoning = [
        b.data
        for n in await store.active_path(session.session_id)
        for b in n.content
        if b.type == "json"
    ]
    assert reasoning[0]["encrypted_content"] == "SYNTHETIC_ENCRYPTED_CONTENT_MUST_NOT_RENDER"


async def test_roles_of_other_tools_are_mapped(store: SessionStore) -> None:
    session = (await import_file(store, CORPUS / "pi/pi-mono__session.jsonl"))[0]
    nodes = await all_nodes(store, session.session_id)
    bash = next(n for n in nodes if origin(n)["line"] == 270)
    assert bash["role"] == "user"
    assert origin(bash)["message"]["role"] == "bashExecution"
    assert orjson.loads(bash["content_json"])[0]["text"] == "npm run check"
    assert {
        n["role"] for n in nodes if origin(n).get("message", {}).get("role") == "toolResult"
    } == {"tool"}
    session = (await import_file(store, CORPUS / "codex/agent-sessions__codex-small.jsonl"))[0]
    nodes = await all_nodes(store, session.session_id)
    developer = [n for n in nodes if origin(n).get("record", {}).get("role") == "developer"]
    assert developer and {n["role"] for n in developer} == {"system"}


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


async def test_cwd_is_the_sources_when_absolute(store: SessionStore, tmp_path: Path) -> None:
    small = CORPUS / "pi/agent-sessions__pi-small.jsonl"
    pi = (await import_file(store, small, cwd=tmp_path))[0]
    assert pi.cwd == orjson.loads(small.read_bytes().split(b"\n")[0])["cwd"] != str(tmp_path)
    windows = CORPUS / "claude-code/claude-code-log__sidechain_integrated.jsonl"
    session = (await import_file(store, windows, cwd=tmp_path))[0]
    assert session.cwd == str(tmp_path)
    assert session.metadata["source_cwd"].startswith("e:\\")
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        chat = (await import_file(store, CORPUS / "librechat/librechat-tree.json"))[0]
    finally:
        os.chdir(here)
    assert chat.cwd == str(tmp_path)


@pytest.mark.parametrize(
    ("name", "content", "fmt", "message"),
    [
        ("missing.jsonl", None, "auto", "cannot read"),
        ("prose.txt", b"just words\n", "auto", "cannot tell the format"),
        ("chat.json", b'{"broken": ', "chatgpt", "not a JSON document"),
        ("any.jsonl", b"{}\n", "yaml", "unknown import format 'yaml'"),
    ],
)
async def test_bad_input_is_refused_and_nothing_is_written(
    store: SessionStore, tmp_path: Path, name: str, content: bytes | None, fmt: str, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InvalidArgument, match=message):
        await import_file(store, path, fmt)
    assert await store.list_sessions() == []


async def test_a_format_may_be_named(store: SessionStore, tmp_path: Path) -> None:
    path = CORPUS / "librechat/openwebui-export.json"
    report = await import_report(store, path, "openwebui", cwd=tmp_path)
    assert report.format == "openwebui" and len(report.sessions) == 3
    assert report.as_dict()["sessions"][1]["source_id"] == "tool-chat"


async def test_the_stores_own_export_imports_with_its_ids(
    store: SessionStore, tmp_path: Path
) -> None:
    path = CORPUS / "pi/agent-sessions__pi-small.jsonl"
    original = (await import_file(store, path, cwd=tmp_path))[0]
    out = io.StringIO()
    await export_session(store, original.session_id, out, with_artifacts=True)
    await store.delete_session(original.session_id)
    dump = tmp_path / "export.jsonl"
    dump.write_text(out.getvalue())
    report = await import_report(store, dump)
    assert report.format == "soong"
    assert [s.session_id for s in report.sessions] == [original.session_id]
    with pytest.raises(InvalidArgument, match="already exists"):
        await import_file(store, dump, "soong")


async def test_a_conversation_the_store_refuses_does_not_stop_the_others(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importers.build
    made: list[str] = []

    def build(*args: Any) -> Any:
        built = real(*args)
        made.append(built.session_id)
        if len(made) == 2:  # the second chat's export loses its last line
            return type(built)(built.session_id, iter(list(built.items)[:-1]), built.counts)
        return built

    monkeypatch.setattr(importers, "build", build)
    report = await import_report(store, CORPUS / "librechat/openwebui-export.json", cwd=tmp_path)
    assert [s.session_id for s in report.sessions] == [made[0], made[2]]
    assert report.summaries[1].error is not None and "truncated" in report.summaries[1].error
    assert "tool-chat: refused, nothing written" in "\n".join(report.lines())
    assert {s.session_id for s in await store.list_sessions()} == {made[0], made[2]}


def test_the_docs_name_every_format() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "importers.md").read_text()
    table = docs.split("| format | what it reads |")[1].split("\n\n")[0]
    named = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
    assert named == list(importers.FORMATS)


def test_the_cli_imports_another_agents_file_once(backend: Backend) -> None:
    assert set(IMPORT_FORMATS) == set(FORMATS)
    source = CORPUS / "claude-code" / "agent-sessions__claude-small.jsonl"
    cli = [sys.executable, "-m", "soong_store", *backend.cli]
    first = subprocess.run([*cli, "import", str(source)], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"imported: {source} [claude-code] -> sess_")
    again = subprocess.run(
        [*cli, "import", str(source), "--format", "claude-code", "--json"],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)  # the file is as it was: not read again
    assert summary["sources"] == [] and summary["unchanged_files"] == 1
    wrong = subprocess.run(
        [*cli, "import", str(source), "--format", "claude-code", "--new-id"],
        capture_output=True,
        text=True,
    )
    assert wrong.returncode == 2 and "--new-id is for soong exports" in wrong.stderr
    checked = subprocess.run([*cli, "check"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout
