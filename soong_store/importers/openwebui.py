"""Open WebUI chat exports (a JSON list of chats) to the model: one session per chat.

``chat.history.messages`` maps ids to messages linked by ``parentId``/``childrenIds``;
``chat.history.currentId`` is the active leaf. A message's structured ``output`` items, when
present, become its blocks (reasoning kept verbatim, ``function_call`` a tool call,
``function_call_output`` its result, ``message`` items their text) and the rendered
``content`` text stays in the record; otherwise ``content`` is one text block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soong_store.importers import _blocks as b
from soong_store.importers._model import Entry, LineIssue, ParsedFile, SourceSession
from soong_store.importers._read import parse_time, read_json, stamp
from soong_store.importers._tree import depth_first

FORMAT = "openwebui"
_ROLES = ("user", "assistant", "system")


def parse(path: Path, data: bytes) -> ParsedFile:
    """Read an export of one chat or a list of chats."""
    document = read_json(data)
    items = document if isinstance(document, list) else [document]
    parsed = ParsedFile(FORMAT, [])
    for index, item in enumerate(items):
        chat = item.get("chat") if isinstance(item, dict) else None
        history = chat.get("history") if isinstance(chat, dict) else None
        if not isinstance(history, dict) or not isinstance(history.get("messages"), dict):
            parsed.issues.append(LineIssue(0, "skipped", f"item {index} is not a chat"))
            continue
        parsed.sessions.append(_chat(item, history))
    return parsed


def _chat(item: dict[str, Any], history: dict[str, Any]) -> SourceSession:
    messages = {k: v for k, v in history["messages"].items() if isinstance(v, dict)}
    meta = {k: v for k, v in item.items() if k != "chat"}
    meta["chat"] = {k: v for k, v in item["chat"].items() if k != "history"}
    session = SourceSession(FORMAT, str(item.get("id") or ""), None, {"openwebui": meta})
    if isinstance(item.get("title"), str):
        session.metadata["title"] = item["title"]
    session.time, _ = parse_time(item.get("created_at"))
    parent = {
        k: v.get("parentId") if isinstance(v.get("parentId"), str) else None
        for k, v in messages.items()
    }
    kids = {
        k: [c for c in v.get("childrenIds") or [] if isinstance(c, str)]
        for k, v in messages.items()
    }
    for position, key in enumerate(depth_first(list(messages), parent, kids)):
        entry = _entry(key, messages[key], position)
        ref = parent[key]
        entry.parent = ref if ref in messages else None
        if ref is not None and ref not in messages:
            entry.source["parent_missing"] = True
        session.entries.append(entry)
    current = b.name(history.get("currentId"))
    session.leaf = current if current in messages else None
    return session


def _entry(key: str, message: dict[str, Any], position: int) -> Entry:
    role = message.get("role") if message.get("role") in _ROLES else "user"
    out = b.Content(key)
    output = message.get("output")
    if isinstance(output, list) and output:
        calls = b.ToolCalls()
        for item in output:
            _output(item, out, calls)
        held: tuple[str, ...] = ("output", "childrenIds")
    else:
        out.add(b.text(b.as_text(message.get("content", ""))))
        held = ("content", "childrenIds")
    source: dict[str, Any] = {"id": key, "record": b.extras(message, *held)}
    moment = stamp(message.get("timestamp"), source)
    return Entry(
        key,
        None,
        str(role),
        "message",
        out.blocks,
        out.source(source),
        moment,
        position=position,
        artifacts=out.artifacts,
    )


def _output(item: Any, out: b.Content, calls: b.ToolCalls) -> None:
    kind = item.get("type") if isinstance(item, dict) else None
    if kind == "function_call":
        cid, made = calls.call(item.get("call_id"))
        args, how = b.arguments(item.get("arguments"))
        extra = b.extras(item, "call_id", "name", "arguments") | how
        out.add(
            b.tool_call_block(cid, item.get("name"), args),
            extra | ({"id_generated": made} if made else {}),
        )
    elif kind == "function_call_output":
        cid, made = calls.result(item.get("call_id"))
        items, lost = b.result_items(item.get("output"), out)
        extra = b.extras(item, "call_id", "output") | ({"items": lost} if lost else {})
        failed = item.get("status") in ("failed", "error")
        out.add(
            b.tool_result_block(cid, items, failed),
            extra | ({"id_generated": made} if made else {}),
        )
    elif kind == "message" and isinstance(item.get("content"), list):
        for part in item["content"]:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.add(
                    b.text(part["text"]),
                    {"item": b.extras(item, "content"), **b.extras(part, "text")},
                )
            else:
                out.add(b.verbatim(part), {"item": b.extras(item, "content")})
    else:
        out.add(b.verbatim(item))
