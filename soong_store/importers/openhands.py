"""OpenHands event streams to the model: trajectories and evaluation or resolver outputs.

A trajectory is a JSON list of events; an output file is JSON Lines, one run with its
``history`` per line, one session each.
Events form one chain in their order. Actions: ``message`` (role from ``source``; without one,
the first is the user's task), ``system`` and ``finish`` are messages; any other action of the
agent is an assistant node with its ``thought`` as text and a tool call (the
``tool_call_metadata`` id and function name, else a generated id and the action name, the
``args`` as arguments). Observations answering a tool call (by ``cause``, by the metadata's id,
else the oldest open call) are tool results, failed when the observation is ``error``,
``success`` is false or the exit code is not 0 (nor -1, "still running"). A ``recall``
observation is a ``memory_context`` node. State changes, ``null`` observations and actions of
the environment become events.

Usage: an action's ``tool_call_metadata.model_response`` is the model call that made it (its
``id`` names it: the actions of one response share it), with its ``model`` and ``usage``
(``prompt_tokens`` less ``prompt_tokens_details.cached_tokens``, ``completion_tokens``, the
cached ones). A response may make several actions, so no node gets a ``token_count``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soong_store.importers import _blocks as b
from soong_store.importers._model import (
    Call,
    Entry,
    Event,
    LineIssue,
    ParsedFile,
    SourceSession,
    usage_of,
)
from soong_store.importers._read import read_json, read_jsonl, stamp

FORMAT = "openhands"
_EVENTS = {"change_agent_state", "recall", "agent_state_changed", "null"}
_HELD = {"id", "timestamp", "source", "message", "action", "observation", "args", "cause"}
_HELD |= {"content", "extras", "tool_call_metadata", "success"}


def parse(path: Path, data: bytes) -> ParsedFile:
    """Read a trajectory, or an output file of runs."""
    if data.lstrip()[:1] == b"[":  # a trajectory: one JSON document, read whole or refused
        document = read_json(data)
    else:
        try:
            document = read_json(data)
        except ValueError:
            document = None
    found: list[LineIssue] = []
    if isinstance(document, list):
        return ParsedFile(FORMAT, [_session(document, {}, "", found)], found)
    if isinstance(document, dict) and isinstance(document.get("history"), list):
        return ParsedFile(FORMAT, [_run(document, found)], found)
    records, issues = read_jsonl(data)
    parsed = ParsedFile(FORMAT, [], issues)
    for lineno, record in records:
        if isinstance(record.get("history"), list):
            parsed.sessions.append(_run(record, found, lineno))
            parsed.issues += found
            found.clear()
        else:
            parsed.issues.append(LineIssue(lineno, "skipped", "a record without a history"))
    return parsed


def _run(record: dict[str, Any], issues: list[LineIssue], line: int = 0) -> SourceSession:
    meta = {k: v for k, v in record.items() if k != "history"}
    issue = b.mapping(record.get("issue"))
    source_id = record.get("instance_id") or (
        f"{issue.get('owner')}/{issue.get('repo')}#{issue.get('number')}" if issue else ""
    )
    return _session(record["history"], meta, str(source_id), issues, line)


def _session(
    events: list[Any], meta: dict[str, Any], source_id: str, issues: list[LineIssue], line: int = 0
) -> SourceSession:
    session = SourceSession(FORMAT, source_id, None, {"openhands": meta} if meta else {})
    reader = _Stream(session, issues, line)
    for position, event in enumerate(events):
        if isinstance(event, dict):
            reader.event(event, position)
        else:
            payload = {"format": FORMAT, "index": position, "record": event}
            session.events.append(Event("imported_record", payload, position=position))
    session.leaf = reader.last
    return session


class _Stream:
    def __init__(self, session: SourceSession, issues: list[LineIssue], line: int) -> None:
        self.session, self.issues, self.line = session, issues, line
        self.calls = b.ToolCalls()
        self.by_event: dict[str | int | None, str] = {}  # action id -> tool call id
        self.last: str | None = None

    def event(self, event: dict[str, Any], position: int) -> None:
        action, observation = event.get("action"), event.get("observation")
        kind = b.name(action if action is not None else observation)
        source: dict[str, Any] = {"id": event.get("id"), "index": position}
        if action is not None:  # its args (nested, or flat beside it) are held by the blocks
            source["record"] = {
                k: v for k, v in event.items() if k in _HELD and k not in ("args", "content")
            }
        else:
            source["record"] = {k: v for k, v in event.items() if k != "content"}
        moment = stamp(event.get("timestamp"), source)
        environment = event.get("source") == "environment" and action is not None
        if (kind in _EVENTS and (kind != "recall" or action is not None)) or environment:
            payload = {"format": FORMAT, "index": position, "record": event}
            self.session.events.append(Event("imported_record", payload, moment, position=position))
            return
        key = f"{position}"
        out = b.Content(key)
        args = b.mapping(event.get("args")) or _flat_args(event)
        meta = b.mapping(event.get("tool_call_metadata"))
        if action is not None:
            role, node_type = self._action(event, str(action), args, meta, out)
        elif kind == "recall":
            role, node_type = "system", "memory_context"
            out.add(b.text(b.as_text(event.get("content", ""))))
            out.add(b.verbatim(event.get("extras")))
        else:
            role, node_type = "tool", "message"
            cid = self.by_event.get(_ref(event.get("cause"))) or meta.get("tool_call_id")
            cid, made = self.calls.result(cid)
            content = event.get("content", event.get("message"))
            items, lost = b.result_items(content, out)
            extra = ({"id_generated": True} if made else {}) | ({"items": lost} if lost else {})
            out.add(b.tool_result_block(cid, items, _failed(event)), extra)
        entry = Entry(key, self.last, role, node_type, out.blocks, out.source(source), moment)
        entry.position, entry.artifacts = position, out.artifacts
        self.session.entries.append(entry)
        self.last = key
        if action is not None:
            self._usage(b.mapping(meta.get("model_response")), entry)

    def _usage(self, response: dict[str, Any], entry: Entry) -> None:
        """The model call that made an action, where its response records usage."""
        usage = b.mapping(response.get("usage"))
        if not usage:
            return
        cached = b.mapping(usage.get("prompt_tokens_details")).get("cached_tokens")
        counts = {
            "input_tokens": usage.get("prompt_tokens"),
            "output_tokens": usage.get("completion_tokens"),
            "cache_read_tokens": cached,
        }
        found = usage_of(response.get("model"), counts, self.line, self.issues)
        given, read = found.get("input_tokens"), found.get("cache_read_tokens")
        if given is not None and read is not None:
            if read <= given:
                found["input_tokens"] = given - read
            else:
                del found["input_tokens"]
                self.issues.append(
                    LineIssue(self.line, "recovered", f"usage: input_tokens {given!r} dropped")
                )
        ident = response.get("id")
        key = f"response:{ident}" if isinstance(ident, str) and ident else f"action:{entry.key}"
        self.session.calls.append(Call(key, found, entry.position, entry.key))

    def _action(
        self,
        event: dict[str, Any],
        action: str,
        args: dict[str, Any],
        meta: dict[str, Any],
        out: b.Content,
    ) -> tuple[str, str]:
        said = args.get("content", event.get("content", event.get("message", "")))
        if action == "message":
            first = event.get("source") is None and self.last is None
            out.add(b.text(b.as_text(said)), b.extras(args, "content"))
            return ("user" if event.get("source") == "user" or first else "assistant"), "message"
        if action == "system":
            out.add(b.text(b.as_text(said)), b.extras(args, "content"))
            return "system", "message"
        thought = args.get("thought")
        if isinstance(thought, str) and thought:
            out.add(b.text(thought), {"field": "thought"})
        if action == "finish" and not meta:
            out.add(b.text(b.as_text(event.get("message", ""))), {"field": "message"})
            return "assistant", "message"
        cid, made = self.calls.call(meta.get("tool_call_id"))
        self.by_event[_ref(event.get("id"))] = cid
        arguments = {k: v for k, v in args.items() if k != "thought"}
        name = meta.get("function_name") or action
        out.add(b.tool_call_block(cid, name, arguments), {"action": action, "id_generated": made})
        return "assistant", "message"


def _ref(value: Any) -> str | int | None:
    """An event id or ``cause`` usable as a key (ids are integers or strings)."""
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _flat_args(event: dict[str, Any]) -> dict[str, Any]:
    """The arguments of an action written flat (older outputs put them beside ``action``)."""
    return {k: v for k, v in event.items() if k not in _HELD}


def _failed(event: dict[str, Any]) -> bool:
    if event.get("observation") == "error" or event.get("success") is False:
        return True
    extras = b.mapping(event.get("extras"))
    meta = b.mapping(extras.get("metadata"))
    code = meta.get("exit_code", event.get("exit_code"))
    return isinstance(code, int) and code not in (0, -1)
