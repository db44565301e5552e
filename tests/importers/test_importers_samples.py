"""Real exports of every supported format (``tests/data/<format>/``) are told and imported.

What each conversation should become is read from the sample itself by a small reader per
format (messages, roles, roots, branch points, the active leaf and its time), never written
down as totals, so a sample added to a folder is checked the same way.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.errors import InvalidArgument
from soong_store.importers import import_file, import_report

DATA = Path(__file__).resolve().parents[1] / "data"
FORMATS = ("chatgpt", "librechat", "openwebui")
SAMPLES = sorted(p for f in FORMATS for p in (DATA / f).glob("*.json"))
OTHERS = sorted((DATA / "other").glob("*.json"))
NO_PARENT = "00000000-0000-0000-0000-000000000000"
DETAILS = re.compile(r'<details type="tool_calls" done="(\w+)" id="([^"]*)"')

Message = tuple[str, str | None, str, Any, tuple[list[str], list[str]]]
"""A source message: its id, its parent's id, its role, its time as the source writes it, and
the ids of the tool calls it makes and of the results it holds."""


def _chatgpt(document: Any) -> list[tuple[list[Message], str | None]]:
    out = []
    for conv in document:
        if not isinstance(conv.get("mapping"), dict):
            continue
        nodes = conv["mapping"]
        messages = []
        for key, node in nodes.items():
            if not isinstance(node.get("message"), dict):
                continue
            up = node.get("parent")
            while up is not None and not isinstance(nodes[up].get("message"), dict):
                up = nodes[up].get("parent")
            message = node["message"]
            role = message["author"]["role"]
            messages.append((key, up, role, message.get("create_time"), ([], [])))
        out.append((messages, conv.get("current_node")))
    return out


def _openwebui(document: Any) -> list[tuple[list[Message], str | None]]:
    out = []
    for item in document if isinstance(document, list) else [document]:
        chat = item.get("chat", item)
        by_id = (chat.get("history") or {}).get("messages") or {}
        listed = list(by_id.values()) or chat.get("messages", [])
        messages = [
            (m["id"], m.get("parentId"), m["role"], m.get("timestamp"), _openwebui_calls(m))
            for m in listed
        ]
        current = (chat.get("history") or {}).get("currentId") if by_id else listed[-1]["id"]
        out.append((messages, current))
    return out


def _openwebui_calls(message: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The tool calls of an Open WebUI message: its ``output`` items, else its ``content``'s
    ``<details type="tool_calls">`` blocks (a result in those whose call is ``done``)."""
    output = message.get("output") or []
    if output:
        calls = [i["call_id"] for i in output if i["type"] == "function_call"]
        return calls, [i["call_id"] for i in output if i["type"] == "function_call_output"]
    found = DETAILS.findall(message.get("content") or "")
    return [cid for _, cid in found], [cid for done, cid in found if done == "true"]


def _librechat(document: Any) -> list[tuple[list[Message], str | None]]:
    out = []
    for conv in document if isinstance(document, list) else [document]:
        messages: list[Message] = []
        stack = list(reversed(conv.get("messages") or conv.get("messagesTree")))
        while stack:
            m = stack.pop()
            parent = m.get("parentMessageId")
            role = "user" if m.get("isCreatedByUser") else "assistant"
            parent = None if parent == NO_PARENT else parent
            calls = [p["tool_call"] for p in m.get("content") or [] if p["type"] == "tool_call"]
            ids = ([c["id"] for c in calls], [c["id"] for c in calls if "output" in c])
            messages.append((m["messageId"], parent, role, m.get("createdAt"), ids))
            stack += reversed(m.get("children") or [])
        out.append((messages, messages[-1][0]))
    return out


READERS = {"chatgpt": _chatgpt, "openwebui": _openwebui, "librechat": _librechat}


def expected(sample: Path) -> list[dict[str, Any]]:
    """What each conversation of ``sample`` should become, read from the sample."""
    fmt = sample.parent.name
    wanted = []
    for messages, leaf in READERS[fmt](orjson.loads(sample.read_bytes())):
        ids = {m[0] for m in messages}
        parents = Counter(m[1] for m in messages if m[1] in ids)
        time = next(m[3] for m in messages if m[0] == leaf)
        wanted.append(
            {
                "messages": len(messages),
                "roots": sum(m[1] not in ids for m in messages),
                "branch_points": sum(count > 1 for count in parents.values()),
                "roles": {m[0]: m[2] for m in messages},
                "calls": {m[0]: m[4] for m in messages},
                "leaf": leaf,
                "leaf_time": time,
            }
        )
    return wanted


def as_datetime(value: Any) -> datetime:
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    seconds = value / 1000 if value > 1e11 else value
    return datetime.fromtimestamp(seconds, UTC)


def test_there_are_samples_of_every_format_and_the_readme_names_them() -> None:
    assert {p.parent.name for p in SAMPLES} == set(FORMATS)
    readme = (DATA / "README.md").read_text()
    for path in [*SAMPLES, *OTHERS]:
        assert f"`{path.parent.name}/{path.name}`" in readme, path


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in SAMPLES])
async def test_every_sample_is_told_and_imported(
    sample: Path, store: SessionStore, tmp_path: Path
) -> None:
    wanted = expected(sample)
    report = await import_report(store, sample, cwd=tmp_path)
    assert report.format == sample.parent.name
    assert len(report.sessions) == len(wanted) > 0
    for session, summary, want in zip(report.sessions, report.summaries, wanted, strict=True):
        counts = summary.counts
        assert counts["messages"] == counts["nodes"] == want["messages"]
        assert counts["roots"] == want["roots"]
        assert counts["branch_points"] == want["branch_points"]
        nodes = await store.list_nodes(session.session_id)
        roles = {n.metadata["imported_from"]["id"]: n.role for n in nodes}
        assert roles == want["roles"]
        calls = {
            n.metadata["imported_from"]["id"]: (
                [b.tool_call_id for b in n.content if b.type == "tool_call"],
                [b.tool_call_id for b in n.content if b.type == "tool_result"],
            )
            for n in nodes
        }
        assert calls == want["calls"]
        path = await store.active_path(session.session_id)
        assert path[-1].metadata["imported_from"]["id"] == want["leaf"]
        assert path[0].parent_id is None
        assert path[-1].created_at == as_datetime(want["leaf_time"])
    assert (await check_store(store)).ok


@pytest.mark.parametrize("other", OTHERS, ids=[p.name for p in OTHERS])
async def test_a_file_of_another_kind_is_refused(store: SessionStore, other: Path) -> None:
    with pytest.raises(InvalidArgument, match="cannot tell the format"):
        await import_file(store, other)
    assert await store.list_sessions() == []


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in SAMPLES])
async def test_a_damaged_sample_is_refused_and_nothing_is_written(
    sample: Path, store: SessionStore, tmp_path: Path
) -> None:
    data = sample.read_bytes()
    broken = tmp_path / sample.name
    broken.write_bytes(data[: len(data) // 2])  # cut off mid-way, as an interrupted download
    with pytest.raises(InvalidArgument, match="cannot tell the format"):
        await import_file(store, broken)
    with pytest.raises(InvalidArgument, match="not a JSON document"):
        await import_file(store, broken, sample.parent.name)
    assert await store.list_sessions() == []


async def test_an_export_whose_first_conversation_is_damaged_is_still_told(
    store: SessionStore, tmp_path: Path
) -> None:
    conversations = orjson.loads((DATA / "chatgpt/chatgpt-modern-export.json").read_bytes())
    damaged = [c for c in conversations if "mapping" not in c]
    moved = tmp_path / "conversations.json"
    moved.write_bytes(orjson.dumps(damaged + [c for c in conversations if "mapping" in c]))
    report = await import_report(store, moved, cwd=tmp_path)
    assert report.format == "chatgpt"
    assert len(report.sessions) == len(conversations) - len(damaged) > 0
    assert [i.reason for i in report.issues] == ["item 0 is not a conversation"]


async def test_tool_calls_rendered_in_open_webui_content_become_blocks_and_keep_the_text(
    store: SessionStore, tmp_path: Path
) -> None:
    sample = DATA / "openwebui/tool-calls-in-content.json"
    source = orjson.loads(sample.read_bytes())[0]["chat"]["history"]["messages"]
    report = await import_report(store, sample, cwd=tmp_path)
    nodes = await store.list_nodes(report.sessions[0].session_id)
    rendered = [m for m in source.values() if DETAILS.search(m["content"])]
    assert rendered
    for message in rendered:
        node = next(n for n in nodes if n.metadata["imported_from"]["id"] == message["id"])
        assert node.metadata["imported_from"]["record"]["content"] == message["content"]
        texts = [b.text for b in node.content if b.type == "text"]
        assert texts and all(t in message["content"] and "<details" not in t for t in texts)
        for call in (b for b in node.content if b.type == "tool_call"):
            assert isinstance(call.arguments, dict)  # the JSON text in the attribute, parsed
            assert f'name="{call.name}"' in message["content"]
        written = [
            orjson.loads(html.unescape(v))
            for v in re.findall(r' result="([^"]*)"', message["content"])
        ]
        results = [b for b in node.content if b.type == "tool_result"]
        assert [r.content[0].text for r in results] == written  # the result as the tool gave it
