"""Open WebUI chat exports (JSON) to the model: one session per chat.

An export is a list of chat rows (``{"id", "title", "created_at", "chat": {...}}``: "Export All
Chats", or "Export chat (.json)" with one row), one such row alone, or a chat object alone
(``{"title", "history", "messages", ...}``, as older versions export it).
``chat.history.messages`` maps ids to messages linked by ``parentId`` (``childrenIds`` gives the
order of the children where it lists them; some exports leave it empty);
``chat.history.currentId`` is the active leaf. A chat whose ``history`` holds no messages is read
from its ``messages`` list instead (linked by ``parentId`` where the messages carry it, else one
after the other), its last message the active leaf. A message's structured ``output`` items, when
present, become its blocks (reasoning kept verbatim, ``function_call`` a tool call,
``function_call_output`` its result, ``message`` items their text) and the rendered ``content``
text stays in the record. A message without them whose ``content`` holds tool calls rendered
as ``<details type="tool_calls" ...>`` elements (as Open WebUI writes them) becomes the text
around them and, for each, a tool call and (once ``done``) its result, read from the element's
HTML-escaped JSON attributes; the ``content`` text stays in the record. Otherwise ``content``
is one text block.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import orjson

from soong_store.importers import _blocks as b
from soong_store.importers._model import Entry, LineIssue, ParsedFile, SourceSession
from soong_store.importers._read import parse_time, read_json, stamp
from soong_store.importers._tree import depth_first

FORMAT = "openwebui"
_ROLES = ("user", "assistant", "system")
_DETAILS = re.compile(r'<details type="tool_calls"((?:\s+\w+="[^"]*")*)\s*>(.*?)</details>', re.S)
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_SUMMARY = re.compile(r"^\s*<summary>.*?</summary>", re.S)


def parse(path: Path, data: bytes) -> ParsedFile:
    """Read an export of one chat or a list of chats."""
    document = read_json(data)
    items = document if isinstance(document, list) else [document]
    parsed = ParsedFile(FORMAT, [])
    for index, item in enumerate(items):
        wrapped = isinstance(item, dict) and isinstance(item.get("chat"), dict)
        chat = item["chat"] if wrapped else item
        alone = isinstance(item, dict) and isinstance(item.get("history"), dict)
        messages = _messages(chat) if wrapped or alone else None
        if messages is None:
            parsed.issues.append(LineIssue(0, "skipped", f"item {index} is not a chat"))
            continue
        parsed.sessions.append(_chat(item, chat, wrapped, *messages))
    return parsed


def _messages(chat: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], str | None, str] | None:
    """The chat's messages by id, its active leaf and the key they came from, or ``None``."""
    history = chat.get("history")
    listed = chat.get("messages")
    if isinstance(history, dict):
        by_id = history.get("messages")
        if isinstance(by_id, dict) and (by_id or not isinstance(listed, list) or not listed):
            found = {k: v for k, v in by_id.items() if isinstance(v, dict)}
            return found, b.name(history.get("currentId")), "history"
    if not isinstance(listed, list) or not isinstance(history, dict | None):
        return None
    found = {}
    linked = any(isinstance(m, dict) and "parentId" in m for m in listed)
    previous: str | None = None
    for message in listed:
        key = message.get("id") if isinstance(message, dict) else None
        if not isinstance(key, str) or key in found:
            continue
        found[key] = message if linked else {**message, "parentId": previous}
        previous = key
    return found, previous, "messages"


def _chat(
    item: dict[str, Any],
    chat: dict[str, Any],
    wrapped: bool,
    messages: dict[str, dict[str, Any]],
    current: str | None,
    source: str,
) -> SourceSession:
    held = ("history", "messages") if source == "messages" else ("history",)
    meta = {k: v for k, v in item.items() if k != "chat"} if wrapped else {}
    meta["chat"] = {k: v for k, v in chat.items() if k not in held}
    sid = item.get("id") or chat.get("id")
    session = SourceSession(FORMAT, str(sid or ""), None, {"openwebui": meta})
    title = item.get("title") if isinstance(item.get("title"), str) else chat.get("title")
    if isinstance(title, str):
        session.metadata["title"] = title
    session.time, _ = parse_time(item.get("created_at") if wrapped else chat.get("timestamp"))
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
    elif isinstance(message.get("content"), str) and _DETAILS.search(message["content"]):
        _details(message["content"], out, b.ToolCalls())
        held = ("childrenIds",)
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


def _details(content: str, out: b.Content, calls: b.ToolCalls) -> None:
    """The text of ``content`` and the tool calls rendered in it as ``<details>`` elements."""
    start = 0
    for match in _DETAILS.finditer(content):
        _text(content[start : match.start()], out)
        start = match.end()
        fields = {k: html.unescape(v) for k, v in _ATTRIBUTE.findall(match.group(1))}
        cid, made = calls.call(fields.get("id"))
        args, how = b.arguments(_decoded(fields.get("arguments", "")))
        extra = b.extras(fields, "id", "name", "arguments", "result") | how
        out.add(
            b.tool_call_block(cid, fields.get("name"), args),
            extra | ({"id_generated": True} if made else {}),
        )
        body = _SUMMARY.sub("", match.group(2)).strip()
        if "result" in fields:
            result: Any = _decoded(fields["result"])
        elif fields.get("done") == "true" and body:
            result = html.unescape(body)  # a result some pipelines write as the element's body
        else:
            continue  # a call still running when the chat was saved: no result
        items, lost = b.result_items(result, out)
        out.add(b.tool_result_block(cid, items, False), {"items": lost} if lost else None)
    _text(content[start:], out)


def _text(value: str, out: b.Content) -> None:
    if value.strip():
        out.add(b.text(value.strip()))


def _decoded(value: str) -> Any:
    """An attribute's JSON value (Open WebUI writes ``json.dumps`` of it), else its text."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value
