"""Claude Code transcripts (``~/.claude/projects/<project>/<sessionId>.jsonl``) to the model.

Every line with a ``uuid`` becomes a node: ``user``/``assistant`` lines are messages (a user
line holding only tool results has role ``tool``), ``system`` lines and ``attachment`` and
``progress`` lines are ``system_note`` nodes, and ``system/compact_boundary`` is a compaction
hung under its ``logicalParentUuid`` so that the history before it stays on the path. Lines
without a ``uuid`` (summaries, titles, snapshots, queue operations ...) become events.

Parents: ``parentUuid`` names the latest earlier line with that uuid (fixtures repeat uuids); a
line without the key follows the line before it; a file in which no ``parentUuid`` names a line
of the file is a linear transcript in file order. A parent that is not in the file makes a root
(``parent_missing``). Sub-agents: sidechain lines of the old layout (a sidechain root starts a
``sub`` agent; later sidechain lines join their parent's agent, or with a missing parent the
agent of the same ``agentId``, else the latest one), unless a main-chain line hangs under them;
and the transcripts of the newer ``<sessionId>/subagents/agent-*.jsonl`` layout, each a ``sub``
agent with its ``.meta.json``. The active leaf is the last main-chain user or assistant line.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

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
from soong_store.importers._read import JsonLines, parse_time, read_json, stamp
from soong_store.importers._spool import ContentSpool

FORMAT = "claude-code"
_NOTES = ("system", "attachment", "progress")
_ENVELOPE = {
    "parentUuid",
    "logicalParentUuid",
    "isSidechain",
    "userType",
    "cwd",
    "sessionId",
    "session_id",
    "version",
    "gitBranch",
    "type",
    "subtype",
    "uuid",
    "timestamp",
    "slug",
    "entrypoint",
    "agentId",
}


def parse(path: Path, data: bytes | None = None, spool: ContentSpool | None = None) -> ParsedFile:
    """Read a transcript (or a sub-agent's ``.meta.json``: its transcript beside it).

    ``data`` is the file's bytes, else the file is read a line at a time (twice: the links
    first). With a ``spool``, each entry's content waits there as soon as it is made, and the
    session holds the tree's shape.
    """
    meta: dict[str, Any] = {}
    if path.name.endswith(".meta.json"):
        meta = _meta(path.read_bytes() if data is None else data)
        path = path.with_name(path.name.removesuffix(".meta.json") + ".jsonl")
        data = None
    records = JsonLines(path, data)
    reader = _Transcript(MAIN, 0, spool=spool)
    reader.read(records)
    issues = records.issues + reader.issues
    session = reader.session
    session.metadata.update({"agent": meta} if meta else {})
    for sub_path in sorted((path.parent / path.stem / "subagents").glob("agent-*.jsonl")):
        start = len(session.entries) + len(session.events) + 1
        issues += join_sub(session, sub_path, start, spool)
    return ParsedFile(FORMAT, [session], issues, spool)


def is_sub_transcript(path: Path) -> bool:
    """Whether a file is a sub-agent's transcript (``agent-<id>.jsonl``, either layout)."""
    return path.name.startswith("agent-") and path.suffix == ".jsonl"


def parse_transcript(path: Path, spool: ContentSpool | None = None) -> ParsedFile:
    """One transcript file alone: a session's own file, or a sub-agent's as a ``sub`` agent.

    Unlike :func:`parse`, a session's file does not take in its ``subagents`` folder: where a
    whole folder is imported, each sub-agent's file is a transcript of its own that joins its
    parent's conversation (the ``sessionId`` its lines name) whenever it comes.
    """
    if not is_sub_transcript(path):
        reader = _Transcript(MAIN, 0, spool=spool)
        records = JsonLines(path)
        reader.read(records)
        return ParsedFile(FORMAT, [reader.session], records.issues + reader.issues, spool)
    session = SourceSession(FORMAT, "", None, {})
    issues = join_sub(session, path, _SUB_START, spool)
    if not session.source_id:  # no line names its session: the new layout's folder does
        parent = path.parent
        session.source_id = parent.parent.name if parent.name == "subagents" else path.stem
    return ParsedFile(FORMAT, [session], issues, spool)


_SUB_START = 10**12
"""Where a lone sub-agent transcript's positions start: after any session file's."""


def join_sub(
    session: SourceSession, sub_path: Path, start: int, spool: ContentSpool | None
) -> list[LineIssue]:
    """Read a sub-agent's transcript into ``session`` as a ``sub`` agent; its line issues."""
    key = sub_path.stem
    sub = _Transcript(key, start, main=False, spool=spool)
    sub_records = JsonLines(sub_path)
    sub.read(sub_records)
    meta_path = sub_path.with_name(f"{key}.meta.json")
    agent_meta = _meta(meta_path.read_bytes()) if meta_path.is_file() else {}
    source = {"file": sub_path.name, "meta": agent_meta, "agentId": sub.agent_id}
    session.agents.append(Agent(key, "sub", source))
    session.entries += sub.session.entries
    session.events += sub.session.events
    session.calls += sub.session.calls
    session.source_id = session.source_id or sub.session.source_id
    session.cwd = session.cwd or sub.session.cwd
    found = sub_records.issues + sub.issues
    return [LineIssue(i.line, i.action, f"{sub_path.name}: {i.reason}") for i in found]


def _meta(data: bytes) -> dict[str, Any]:
    try:
        value = read_json(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


class _Transcript:
    """One transcript file read into a session (the main one, or a sub-agent's)."""

    def __init__(
        self, agent: str, start: int, main: bool = True, spool: ContentSpool | None = None
    ) -> None:
        self.agent, self.start, self.main, self.spool = agent, start, main, spool
        self.session = SourceSession(FORMAT, "", None, {})
        self.calls = b.ToolCalls()
        self.agent_id: str | None = None
        self._latest: dict[str, str] = {}
        self._by_key: dict[str, Entry] = {}
        self.sidechains = True
        self._subs: dict[str, str | None] = {}  # sub-agent key -> its agentId
        self.issues: list[LineIssue] = []
        self._output: dict[str, int] = {}  # a call's output tokens counted by earlier lines

    def read(self, records: Iterable[tuple[int, dict[str, Any]]]) -> None:
        uuids: set[str] = set()
        refs: set[str] = set()
        only_sidechains = True
        r: dict[str, Any] = {}
        for _, r in records:  # the links first: they decide how every parent is read
            if isinstance(r.get("uuid"), str):
                uuids.add(r["uuid"])
                refs.update(
                    filter(None, map(_str, (r.get("parentUuid"), r.get("logicalParentUuid"))))
                )
                only_sidechains = only_sidechains and r.get("isSidechain") is True
        linked = not refs.isdisjoint(uuids)
        del uuids, refs, r  # the last record too: a long line must not stay for the second reading
        # A transcript of sidechain lines only is a sub-agent's own file: its lines are its chain.
        self.sidechains = not only_sidechains
        previous: str | None = None
        leaf: str | None = None
        s = self.session
        position = self.start - 1
        for lineno, record in records:  # not enumerate(): its tuple would keep the last record
            position += 1
            s.source_id = s.source_id or _str(record.get("sessionId")) or ""
            s.cwd = s.cwd or _str(record.get("cwd"))
            self.agent_id = self.agent_id or _str(record.get("agentId"))
            uuid = record.get("uuid")
            if not isinstance(uuid, str):
                self._record_event(record, lineno, position)
                continue
            key = uuid if uuid not in self._latest else f"{uuid}@{position}"
            key = key if self.main else f"{self.agent}:{key}"
            parent, missing = self._parent(record, previous, linked)
            entry = self._entry(record, key, lineno, position, parent)
            if missing:
                entry.source["parent_missing"] = True
            entry.agent = self.agent if not self.main else self._agent_of(record, entry)
            entry.transcript = "" if self.main else self.agent
            self._latest[uuid] = key
            self._by_key[key] = entry
            s.entries.append(entry)
            previous = key
            if record.get("type") in ("user", "assistant") and entry.agent == MAIN:
                leaf = key
            if record.get("type") == "assistant":
                self._call(record, entry, lineno)
            if self.spool is not None:
                self.spool.park(entry)
            del record, entry
        if self.main:
            self._dissolve_crossed()
        named = self._latest.get(str(s.metadata.get("leafUuid")))
        s.leaf = leaf or named or previous

    def _call(self, record: dict[str, Any], entry: Entry, lineno: int) -> None:
        """The usage an assistant line records: its model call's, and the line's own tokens.

        The lines of one response (one ``message.id``) repeat its usage, the output count
        growing to the response's: the call keeps the last line's usage, and each line's node
        counts the output tokens it adds to those of the lines before it. Claude Code's own
        ``<synthetic>`` messages are not model calls.
        """
        message = record.get("message")
        if not isinstance(message, dict):
            return
        usage = message.get("usage")
        if not isinstance(usage, dict) or message.get("model") == "<synthetic>":
            return
        counts = {
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
            "cache_read_tokens": usage.get("cache_read_input_tokens"),
            "cache_write_tokens": usage.get("cache_creation_input_tokens"),
            "cost_usd": record.get("costUSD"),
        }
        found = usage_of(message.get("model"), counts, lineno, self.issues)
        ident = message.get("id")
        key = f"{self.agent}:{ident if isinstance(ident, str) else lineno}:{found.get('model')}"
        out = found.get("output_tokens")
        if out is not None:
            before = self._output.get(key, 0)
            entry.token_count = out - before if out >= before else None
            self._output[key] = max(out, before)
        self.session.calls.append(Call(key, found, entry.position, entry.key))

    def _parent(
        self, record: dict[str, Any], previous: str | None, linked: bool
    ) -> tuple[str | None, bool]:
        """The parent's key, and whether the record names a parent that is not in the file."""
        if not linked or "parentUuid" not in record and "logicalParentUuid" not in record:
            return previous, False
        ref = record.get("parentUuid")
        if ref is None and record.get("subtype") == "compact_boundary":
            ref = record.get("logicalParentUuid")
        if ref is None:
            return None, False
        if isinstance(ref, str) and ref in self._latest:
            return self._latest[ref], False
        return None, True

    def _answered(self, parent: str | None, out: b.Content) -> str | None:
        """The call a result without an id answers: the first call up the path left open."""
        answered = {x["tool_call_id"] for x in out.blocks if x["type"] == "tool_result"}
        node = self._by_key.get(parent or "")
        while node is not None:
            calls = [x["tool_call_id"] for x in node.blocks if x["type"] == "tool_call"]
            if calls:
                return next((c for c in calls if c not in answered), None)
            answered |= {x["tool_call_id"] for x in node.blocks if x["type"] == "tool_result"}
            node = self._by_key.get(node.parent or "")
        return None

    def _result_id(self, call_id: Any, parent: str | None, out: b.Content) -> tuple[str, bool]:
        if isinstance(call_id, str) and call_id:
            return call_id, False
        found = self._answered(parent, out)
        return (found, True) if found is not None else self.calls.result(None)

    def _agent_of(self, record: dict[str, Any], entry: Entry) -> str:
        if record.get("isSidechain") is not True or not self.sidechains:
            return MAIN
        parent = self._by_key.get(entry.parent or "")
        if parent is not None and parent.agent != MAIN:
            return parent.agent
        agent_id = _str(record.get("agentId"))
        for key, known in self._subs.items():
            if agent_id is not None and known == agent_id:
                return key
        if parent is None and entry.source.get("parent_missing") and self._subs:
            key = list(self._subs)[-1]
            self._subs[key] = self._subs[key] or agent_id
            return key
        key = f"sidechain-{len(self._subs) + 1}"
        self._subs[key] = agent_id
        return key

    def _dissolve_crossed(self) -> None:
        """Sidechains a main-chain line hangs under are part of the main tree after all."""
        s = self.session
        while True:
            agent = {e.key: e.agent for e in s.entries}
            crossed = {
                agent[e.parent]
                for e in s.entries
                if e.agent == MAIN and e.parent is not None and agent[e.parent] != MAIN
            }
            if not crossed:
                break
            for e in s.entries:
                if e.agent in crossed:
                    e.agent = MAIN
            for key in crossed:
                self._subs.pop(key, None)
        first = {e.agent: e for e in reversed(s.entries)}
        for key, agent_id in self._subs.items():
            line = first[key].source.get("line")
            s.agents.append(
                Agent(key, "sub", {"sidechain": True, "agentId": agent_id, "line": line})
            )

    def _entry(
        self, record: dict[str, Any], key: str, lineno: int, position: int, parent: str | None
    ) -> Entry:
        kind = record.get("type")
        message = record.get("message")
        source: dict[str, Any] = {"id": record["uuid"], "line": lineno}
        if self.main is False:
            source["file_agent"] = self.agent
        out = b.Content(key)
        role, node_type = "system", "system_note"
        if kind in ("user", "assistant"):
            role, node_type = str(kind), "message"
            content = message.get("content") if isinstance(message, dict) else message
            self._content(content, out, parent)
            rest = dict(record)
            if isinstance(message, dict):
                rest["message"] = {k: v for k, v in message.items() if k != "content"}
            elif message is not None:
                rest.pop("message")
            if (
                kind == "user"
                and out.blocks
                and all(x["type"] == "tool_result" for x in out.blocks)
            ):
                role = "tool"
        elif kind == "tool_use":
            cid, made = self.calls.call(record.get("id"))
            args = record.get("input")
            out.add(
                b.tool_call_block(cid, record.get("name"), args),
                {"id_generated": made} if made else None,
            )
            role, node_type = "assistant", "message"
            rest = {k: v for k, v in record.items() if k not in ("name", "input", "id")}
        elif kind == "tool_result":
            cid, made = self._result_id(record.get("tool_use_id"), parent, out)
            items, lost = b.result_items(record.get("output", record.get("content")), out)
            extra = {"id_generated": made} if made else {}
            out.add(b.tool_result_block(cid, items, record.get("is_error") is True), extra | lost)
            role, node_type = "tool", "message"
            rest = {
                k: v for k, v in record.items() if k not in ("output", "content", "tool_use_id")
            }
        else:
            if record.get("subtype") == "compact_boundary":
                node_type = "compaction"
                text = record.get("content")
                out.add(b.text(text) if isinstance(text, str) else b.verbatim(text))
                rest = {k: v for k, v in record.items() if k != "content"}
            else:
                payload = {k: v for k, v in record.items() if k not in _ENVELOPE}
                out.add(b.verbatim(payload))
                rest = {k: v for k, v in record.items() if k in _ENVELOPE}
        source["record"] = rest
        moment = stamp(record.get("timestamp"), source)
        return Entry(
            key,
            parent,
            role,
            node_type,
            out.blocks,
            out.source(source),
            moment,
            position=position,
            artifacts=out.artifacts,
        )

    def _content(self, content: Any, out: b.Content, parent: str | None) -> None:
        if content is None:
            return
        if not isinstance(content, list):
            out.add(b.text(content) if isinstance(content, str) else b.verbatim(content))
            return
        for part in content:
            if isinstance(part, str):
                out.add(b.text(part), {"bare_string": True})
            elif not isinstance(part, dict):
                out.add(b.verbatim(part))
            elif part.get("type") == "text" and isinstance(part.get("text"), str):
                out.add(b.text(part["text"]), b.extras(part, "type", "text"))
            elif part.get("type") == "tool_use":
                cid, made = self.calls.call(part.get("id"))
                extra = b.extras(part, "type", "id", "name", "input")
                extra |= {"id_generated": True} if made else {}
                out.add(b.tool_call_block(cid, part.get("name"), part.get("input")), extra)
            elif part.get("type") == "tool_result":
                cid, made = self._result_id(part.get("tool_use_id"), parent, out)
                items, lost = b.result_items(part.get("content"), out)
                extra = b.extras(part, "type", "tool_use_id", "content", "is_error")
                extra |= ({"id_generated": True} if made else {}) | (
                    {"items": lost} if lost else {}
                )
                if part.get("is_error") not in (None, True, False):
                    extra["is_error"] = part.get("is_error")
                out.add(b.tool_result_block(cid, items, part.get("is_error") is True), extra)
            elif part.get("type") == "image" and isinstance(part.get("source"), dict):
                ref = out.image(part["source"].get("data"), part["source"].get("media_type"))
                out.add(ref, b.without_data(part)) if ref else out.add(b.verbatim(part))
            else:
                out.add(b.verbatim(part))

    def _record_event(self, record: dict[str, Any], lineno: int, position: int) -> None:
        kind = record.get("type")
        s = self.session
        if kind == "summary" and isinstance(record.get("leafUuid"), str):
            s.metadata.setdefault("leafUuid", record["leafUuid"])
        if kind in ("custom-title", "ai-title"):
            title = record.get("customTitle") or record.get("aiTitle")
            if isinstance(title, str) and (kind == "custom-title" or "title" not in s.metadata):
                s.metadata["title"] = title
        moment, _ = parse_time(record.get("timestamp"))
        payload = {"format": FORMAT, "type": kind, "line": lineno, "record": record}
        agent = MAIN if self.main else self.agent
        event = Event("imported_record", payload, moment, agent=agent, position=position)
        event.transcript = "" if self.main else self.agent
        if self.spool is not None:
            self.spool.park_event(event)
        s.events.append(event)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
