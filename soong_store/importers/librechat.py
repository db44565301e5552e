"""LibreChat conversation exports (JSON, ``recursive`` or flat) to the model.

The messages are the export's ``messages`` list (``messagesTree`` in older versions). They nest
through ``children`` (``recursive: true``) or form a flat list; either way each names its parent
with ``parentMessageId``, the all-zero UUID (or a parent not in the file, ``parent_missing``)
making a root, so an export can hold several roots. ``isCreatedByUser`` gives the role.
``content`` parts (agents endpoints) become blocks (text, tool calls with their output as a
result, anything else verbatim), else ``text`` is one text block. ``tokenCount`` is the node's
token count. The active leaf is the last message in file order (an export names none).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soong_store.importers import _blocks as b
from soong_store.importers._model import Entry, LineIssue, ParsedFile, SourceSession
from soong_store.importers._read import read_json, stamp

FORMAT = "librechat"
_NO_PARENT = "00000000-0000-0000-0000-000000000000"


def parse(path: Path, data: bytes) -> ParsedFile:
    """Read one exported conversation (or a list of them)."""
    document = read_json(data)
    items = document if isinstance(document, list) else [document]
    parsed = ParsedFile(FORMAT, [])
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(_messages(item), list):
            parsed.issues.append(LineIssue(0, "skipped", f"item {index} is not a conversation"))
            continue
        parsed.sessions.append(_conversation(item, parsed.issues))
    return parsed


def _conversation(conv: dict[str, Any], issues: list[LineIssue]) -> SourceSession:
    meta = {k: v for k, v in conv.items() if k not in ("messages", "messagesTree")}
    session = SourceSession(
        FORMAT, str(conv.get("conversationId") or ""), None, {"librechat": meta}
    )
    if isinstance(conv.get("title"), str):
        session.metadata["title"] = conv["title"]
    flat: list[tuple[dict[str, Any], str | None]] = []
    stack: list[tuple[Any, str | None]] = [(m, None) for m in reversed(_messages(conv))]
    while stack:
        message, outer = stack.pop()
        if not isinstance(message, dict) or not isinstance(message.get("messageId"), str):
            issues.append(LineIssue(0, "skipped", "a message without a messageId"))
            continue
        flat.append((message, outer))
        kids = b.listing(message.get("children"))
        stack += [(kid, message["messageId"]) for kid in reversed(kids)]
    keys: dict[str, str] = {}
    for position, (message, _) in enumerate(flat):
        mid = message["messageId"]
        key = mid if mid not in keys else f"{mid}@{position}"
        keys.setdefault(mid, key)
        session.entries.append(_entry(message, key, position))
    for entry, (message, outer) in zip(session.entries, flat, strict=True):
        ref = message.get("parentMessageId", outer)
        if isinstance(ref, str) and ref != _NO_PARENT:
            entry.parent = keys.get(ref)
            if entry.parent is None:
                entry.source["parent_missing"] = True
    session.leaf = session.entries[-1].key if session.entries else None
    return session


def _messages(conv: dict[str, Any]) -> Any:
    """The conversation's messages: ``messages``, else the older exports' ``messagesTree``."""
    listed = conv.get("messages")
    return listed if isinstance(listed, list) else conv.get("messagesTree")


def _entry(message: dict[str, Any], key: str, position: int) -> Entry:
    out = b.Content(key)
    calls = b.ToolCalls()
    content = message.get("content")
    if isinstance(content, list) and content:
        for part in content:
            _part(part, out, calls)
        held: tuple[str, ...] = ("content", "children")
    else:
        out.add(b.text(b.as_text(message.get("text", ""))))
        held = ("text", "children")
    source: dict[str, Any] = {"id": message["messageId"]}
    source["record"] = {k: v for k, v in message.items() if k not in held}
    moment = stamp(message.get("createdAt"), source)
    role = "user" if message.get("isCreatedByUser") is True else "assistant"
    tokens = message.get("tokenCount")
    entry = Entry(key, None, role, "message", out.blocks, out.source(source), moment)
    entry.position = position
    counted = isinstance(tokens, int) and not isinstance(tokens, bool) and 0 <= tokens < 2**63
    entry.token_count = tokens if counted else None  # a JSON ``true`` is no count
    entry.artifacts = out.artifacts
    return entry


def _part(part: Any, out: b.Content, calls: b.ToolCalls) -> None:
    if not isinstance(part, dict):
        out.add(b.text(part) if isinstance(part, str) else b.verbatim(part))
        return
    kind = part.get("type")
    value = part.get(kind) if isinstance(kind, str) else None
    if kind == "text" and isinstance(value, dict) and isinstance(value.get("value"), str):
        value = value["value"]
    if kind == "text" and isinstance(value, str):
        out.add(b.text(value), b.extras(part, "type", "text"))
    elif kind == "tool_call" and isinstance(value, dict):
        cid, made = calls.call(value.get("id"))
        args, how = b.arguments(value.get("args"))
        extra = b.extras(part, "type", "tool_call") | how | ({"id_generated": True} if made else {})
        extra["tool_call"] = b.extras(value, "id", "name", "args", "output")
        out.add(b.tool_call_block(cid, value.get("name"), args), extra)
        if "output" in value:
            items, lost = b.result_items(value.get("output"), out)
            out.add(b.tool_result_block(cid, items, False), {"items": lost} if lost else None)
    else:
        out.add(b.verbatim(part))
