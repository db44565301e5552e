"""Codex CLI rollouts (``~/.codex/sessions/.../rollout-*.jsonl``) to the model.

Each ``response_item`` is a node in file order: messages (``developer`` becomes ``system``),
reasoning (kept verbatim), tool calls of every kind and their outputs (paired by ``call_id``; an
output without one answers the oldest open call). A ``compacted`` record is a compaction node
followed by its ``replacement_history`` as nodes under it: that history is what Codex sends
after the compaction, so ``context()`` is the compaction, those items and what follows.
``event_msg`` records (and ``turn_context``, ``world_state`` ...) become events. Codex writes
each message twice, as an ``event_msg`` (``user_message``/``agent_message``) and as an item, in
either order: an ``event_msg`` message is a node only before the file's first message item (a
file of events only has its messages so), and then the item that repeats it (the next one of its
role, with its text) is an event; what a line becomes depends only on the lines before it, so a
rollout imported in parts as it grows gives the nodes of a one-shot import. A later
``session_meta`` with ``forked_from_id`` starts a ``fork`` agent (from the main agent's latest
node), one with ``parent_thread_id`` or a ``source.subagent`` a ``sub`` agent; the records after
it belong to that agent until the next ``session_meta``, and one naming neither returns to the
main agent.

Sub-agent rollouts. Codex writes each thread to a rollout of its own; a thread a ``spawn_agent``
call started names its parent in its first ``session_meta`` (``parent_thread_id``, or
``source.subagent.thread_spawn.parent_thread_id``). :func:`thread_of` reads who a rollout's
thread is; :func:`join_sub` reads a sub-agent's rollout into its parent's conversation as a
``sub`` agent (its records keyed by its file's name, as a Claude Code sub-agent's transcript
is). A ``forked_from_id`` alone (a thread a person forked to go on elsewhere) names no parent:
the fork is a conversation of its own (its rollout begins with a copy of the history it was
forked from), its origin kept in its records.

Usage: an ``event_msg`` of type ``token_count`` is one model call of the current agent, its
``info.last_token_usage`` the call's counts and the latest ``turn_context``'s ``model`` its model
(a ``token_count`` whose ``info.total_token_usage`` repeats the one before it is a repeat, not a
call). Codex counts cached input inside ``input_tokens``: the call's ``input_tokens`` are the
uncached ones, as the other formats count them. A call answers several items (reasoning,
messages, tool calls), so no node gets a ``token_count``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
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

    ``data`` is the file's bytes, else the file is read a line at a time. With a ``spool``,
    each entry's content and each event's payload wait there as soon as they are made, and the
    session holds the tree's shape.
    """
    records = JsonLines(path, data)
    reader = _Rollout(spool)
    reader.read(records)
    session = reader.session
    session.leaf = reader.last.get(MAIN)
    return ParsedFile(FORMAT, [session], records.issues + reader.issues, spool)


@dataclass(frozen=True, slots=True)
class Thread:
    """Who a rollout's thread is, as its first ``session_meta`` says."""

    id: str
    parent: str | None
    """The thread that spawned it (a sub-agent's parent), if it names one."""


def thread_of(path: Path) -> Thread | None:
    """The thread of a rollout, from the first ``session_meta`` of its first lines, if any."""
    try:
        for at, (_, record) in enumerate(JsonLines(path)):
            payload = record.get("payload")
            if record.get("type") == "session_meta" and isinstance(payload, dict):
                named = payload.get("id") or payload.get("session_id")
                return Thread(str(named), parent_of(payload)) if named else None
            if at >= _HEAD:
                break
    except (OSError, ValueError):
        pass
    return None


def threads_of(paths: Iterable[Path]) -> list[Thread]:
    """The threads of the rollouts among ``paths`` (told by their name, ``rollout-*``).

    Read to follow a sub-agent's chain of parents through rollouts imported before: one that
    grew while its parents' did not is read alone.
    """
    found = (thread_of(p) for p in paths if p.name.startswith("rollout-"))
    return [t for t in found if t is not None]


def conversation_of(thread: Thread, threads: Iterable[Thread]) -> str:
    """The conversation of a thread: the thread at the top of its parents' chain.

    The chain is followed through ``threads`` (the rollouts at hand); the last parent named is
    the conversation even where its own rollout is not among them (it may come later).
    """
    parents = {t.id: t.parent for t in threads}
    current, seen = thread.id, {thread.id}
    while (parent := parents.get(current)) is not None and parent not in seen:
        seen.add(parent)
        current = parent
    if current == thread.id and thread.parent is not None:  # its parent is not at hand
        current = thread.parent
    return current


_HEAD = 20
"""How many records :func:`thread_of` reads before it gives up on a ``session_meta``."""

_DATED = 3
"""Codex keeps rollouts in ``sessions/YYYY/MM/DD``: the dated folders above a rollout."""


def rollouts_beside(rollouts: Iterable[Path], wanted: set[str]) -> list[Path]:
    """The rollouts of the threads ``wanted`` in the Codex folders ``rollouts`` lie in.

    Found by name (Codex names a rollout after its thread, ``rollout-<time>-<id>.jsonl``): under
    the ``sessions`` folder above a rollout's dated folders (``YYYY/MM/DD``) and in the
    ``archived_sessions`` beside it, else in the rollout's own folder alone (never a walk of
    whatever folder a copied rollout sits in). A sub-agent's parent found there, not among the
    paths imported, still tells the chain its conversation is at the top of. Links are not
    followed.
    """
    folders: dict[Path, bool] = {}  # folder: whether its subfolders are looked in
    for path in rollouts:
        root = path.parent
        dated = all(part.isdigit() for part in root.parts[-_DATED:])
        if dated and len(root.parts) > _DATED:
            root = root.parents[_DATED - 1]
            folders[root] = True
            folders.setdefault(root.parent / "archived_sessions", False)
        else:
            folders.setdefault(root, False)
    found: list[Path] = []
    for folder, deep in sorted(folders.items()):
        for place, names in _listed(folder, deep):
            for name in sorted(names):
                if not (name.startswith("rollout-") and name.endswith(".jsonl")):
                    continue
                stem = name.removesuffix(".jsonl")
                path = Path(place, name)
                if any(stem.endswith(f"-{t}") for t in wanted) and not path.is_symlink():
                    found.append(path)
    return found


def _listed(folder: Path, deep: bool) -> Iterator[tuple[str, list[str]]]:
    """Each folder's file names: ``folder``'s, and with ``deep`` its subfolders' (no links)."""
    if deep:
        for place, _, names in os.walk(folder):
            yield place, names
        return
    try:
        yield str(folder), os.listdir(folder)
    except OSError:
        return


def parent_of(meta: dict[str, Any]) -> str | None:
    """The parent thread a ``session_meta`` names (a spawned sub-agent's), if any."""
    parent = meta.get("parent_thread_id")
    source = meta.get("source")
    sub = source.get("subagent") if isinstance(source, dict) else None
    spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
    if not parent and isinstance(spawn, dict):
        parent = spawn.get("parent_thread_id")
    return parent if isinstance(parent, str) and parent else None


def parse_transcript(
    path: Path, spool: ContentSpool | None, conversation: str | None = None
) -> ParsedFile:
    """One rollout of a conversation: its own, or a sub-agent's.

    Without ``conversation`` it is the conversation's own, read as :func:`parse` reads it; with
    it (the conversation's thread id), a sub-agent's joined to an empty session of it as a
    ``sub`` agent (:func:`join_sub`).
    """
    if conversation is None:
        return parse(path, None, spool)
    session = SourceSession(FORMAT, conversation, None, {})
    issues = join_sub(session, path, spool)
    return ParsedFile(FORMAT, [session], issues, spool)


_SUB_START = 10**12
"""Where a sub-agent rollout's positions start: after any parent rollout's."""


def join_sub(session: SourceSession, path: Path, spool: ContentSpool | None) -> list[LineIssue]:
    """Read a sub-agent's rollout into ``session`` as a ``sub`` agent; its line issues.

    Its agent, entries and events are keyed by the file's name, so that the rollouts of one
    conversation read alone or together give the same keys.
    """
    key = path.stem
    records = JsonLines(path)
    reader = _Rollout(spool, base=key, start=_SUB_START)
    reader.read(records)
    read = reader.session
    meta = {"file": path.name} | reader.own
    session.agents.append(Agent(key, "sub", meta))
    session.agents += read.agents
    session.entries += read.entries
    session.events += read.events
    session.calls += read.calls
    session.cwd = session.cwd or read.cwd
    found = records.issues + reader.issues
    return [LineIssue(i.line, i.action, f"{path.name}: {i.reason}") for i in found]


class _Rollout:
    """One rollout read into a session: the conversation's own, or a sub-agent's.

    ``base`` is the agent of the rollout's own thread: the main agent, or a sub-agent's key
    (then also the prefix of its entries' keys and their transcript).
    """

    def __init__(
        self,
        spool: ContentSpool | None,
        base: str = MAIN,
        start: int = 0,
    ) -> None:
        self.spool = spool
        self.session = SourceSession(FORMAT, "", None, {})
        self.base, self.start = base, start
        self.prefix = "" if base == MAIN else f"{base}:"
        self.own: dict[str, Any] = {}
        """What the rollout's first ``session_meta`` says of its thread (a sub-agent's)."""
        self.agent = base
        self.last: dict[str, str] = {}
        self.calls: dict[str, b.ToolCalls] = {}
        self.issues: list[LineIssue] = []
        self.model: Any = None
        self.totals: dict[str, Any] = {}  # the last total usage of each agent
        self.items_seen = False
        """Whether a message item came yet: then ``event_msg`` messages only repeat them."""
        self.unpaired: list[tuple[str, str]] = []
        """The role and text of each message node made from an ``event_msg`` whose item has
        not come yet (the item that repeats it then is an event, not a second node)."""

    def read(self, records: Iterable[tuple[int, dict[str, Any]]]) -> None:
        position = self.start - 1
        for lineno, record in records:  # not enumerate(): its tuple would keep the last record
            position += 1
            self.record(record, lineno, position)
            del record

    def record(self, record: dict[str, Any], lineno: int, position: int) -> None:
        kind = record.get("type")
        payload = record.get("payload")
        item = payload if isinstance(payload, dict) else {}
        envelope = {k: v for k, v in record.items() if k != "payload"}
        source = {"line": lineno, "id": item.get("id"), "envelope": envelope}
        moment = stamp(record.get("timestamp"), source)
        if kind == "session_meta":
            self._meta(item, lineno, position)
        elif kind == "response_item" and item and not self._repeats(item):
            self.add(self._item(item, f"{self.prefix}{position}", source, moment, position))
            return
        elif kind == "compacted" and item:
            self._compacted(item, source, moment, position)
            return
        elif kind == "event_msg" and not self.items_seen and self._said(item):
            role = "user" if item.get("type") == "user_message" else "assistant"
            key = f"{self.prefix}{position}"
            out = b.Content(key)
            said = b.as_text(item.get("message"))
            self.unpaired.append((role, said))
            out.add(b.text(said), b.extras(item, "message"))
            entry = Entry(key, None, role, "message", out.blocks, out.source(source))
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
        made.transcript = "" if self.base == MAIN else self.base
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

    def _repeats(self, item: dict[str, Any]) -> bool:
        """Whether a message item repeats a message an earlier ``event_msg`` made a node of.

        Each record is read as it comes, never from the lines after it, so that a rollout read
        in two parts gives the nodes it gives read whole: of two copies, the first is the node.
        """
        if item.get("type") != "message":
            return False
        self.items_seen = True
        role = _ROLES.get(str(item.get("role")), "user")
        at = next((i for i, (r, _) in enumerate(self.unpaired) if r == role), None)
        if at is None:
            return False
        _, said = self.unpaired.pop(at)
        content = item.get("content")
        parts = content if isinstance(content, list) else [content]
        found = (p.get("text") if isinstance(p, dict) else p for p in parts)
        texts = [t for t in found if isinstance(t, str)]
        return said in ("".join(texts), "\n".join(texts))

    @staticmethod
    def _said(item: dict[str, Any]) -> bool:
        return item.get("type") in ("user_message", "agent_message") and "message" in item

    def add(self, entry: Entry) -> None:
        entry.agent = self.agent
        if self.base != MAIN:
            entry.transcript = entry.source["file_agent"] = self.base
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
        source = item.get("source")
        keys = ("id", "parent_thread_id", "forked_from_id", "agent_nickname", "agent_role")
        meta = {k: item[k] for k in keys if k in item} | {"line": lineno, "source": source}
        if not s.source_id:
            s.source_id = str(item.get("id") or item.get("session_id") or "")
            s.cwd = item.get("cwd") if isinstance(item.get("cwd"), str) else None
            self.own = meta
            return
        spawned = isinstance(source, dict) and "subagent" in source
        if item.get("forked_from_id"):
            agent_type = "fork"
        elif item.get("parent_thread_id") or spawned:
            agent_type = "sub"
        else:
            self.agent = self.base
            return
        key = f"{self.prefix}thread-{len(s.agents) + 1}"
        if self.base != MAIN:  # its events are of the sub-agent's file (a held session's lines)
            meta["file_agent"] = self.base
        fork = self.last.get(self.base) if agent_type == "fork" else None
        s.agents.append(Agent(key, agent_type, meta, fork))
        self.agent = key

    def _compacted(
        self, item: dict[str, Any], source: dict[str, Any], moment: Any, position: int
    ) -> None:
        key = f"{self.prefix}{position}"
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
