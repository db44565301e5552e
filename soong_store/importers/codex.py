"""Codex CLI rollouts (``~/.codex/sessions/.../rollout-*.jsonl``) to the model.

Each ``response_item`` is a node in file order: messages (``developer`` becomes ``system``),
reasoning (kept verbatim), tool calls of every kind and their outputs (paired by ``call_id``;
an output without one answers the oldest open call). A ``compacted`` record is a compaction
node followed by its ``replacement_history`` as nodes under it: that history is what Codex
sends after the compaction, so ``context()`` is the compaction, those items and what follows.
``event_msg`` records (and ``turn_context``, ``world_state`` ...) become events; their
``user_message``/``agent_message`` become message nodes only in a file that has no message
items (they repeat them otherwise). A later ``session_meta`` with ``forked_from_id`` starts a
``fork`` agent (from the main agent's latest node), one with ``parent_thread_id`` or a
``source.subagent`` a ``sub`` agent; the records after it belong to that agent until the next
``session_meta``, and one naming neither returns to the main agent.

Usage: an ``event_msg`` of type ``token_count`` is one model call of the current agent, its
``info.last_token_usage`` the call's counts and the latest ``turn_context``'s ``model`` its model
(a ``token_count`` whose ``info.total_token_usage`` repeats the one before it is a repeat, not a
call). Codex counts cached input inside ``input_tokens``: the call's ``input_tokens`` are the
uncached ones, as the other formats count them. A call answers several items (reasoning,
messages, tool calls), so no node gets a ``token_count``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from soong_store.importers import _blocks as b
from soong_store.importers._model import (
    MAIN,
    Agent,
    Call,
    Entry,
    Event,
    LineIssue,
    ParsedFile,
    SourceSession,
    usage_of,
)
from soong_store.importers._read import JsonLines, stamp
from soong_store.importers._spool import ContentSpool

FORMAT = "codex"
_ROLES = {"user": "user", "assistant": "assistant", "developer": "system", "system": "system"}
_CALLS = {
    "function_call": ("arguments", None),
    "custom_tool_call": ("input", None),
    "tool_search_call": ("arguments", "tool_search"),
    "local_shell_call": ("action", "local_shell"),
    "tool_call": ("arguments", None),
}
_OUTPUTS = (
    "function_call_output",
    "custom_tool_call_output",
    "tool_search_output",
    "local_shell_call_output",
    "tool_result",
)
_LEVELS = {"error": "error", "stream_error": "error", "turn_aborted": "warning"}


def parse(path: Path, data: bytes | None = None, spool: ContentSpool | None = None) -> ParsedFile:
    """Read one rollout file (one session, its sub-agent and fork threads as agents).

    ``data`` is the file's bytes, else the file is read a line at a time (twice: whether it has
    message items first). With a ``spool``, each entry's content and each event's payload wait
    there as soon as they are made, and the session holds the tree's shape.
    """
    records = JsonLines(path, data)
    reader = _Rollout(records, spool)
    position = -1
    for lineno, record in records:  # not enumerate(): its tuple would keep the last record
        position += 1
        reader.record(record, lineno, position)
        del record
    session = reader.session
    session.leaf = reader.last.get(MAIN)
    return ParsedFile(FORMAT, [session], records.issues + reader.issues, spool)


class _Rollout:
    def __init__(
        self, records: Iterable[tuple[int, dict[str, Any]]], spool: ContentSpool | None
    ) -> None:
        self.spool = spool
        self.session = SourceSession(FORMAT, "", None, {})
        self.agent = MAIN
        self.last: dict[str, str] = {}
        self.calls: dict[str, b.ToolCalls] = {}
        self.issues: list[LineIssue] = []
        self.model: Any = None
        self.totals: dict[str, Any] = {}  # the last total usage of each agent
        self.items_hold_messages = any(
            r.get("type") == "response_item"
            and isinstance(r.get("payload"), dict)
            and r["payload"].get("type") == "message"
            for _, r in records
        )

    def record(self, record: dict[str, Any], lineno: int, position: int) -> None:
        kind = record.get("type")
        payload = record.get("payload")
        item = payload if isinstance(payload, dict) else {}
        envelope = {k: v for k, v in record.items() if k != "payload"}
        source = {"line": lineno, "id": item.get("id"), "envelope": envelope}
        moment = stamp(record.get("timestamp"), source)
        if kind == "session_meta":
            self._meta(item, lineno, position)
        elif kind == "response_item" and item:
            self.add(self._item(item, f"{position}", source, moment, position))
            return
        elif kind == "compacted" and item:
            self._compacted(item, source, moment, position)
            return
        elif kind == "event_msg" and not self.items_hold_messages and self._said(item):
            role = "user" if item.get("type") == "user_message" else "assistant"
            out = b.Content(f"{position}")
            out.add(b.text(b.as_text(item.get("message"))), b.extras(item, "message"))
            entry = Entry(f"{position}", None, role, "message", out.blocks, out.source(source))
            entry.time, entry.position = moment, position
            self.add(entry)
            return
        sub = item.get("type") if kind == "event_msg" else None
        if kind == "turn_context" and "model" in item:
            self.model = item["model"]
        elif sub == "token_count":
            self._usage(item, lineno, position)
        level = _LEVELS.get(str(sub), "info")
        event = {"format": FORMAT, "type": kind, "line": lineno, "record": record}
        call = item.get("call_id") if isinstance(item.get("call_id"), str) else None
        made = Event("imported_record", event, moment, level, self.agent, None, call, position)
        if self.spool is not None:
            self.spool.park_event(made)
        self.session.events.append(made)

    def _usage(self, item: dict[str, Any], lineno: int, position: int) -> None:
        info = item.get("info")
        if not isinstance(info, dict) or not isinstance(info.get("last_token_usage"), dict):
            return
        last, total = info["last_token_usage"], info.get("total_token_usage")
        if total is not None and total == self.totals.get(self.agent):
            return
        self.totals[self.agent] = total
        counts = {
            "input_tokens": last.get("input_tokens"),
            "output_tokens": last.get("output_tokens"),
            "cache_read_tokens": last.get("cached_input_tokens"),
        }
        usage = usage_of(self.model, counts, lineno, self.issues)
        if "input_tokens" in usage and "cache_read_tokens" in usage:
            given, cached = usage["input_tokens"], usage["cache_read_tokens"]
            if cached <= given:
                usage["input_tokens"] = given - cached
            else:  # more cached than in all: one of the two is wrong
                del usage["input_tokens"]
                self.issues.append(
                    LineIssue(lineno, "recovered", f"usage: input_tokens {given!r} dropped")
                )
        key = f"{self.agent}:{lineno}"
        self.session.calls.append(Call(key, usage, position, agent=self.agent))

    @staticmethod
    def _said(item: dict[str, Any]) -> bool:
        return item.get("type") in ("user_message", "agent_message") and "message" in item

    def add(self, entry: Entry) -> None:
        entry.agent = self.agent
        entry.parent = self.last.get(self.agent)
        if entry.parent is None:
            entry.parent = next(
                (a.fork_from for a in self.session.agents if a.key == self.agent), None
            )
        self.last[self.agent] = entry.key
        self.session.entries.append(entry)
        if self.spool is not None:
            self.spool.park(entry)

    def _meta(self, item: dict[str, Any], lineno: int, position: int) -> None:
        s = self.session
        if not s.source_id:
            s.source_id = str(item.get("id") or item.get("session_id") or "")
            s.cwd = item.get("cwd") if isinstance(item.get("cwd"), str) else None
            return
        source = item.get("source")
        spawned = isinstance(source, dict) and "subagent" in source
        if item.get("forked_from_id"):
            agent_type = "fork"
        elif item.get("parent_thread_id") or spawned:
            agent_type = "sub"
        else:
            self.agent = MAIN
            return
        key = f"thread-{len(s.agents) + 1}"
        keys = ("id", "parent_thread_id", "forked_from_id", "agent_nickname", "agent_role")
        meta = {k: item[k] for k in keys if k in item} | {"line": lineno, "source": source}
        fork = self.last.get(MAIN) if agent_type == "fork" else None
        s.agents.append(Agent(key, agent_type, meta, fork))
        self.agent = key

    def _compacted(
        self, item: dict[str, Any], source: dict[str, Any], moment: Any, position: int
    ) -> None:
        key = f"{position}"
        message = item.get("message")
        out = b.Content(key)
        if isinstance(message, str) and message:
            out.add(b.text(message))
        history = item.get("replacement_history")
        rest = {k: v for k, v in item.items() if k not in ("message", "replacement_history")}
        source["record"] = rest | {"message": message} if not out.blocks else rest
        entry = Entry(key, None, "system", "compaction", out.blocks, out.source(source), moment)
        entry.position = position
        self.add(entry)
        for index, kept in enumerate(history if isinstance(history, list) else []):
            if not isinstance(kept, dict):
                kept = {"type": "unknown", "value": kept}
            origin = {"line": source["line"], "id": kept.get("id"), "replacement_index": index}
            self.add(self._item(kept, f"{key}.{index}", origin, moment, position))

    def _item(
        self, item: dict[str, Any], key: str, source: dict[str, Any], moment: Any, position: int
    ) -> Entry:
        kind = b.name(item.get("type"))
        out = b.Content(key)
        calls = self.calls.setdefault(self.agent, b.ToolCalls())
        role, node_type = "assistant", "message"
        if kind == "message" or kind == "agent_message":
            role = "user" if kind == "agent_message" else _ROLES.get(str(item.get("role")), "user")
            self._parts(item.get("content"), out)
            held = ("content",) if kind == "agent_message" else ("type", "content")
            source["record"] = b.extras(item, *held)
        elif kind in _CALLS:
            field, name = _CALLS[kind]
            cid, made = calls.call(item.get("call_id"))
            fn = item.get("function")
            label = name or item.get("name") or (fn.get("name") if isinstance(fn, dict) else None)
            args, how = b.arguments(item.get(field))
            out.add(
                b.tool_call_block(cid, label, args), how | ({"id_generated": True} if made else {})
            )
            source["record"] = b.extras(item, field, "call_id")
        elif kind in _OUTPUTS:
            role = "tool"
            cid, made = calls.result(item.get("call_id"))
            field = next((f for f in ("output", "result", "tools") if f in item), "output")
            items, lost = b.result_items(item.get(field), out)
            extra = ({"id_generated": True} if made else {}) | ({"items": lost} if lost else {})
            out.add(b.tool_result_block(cid, items, _failed(item)), extra)
            source["record"] = b.extras(item, field, "call_id")
        else:
            role = "system" if kind in ("compaction", "ghost_snapshot") else "assistant"
            node_type = "message" if kind in ("reasoning", "compaction") else "system_note"
            out.add(b.verbatim(item))
        return Entry(
            key,
            None,
            role,
            node_type,
            out.blocks,
            out.source(source),
            moment,
            position=position,
            artifacts=out.artifacts,
        )

    def _parts(self, content: Any, out: b.Content) -> None:
        for part in content if isinstance(content, list) else [content]:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                rest = b.extras(part, "text")
                out.add(b.text(part["text"]), rest if rest != {"type": "text"} else None)
            elif isinstance(part, dict) and part.get("type") == "input_image":
                ref = _data_url(part.get("image_url"), out)
                out.add(ref, dict(part, image_url="(artifact)")) if ref else out.add(
                    b.verbatim(part)
                )
            elif isinstance(part, str):
                out.add(b.text(part), {"bare_string": True})
            elif part is not None:
                out.add(b.verbatim(part))


def _data_url(url: Any, out: b.Content) -> dict[str, Any] | None:
    """An ``artifact_ref`` for a ``data:<mime>;base64,`` image URL."""
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        return None
    mime, _, data = url[5:].partition(";base64,")
    return out.image(data, mime)


def _failed(item: dict[str, Any]) -> bool:
    """Whether a tool output says the tool failed (``success: false`` or a non-zero exit)."""
    if item.get("success") is False or item.get("status") in ("failed", "error"):
        return True
    output = item.get("output", item.get("result"))
    if isinstance(output, str) and output.startswith("{"):
        try:
            output = orjson.loads(output)
        except orjson.JSONDecodeError:
            return False
    if isinstance(output, dict):
        meta = b.mapping(output.get("metadata")) or output
        code = meta.get("exit_code", meta.get("exitCode"))
        return output.get("success") is False or (isinstance(code, int) and code != 0)
    return False
