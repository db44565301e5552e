"""pi coding-agent sessions (``~/.pi/agent/sessions/.../*.jsonl``, also OpenClaw's) to the model.

Line 1 is the ``session`` header (id, cwd, ``version``: none in v1). Every other entry is a
node. Version 1 entries have no ids and form one chain in file order; later versions link
``id``/``parentId``: a ``parentId`` naming the session itself makes a root, one naming a tool
call id (OpenClaw writes those) hangs under the entry holding that call, and one naming
nothing in the file makes a root (``parent_missing``). Messages: ``user``, ``assistant``,
``toolResult`` (role ``tool``), ``bashExecution`` (a command the user ran: role ``user``, the
command and its output as text), ``custom``/``hookMessage`` and ``custom_message`` (role
``user``, as pi sends them), ``branch_summary`` (role ``user``). A ``compaction`` keeps the
entries from ``firstKeptEntryId`` (v2+) or ``firstKeptEntryIndex`` (v1, an index into the
file's entries with the header at 0). Settings and extension entries (``model_change``,
``thinking_level_change``, ``custom``, ``label``, ``session_info``, unknown types) are
``system_note`` nodes holding the entry. The active leaf is the last entry.

Usage: an assistant message is one model call; its ``usage`` (``input``, ``output``,
``cacheRead``, ``cacheWrite``, ``cost.total``) and ``model`` are the call's, and its ``output``
is the node's ``token_count``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soong_store.importers import _blocks as b
from soong_store.importers._model import (
    Call,
    Entry,
    LineIssue,
    ParsedFile,
    SourceSession,
    usage_of,
)
from soong_store.importers._read import JsonLines, parse_time, stamp
from soong_store.importers._spool import ContentSpool

FORMAT = "pi"
_ENVELOPE = ("type", "id", "parentId", "timestamp")
_SAID = {"user": "user", "custom": "user", "hookMessage": "user", "system": "system"}


def parse(path: Path, data: bytes | None = None, spool: ContentSpool | None = None) -> ParsedFile:
    """Read one session file.

    ``data`` is the file's bytes, else the file is read a line at a time (twice: the header
    and links first). With a ``spool``, each entry's content waits there as soon as it is
    made, and the session holds the tree's shape.
    """
    records = JsonLines(path, data)
    header: dict[str, Any] = {}
    linked = False
    index = -1
    record: dict[str, Any] = {}
    for _, record in records:  # the header and whether entries link: they decide the parents
        index += 1
        if index == 0 and record.get("type") == "session":
            header = record
        linked = linked or index > 0 and "id" in record
    del record
    session = SourceSession(FORMAT, _str(header.get("id")), _str(header.get("cwd")) or None, {})
    session.time, _ = parse_time(header.get("timestamp"))
    session.metadata["pi"] = {k: v for k, v in header.items() if k not in ("type", "id", "cwd")}
    keys: dict[str, str] = {}  # source id (or tool call id) -> entry key
    by_index: dict[int, str] = {}
    previous: str | None = None
    compactions: list[tuple[Entry, Any, Any]] = []  # with firstKeptEntryId and -Index
    calls = b.ToolCalls()
    issues: list[LineIssue] = []
    index = -1
    for lineno, record in records:  # not enumerate(): its tuple would keep the last record
        index += 1
        if index == 0 and header:
            continue
        key = f"{index}"
        entry = _entry(record, key, lineno, index, calls)
        source_id = record.get("id")
        if linked:
            entry.parent = _parent(record.get("parentId"), keys, session.source_id, entry)
        else:
            entry.parent = previous
        if isinstance(source_id, str) and source_id not in keys:
            keys[source_id] = key
        for block in entry.blocks:
            if block["type"] == "tool_call":
                keys.setdefault(block["tool_call_id"], key)
        by_index[index] = key
        _usage(session, record, entry, lineno, issues)
        session.entries.append(entry)
        previous = key
        if entry.node_type == "compaction":
            kept = (record.get("firstKeptEntryId"), record.get("firstKeptEntryIndex"))
            compactions.append((entry, *kept))
        if spool is not None:
            spool.park(entry)
        del record, entry
    for entry, first, at in compactions:
        if isinstance(first, str):
            entry.keeps_from = keys.get(first)
        elif isinstance(at, int) and not isinstance(at, bool):
            entry.keeps_from = by_index.get(at)
    session.leaf = previous
    return ParsedFile(FORMAT, [session], records.issues + issues, spool)


def _usage(
    session: SourceSession,
    record: dict[str, Any],
    entry: Entry,
    lineno: int,
    issues: list[LineIssue],
) -> None:
    """The model call an assistant message records, and its output tokens on its node."""
    message = record.get("message")
    if record.get("type") != "message" or not isinstance(message, dict):
        return
    usage = message.get("usage")
    if message.get("role") != "assistant" or not isinstance(usage, dict):
        return
    cost = usage.get("cost")
    counts = {
        "input_tokens": usage.get("input"),
        "output_tokens": usage.get("output"),
        "cache_read_tokens": usage.get("cacheRead"),
        "cache_write_tokens": usage.get("cacheWrite"),
        "cost_usd": cost.get("total") if isinstance(cost, dict) else cost,
    }
    found = usage_of(message.get("model"), counts, lineno, issues)
    entry.token_count = found.get("output_tokens")
    session.calls.append(Call(entry.key, found, entry.position, entry.key))


def _parent(ref: Any, keys: dict[str, str], session_id: str, entry: Entry) -> str | None:
    if ref is None or ref == session_id:
        return None
    if isinstance(ref, str) and ref in keys:
        return keys[ref]
    entry.source["parent_missing"] = True
    return None


def _entry(record: dict[str, Any], key: str, lineno: int, index: int, calls: b.ToolCalls) -> Entry:
    kind = record.get("type")
    out = b.Content(key)
    source: dict[str, Any] = {"id": record.get("id"), "line": lineno, "index": index}
    role, node_type = "system", "system_note"
    message = record.get("message")
    if kind == "message" and isinstance(message, dict):
        role, node_type, held = _message(message, out, calls)
        source["record"] = {k: v for k, v in record.items() if k != "message"}
        source["message"] = {k: v for k, v in message.items() if k not in held}
    elif kind == "compaction" or kind == "branch_summary":
        summary = record.get("summary")
        out.add(b.text(summary) if isinstance(summary, str) else b.verbatim(summary))
        role, node_type = ("system", "compaction") if kind == "compaction" else ("user", "message")
        source["record"] = {k: v for k, v in record.items() if k != "summary"}
    elif kind == "custom_message":
        role, node_type = "user", "message"
        _content(record.get("content"), out, calls)
        source["record"] = {k: v for k, v in record.items() if k != "content"}
    else:
        out.add(b.verbatim({k: v for k, v in record.items() if k not in _ENVELOPE}))
        source["record"] = {k: v for k, v in record.items() if k in _ENVELOPE}
    moment = stamp(record.get("timestamp"), source)
    return Entry(
        key,
        None,
        role,
        node_type,
        out.blocks,
        out.source(source),
        moment,
        position=index,
        artifacts=out.artifacts,
    )


def _message(
    message: dict[str, Any], out: b.Content, calls: b.ToolCalls
) -> tuple[str, str, tuple[str, ...]]:
    """The role and node type of a message entry, and the fields its blocks hold."""
    role = message.get("role")
    if role == "toolResult":
        cid, made = calls.result(message.get("toolCallId"))
        items, lost = b.result_items(message.get("content"), out)
        extra = ({"id_generated": True} if made else {}) | ({"items": lost} if lost else {})
        out.add(b.tool_result_block(cid, items, message.get("isError") is True), extra)
        return "tool", "message", ("content", "toolCallId", "isError")
    if role == "bashExecution":
        out.add(b.text(b.as_text(message.get("command"))), {"field": "command"})
        out.add(b.text(b.as_text(message.get("output"))), {"field": "output"})
        return "user", "message", ("command", "output")
    _content(message.get("content"), out, calls)
    said = "assistant" if role == "assistant" else _SAID.get(str(role), "user")
    return said, "message", ("content",)


def _content(content: Any, out: b.Content, calls: b.ToolCalls) -> None:
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str):
            out.add(b.text(part), {"bare_string": True} if isinstance(content, list) else None)
        elif not isinstance(part, dict):
            out.add(b.verbatim(part))
        elif part.get("type") == "text" and isinstance(part.get("text"), str):
            out.add(b.text(part["text"]), b.extras(part, "type", "text"))
        elif part.get("type") == "toolCall":
            cid, made = calls.call(part.get("id"))
            block = b.tool_call_block(cid, part.get("name"), part.get("arguments"))
            extra = b.extras(part, "type", "id", "name", "arguments")
            out.add(block, extra | ({"id_generated": True} if made else {}))
        elif part.get("type") == "image":
            ref = out.image(part.get("data"), part.get("mimeType"))
            out.add(ref, b.without_data(part)) if ref else out.add(b.verbatim(part))
        else:
            out.add(b.verbatim(part))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
