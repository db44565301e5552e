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
    items = document if isinstance(document, list) else [document]
    first = next((item for item in items if isinstance(item, dict)), None)
    if first is None:
        return None
    if "mapping" in first and "current_node" in first:
        return "chatgpt"
    if isinstance(first.get("chat"), dict) and "history" in first["chat"]:
        return "openwebui"
    if "conversationId" in first and isinstance(first.get("messages"), list):
        return "librechat"
    if isinstance(document, list) and ("action" in first or "observation" in first):
        return "openhands"
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
