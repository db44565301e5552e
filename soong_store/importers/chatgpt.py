"""ChatGPT data exports (``conversations.json``) to the model: one session per conversation.

A conversation's ``mapping`` holds nodes with ``parent`` and ``children``; every node with a
``message`` becomes a node (the message-less root is left out, its children are roots), in
depth-first order of the children lists. ``author.role`` gives the role (``tool`` stays
``tool``); ``content.parts`` become blocks (strings are text, anything else is kept verbatim,
as is content without parts). ``current_node`` is the active leaf.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soong_store.importers import _blocks as b
from soong_store.importers._model import Entry, LineIssue, ParsedFile, SourceSession
from soong_store.importers._read import parse_time, read_json, stamp
from soong_store.importers._tree import depth_first

FORMAT = "chatgpt"
_ROLES = ("user", "assistant", "system", "tool")


def parse(path: Path, data: bytes) -> ParsedFile:
    """Read an export holding one conversation or a list of them."""
    document = read_json(data)
    items = document if isinstance(document, list) else [document]
    parsed = ParsedFile(FORMAT, [])
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("mapping"), dict):
            parsed.issues.append(LineIssue(0, "skipped", f"item {index} is not a conversation"))
            continue
        parsed.sessions.append(_conversation(item))
    return parsed


def _conversation(conv: dict[str, Any]) -> SourceSession:
    mapping: dict[str, Any] = conv["mapping"]
    nodes = {k: v for k, v in mapping.items() if isinstance(v, dict)}
    parent = {k: _str(v.get("parent")) for k, v in nodes.items()}
    kids = {k: [c for c in v.get("children") or [] if isinstance(c, str)] for k, v in nodes.items()}
    meta = {k: v for k, v in conv.items() if k != "mapping"}
    session = SourceSession(
        FORMAT, str(conv.get("conversation_id") or conv.get("id") or ""), None, {"chatgpt": meta}
    )
    if isinstance(conv.get("title"), str):
        session.metadata["title"] = conv["title"]
    session.time, _ = parse_time(conv.get("create_time"))
    with_message = {k for k, v in nodes.items() if isinstance(v.get("message"), dict)}
    for position, key in enumerate(depth_first(list(nodes), parent, kids)):
        if key not in with_message:
            continue
        up = parent.get(key)
        while up is not None and up in nodes and up not in with_message:
            up = parent.get(up)
        entry = _entry(key, nodes[key]["message"], position)
        entry.parent = up if up in with_message else None
        if up is not None and up not in nodes:
            entry.source["parent_missing"] = True
        session.entries.append(entry)
    current = b.name(conv.get("current_node"))
    session.leaf = current if current in with_message else None
    return session


def _entry(key: str, message: dict[str, Any], position: int) -> Entry:
    author = b.mapping(message.get("author"))
    role = author.get("role") if author.get("role") in _ROLES else "user"
    out = b.Content(key)
    content = message.get("content")
    rest: dict[str, Any] = {k: v for k, v in message.items() if k != "content"}
    if isinstance(content, dict) and isinstance(content.get("parts"), list):
        for part in content["parts"]:
            out.add(b.text(part) if isinstance(part, str) else b.verbatim(part))
        rest["content"] = {k: v for k, v in content.items() if k != "parts"}
    elif content is not None:
        out.add(b.verbatim(content))
    source: dict[str, Any] = {"id": key, "record": rest}
    moment = stamp(message.get("create_time"), source)
    return Entry(
        key, None, str(role), "message", out.blocks, out.source(source), moment, position=position
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
