"""Telling a session file's format from its content (``format="auto"``)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from soong_store.importers._read import read_jsonl

_SAMPLE = 200
_VISIBLE = re.compile(rb"\S")
_CODEX = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
_CLAUDE = {"user", "assistant", "summary", "system", "attachment", "file-history-snapshot"}


def detect(path: Path, data: bytes) -> str | None:
    """The format a file is in, or ``None`` when nothing fits."""
    if path.name.endswith(".meta.json"):
        return "claude-code"
    document = None if several_values(data) else _document(data)
    if document is not None:
        found = _document_format(document)
        if found is not None:
            return found
    records, _ = read_jsonl(b"\n".join(data.split(b"\n", _SAMPLE)[:_SAMPLE]))
    votes: Counter[str] = Counter()
    for _, record in records:
        vote = _record_format(record)
        if vote is not None:
            votes[vote] += 1
    return votes.most_common(1)[0][0] if votes else None


def several_values(data: bytes) -> bool:
    """Whether ``data`` (a file, or its head) is a file of lines rather than one JSON document.

    So it is when its first line is a JSON value of its own and more follows; then it is not
    parsed whole as a document (which takes many times its size).
    """
    end = data.find(b"\n")
    if end < 0 or _VISIBLE.search(data, end) is None:
        return False
    try:
        orjson.loads(data[:end])
    except orjson.JSONDecodeError:
        return False
    return True


def _document(data: bytes) -> Any:
    head = data.lstrip()[:1]
    if head not in (b"[", b"{"):
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _document_format(document: Any) -> str | None:
    """The format of a JSON document: of its first items that name one, the first's.

    An export is a list of conversations (or one), and one of them may be damaged (a ChatGPT
    export can hold a conversation without its ``mapping``), so a few items are looked at.
    """
    items = document if isinstance(document, list) else [document]
    dicts = [item for item in items[:_ITEMS] if isinstance(item, dict)]
    for item in dicts:
        found = _item_format(item)
        if found is not None:
            return found
    if isinstance(document, list) and dicts and ("action" in dicts[0] or "observation" in dicts[0]):
        return "openhands"
    return None


_ITEMS = 20
"""How many items of a JSON list :func:`_document_format` looks at."""


def _item_format(item: dict[str, Any]) -> str | None:
    if isinstance(item.get("mapping"), dict) and "current_node" in item:
        return "chatgpt"
    chat = item.get("chat")
    if isinstance(chat, dict) and (
        isinstance(chat.get("history"), dict) or isinstance(chat.get("messages"), list)
    ):
        return "openwebui"  # a chat row of "Export All Chats" or "Export chat (.json)"
    history = item.get("history")
    if isinstance(history, dict) and isinstance(history.get("messages"), dict):
        return "openwebui"  # a chat object alone (older versions' export)
    if "conversationId" in item and (
        isinstance(item.get("messages"), list) or isinstance(item.get("messagesTree"), list)
    ):
        return "librechat"
    return None


def _record_format(record: dict[str, Any]) -> str | None:
    kind = record.get("type")
    kind = kind if isinstance(kind, str) else None
    if record.get("format") == "soong-store-session":
        return "soong"
    if isinstance(record.get("history"), list):
        return "openhands"
    if kind in _CODEX and "payload" in record:
        return "codex"
    if kind == "session" and "cwd" in record:
        return "pi"
    if kind == "message" and isinstance(record.get("message"), dict):
        return "pi"
    if kind in _CLAUDE or "parentUuid" in record or "leafUuid" in record:
        return "claude-code"
    return None
