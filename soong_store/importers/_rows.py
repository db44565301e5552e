"""The neutral model as a file in the store's own export format (the import path's input).

:func:`build` gives the lines of one export (see :mod:`soong_store.transfer`): a header, the
session, its agents, nodes (parents first), events (in source order) and artifacts with their
bytes. Ids are new (the source's are kept in metadata); every node carries
``metadata["imported_from"]``, which marks it as history recorded elsewhere for the branch rule;
every node has a ``node_created`` event and every failed tool result a ``tool_failed`` event
(a compaction's copy of it excepted).
Timestamps are the source's where it has valid ones; an item without one takes the nearest
earlier item's time (else the nearest later one, else ``fallback``), its raw value kept.

Where the source records usage (the session's ``calls``), each *turn* (a user message and what
follows it in its agent, up to the agent's next user message) whose calls recorded usage is a
completed run of its agent: its nodes link to it, its ``usage`` is the list of its calls' usage
dicts, its times the source's. A run's ``imported_from`` names the node of the message that
opened its turn: a turn that grows in the source grows its run.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain
from typing import Any

from soong_store.errors import InvalidContent
from soong_store.importers._model import (
    MAIN,
    Artifact,
    Call,
    Entry,
    Event,
    SourceSession,
)
from soong_store.importers._read import format_time
from soong_store.importers._spool import ContentSpool
from soong_store.importers._tree import arrange, counts
from soong_store.model import codec
from soong_store.model.content import encode_content, validate_content
from soong_store.model.ids import new_id, new_session_id
from soong_store.model.usage import check_usage
from soong_store.rules.artifacts import extension
from soong_store.transfer.format import FORMAT, FORMAT_VERSION, Encoded


@dataclass(frozen=True, slots=True)
class Built:
    """An export file made from one source session, and what it holds."""

    session_id: str
    items: Iterator[dict[str, Any]]
    """The file's lines as the objects they encode, made as they are read (once): a node's row
    is built when its line is reached. An import takes them as they are (no text between)."""
    counts: dict[str, int]

    @property
    def lines(self) -> Iterator[str]:
        """The file's lines as text (made from :attr:`items`: read one or the other)."""
        return (codec.dumps_text(item, what=_what(item)) for item in self.items)


def _what(item: dict[str, Any]) -> str:
    return f"{item['kind']} row" if "kind" in item else "header"


@dataclass(slots=True)
class Known:
    """What of a conversation the store holds already: its session and ids by source identity.

    ``nodes`` maps :func:`identity` to node ids, ``agents`` an agent's :func:`agent_identity`
    to its id; ``lines`` is the last source line the store holds of each transcript.
    """

    session_id: str
    root_agent_id: str
    nodes: dict[str, str] = field(default_factory=dict)
    agents: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)
    """Run ids by the node id of the message that opened their turn."""


@dataclass(slots=True)
class Rows:
    """The rows of one source session (made lazily where they are big), in export order."""

    session_id: str
    session: dict[str, Any]
    agents: list[dict[str, Any]]
    nodes: Iterator[dict[str, Any]]
    events: Iterator[dict[str, Any]]
    artifacts: Iterator[dict[str, Any]]
    counts: dict[str, int]
    header: dict[str, Any]
    entries: list[Entry]
    """The entries in node order, as the node rows are made (for an increment's diff)."""
    node_ids: dict[str, str]
    """Node id by entry key."""
    new_nodes: set[str]
    """The ids of the node rows the store does not hold (all, without ``known``)."""
    runs: list[dict[str, Any]] = field(default_factory=list)
    """Every run of the session (held ones too), its start and end as this reading orders them."""
    run_of: dict[str, str] = field(default_factory=dict)
    """Run id by node id, for the nodes in a run."""


def identity(source: dict[str, Any]) -> str:
    """A node's source identity: which record of which transcript it was made of.

    Made of what the node's ``imported_from`` keeps (the transcript's file, the record's id,
    line and index, a copy's compaction), so the store's nodes and a new reading of the
    source compare without any id of the store's.
    """
    return codec.dumps_text([source.get(k) for k in _IDENTITY])


_IDENTITY = ("file_agent", "id", "line", "index", "replacement_index", "kept_copy_by", "copy_of")


def agent_identity(metadata: dict[str, Any]) -> str:
    """An imported agent's identity: its file, its sidechain's first line, else its metadata."""
    if isinstance(metadata.get("file"), str):
        return f"file:{metadata['file']}"
    if metadata.get("sidechain") is True and isinstance(metadata.get("line"), int):
        return f"sidechain:{metadata['line']}"
    return codec.dumps_text(metadata)


def build(
    session: SourceSession,
    cwd: str,
    fallback: datetime,
    file_meta: dict[str, Any],
    spool: ContentSpool | None = None,
) -> Built:
    """The export lines of one source session (``file_meta`` goes into the session metadata).

    With ``spool`` (where the parser parked the entries' content), each node's, event's and
    artifact's content is read back when its line is made, one at a time.
    """
    rows = build_rows(session, cwd, fallback, file_meta, spool)
    items = chain(  # every JSON column below is made by the store's encoders: Encoded
        (rows.header, Encoded(kind="session", row=rows.session)),
        (Encoded(kind="agent", row=row) for row in rows.agents),
        (Encoded(kind="run", row=row) for row in rows.runs),
        (Encoded(kind="node", row=row) for row in rows.nodes),
        (Encoded(kind="event", row=row) for row in rows.events),
        (Encoded(kind="artifact", **item) for item in rows.artifacts),
    )
    return Built(rows.session_id, items, rows.counts)


def build_rows(
    session: SourceSession,
    cwd: str,
    fallback: datetime,
    file_meta: dict[str, Any],
    spool: ContentSpool | None = None,
    known: Known | None = None,
) -> Rows:
    """The rows of one source session.

    With ``known``, the nodes and agents the store holds keep their ids, and the events,
    artifacts and ``new_nodes`` are only those the store does not hold.
    """
    sid = known.session_id if known is not None else new_session_id()
    nodes = arrange(session)
    times = _times(session, fallback)
    root = known.root_agent_id if known is not None else new_id("agent")
    agent_ids = {MAIN: root}
    for agent in session.agents:
        held = known.agents.get(agent_identity(agent.metadata)) if known is not None else None
        agent_ids[agent.key] = held or new_id("agent")
    node_ids: dict[str, str] = {}
    new_nodes: set[str] = set()
    seen: dict[str, int] = {}
    for e in nodes:
        held = None
        if known is not None:
            ident = identity(e.source)
            seen[ident] = seen.get(ident, 0) + 1
            held = known.nodes.get(f"{ident}#{seen[ident]}")
        node_ids[e.key] = held or new_id("node")
        if held is None:
            new_nodes.add(node_ids[e.key])
    fresh = [e for e in nodes if node_ids[e.key] in new_nodes]
    run_rows, run_of = _runs(session, nodes, sid, node_ids, agent_ids, times, known)
    art_ids = {art.key: new_id("art") for entry in fresh for art in entry.artifacts}
    node_rows = (  # made as the import reads them: one node's row and line at a time
        _node_row(sid, seq, e, session.format, node_ids, agent_ids, art_ids, times[id(e)], spool)
        | {"run_id": run_of.get(node_ids[e.key])}
        for seq, e in enumerate(nodes, 1)
    )
    artifacts = (
        _artifact(sid, entry, art, agent_ids, node_ids, art_ids, times[id(entry)])
        for entry in fresh
        if entry.artifacts
        for art in _load(spool, entry)[2]
    )
    pending = _pending_events(session, fresh, known)
    event_rows = (
        _event_row(seq, item, session, node_ids, agent_ids, times, spool)
        for seq, item in enumerate(pending, 1)
    )
    stamps = sorted(times.values())
    first, last = (stamps[0], stamps[-1]) if stamps else (format_time(fallback),) * 2
    meta = {
        "imported_from": {
            "format": session.format,
            "source_session_id": session.source_id,
            **file_meta,
        },
        **session.metadata,
    }
    leaf = session.leaf if session.leaf in node_ids else _last_main(nodes)
    session_row = {
        "session_id": sid,
        "cwd": cwd,
        "root_agent_id": root,
        "active_node_id": node_ids[leaf] if leaf is not None else None,
        "parent_session_id": None,
        "status": "active",
        "metadata_json": codec.dumps_text(meta),
        "created_at": first,
        "updated_at": last,
    }
    agent_rows = [_agent_row(sid, root, None, "main", None, {}, first)]
    for agent in session.agents:
        since = next((times[id(e)] for e in nodes if e.agent == agent.key), first)
        # Only a fork has a fork point, and a fork must have one: a fork whose point is not
        # among the imported nodes is kept as a sub agent, its source saying what it was.
        fork = node_ids.get(agent.fork_from or "") if agent.agent_type == "fork" else None
        kind = "sub" if agent.agent_type == "fork" and fork is None else agent.agent_type
        meta_a = {"imported_from": agent.metadata}
        row = _agent_row(sid, agent_ids[agent.key], root, kind, fork, meta_a, since)
        agent_rows.append(row)
    header = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "session_id": sid,
        "exported_at": format_time(fallback),
        "with_artifacts": True,
        "counts": {
            "agents": len(agent_rows),
            "runs": len(run_rows),
            "nodes": len(nodes),
            "events": len(pending),
            "artifacts": len(art_ids),
        },
    }
    summary = counts(session, nodes) | {"events": len(pending)}
    return Rows(
        sid,
        session_row,
        agent_rows,
        node_rows,
        event_rows,
        artifacts,
        summary,
        header,
        nodes,
        node_ids,
        new_nodes,
        run_rows,
        run_of,
    )


def _runs(
    session: SourceSession,
    nodes: list[Entry],
    sid: str,
    node_ids: dict[str, str],
    agent_ids: dict[str, str],
    times: dict[int, str],
    known: Known | None,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The runs of the session's turns that recorded usage, and the run of each of their nodes.

    A turn is found in source order within its agent, so what a node belongs to depends only
    on the source before it: a transcript read in two parts gives the same runs as read whole.
    """
    if not session.calls:
        return [], {}
    turns: dict[str, list[Entry]] = {}  # by the key of the entry that opened the turn
    turn_of: dict[str, str] = {}
    opened: dict[str, str] = {}  # the open turn of each agent
    for e in sorted(nodes, key=lambda e: e.position):
        if "kept_copy_by" in e.source:
            continue  # a compaction's copy of history: no call of this turn made it
        if e.role == "user" and e.node_type == "message":
            opened[e.agent] = e.key
            turns[e.key] = []
        if e.agent in opened:
            turns[opened[e.agent]].append(e)
            turn_of[e.key] = opened[e.agent]
    calls: dict[str, dict[str, Call]] = {}  # by turn, by call key (the last reading wins)
    agent_of = {e.key: e.agent for e in nodes}
    starts = {
        agent: sorted((turns[k][0].position, k) for k in turns if turns[k][0].agent == agent)
        for agent in {turns[k][0].agent for k in turns}
    }
    for call in session.calls:
        if call.entry is not None:
            turn = turn_of.get(call.entry)
        else:
            turn = _turn_at(starts.get(call.agent, []), call.position)
        if turn is not None and call.usage:
            calls.setdefault(turn, {})[call.key] = call
    order = {e.key: seq for seq, e in enumerate(nodes)}
    rows: list[dict[str, Any]] = []
    run_of: dict[str, str] = {}
    for turn, found in calls.items():
        members = sorted(turns[turn], key=lambda e: order[e.key])
        opener = node_ids[turn]
        run_id = known.runs.get(opener) if known is not None else None
        run_id = run_id or new_id("run")
        stamps = sorted(times[id(e)] for e in members)
        usage = check_usage(
            [c.usage for c in sorted(found.values(), key=lambda c: c.position)], "imported usage"
        )
        rows.append(
            {
                "run_id": run_id,
                "session_id": sid,
                "agent_id": agent_ids[agent_of[turn]],
                "status": "completed",
                "start_node_id": node_ids[members[0].key],
                "end_node_id": node_ids[members[-1].key],
                "end_reason": "completed",
                "turn_count": None,
                "usage_json": codec.dumps_text(usage, what="run usage"),
                "error_json": None,
                "metadata_json": codec.dumps_text(
                    {"imported_from": {"format": session.format, "turn": opener}}
                ),
                "created_at": stamps[0],
                "updated_at": stamps[-1],
            }
        )
        run_of.update((node_ids[e.key], run_id) for e in members)
    return rows, run_of


def _turn_at(starts: list[tuple[int, str]], position: int) -> str | None:
    """The turn open at ``position`` (the last one opened before it), if any."""
    found = None
    for at, key in starts:
        if at > position:
            break
        found = key
    return found


def _last_main(nodes: list[Entry]) -> str | None:
    main = [e for e in nodes if e.agent == MAIN]
    return max(main, key=lambda e: e.position).key if main else None


def _times(session: SourceSession, fallback: datetime) -> dict[int, str]:
    """Every entry's and event's row time (by ``id()``), missing ones filled from neighbours.

    Neighbours are of the same transcript: a sub-agent's file gets the same times whether its
    parent's file is read with it or not.
    """
    by_transcript: dict[str, list[Entry | Event]] = {}
    items: list[Entry | Event] = [*session.entries, *session.events]
    for item in sorted(items, key=lambda item: item.position):
        by_transcript.setdefault(item.transcript, []).append(item)
    times: dict[int, str] = {}
    for items in by_transcript.values():
        known = [item.time for item in items]
        filled: list[datetime | None] = list(known)
        last: datetime | None = None
        for i, moment in enumerate(known):
            last = moment or last
            filled[i] = last
        nxt: datetime | None = None
        for i in range(len(known) - 1, -1, -1):
            nxt = known[i] or nxt
            filled[i] = filled[i] or nxt or fallback
        for item, moment in zip(items, filled, strict=True):
            times[id(item)] = format_time(moment or fallback)
    return times


def _node_row(
    sid: str,
    seq: int,
    entry: Entry,
    fmt: str,
    node_ids: dict[str, str],
    agent_ids: dict[str, str],
    art_ids: dict[str, str],
    created: str,
    spool: ContentSpool | None,
) -> dict[str, Any]:
    stored, kept, _ = _load(spool, entry)
    source = {"format": fmt, **kept}
    del kept
    blocks = [_rename_refs(block, art_ids) for block in stored]
    del stored
    try:
        content = encode_content(validate_content(blocks))[0]
    except InvalidContent as exc:  # a block the parser could not shape: keep it as data
        source["content_error"] = str(exc)
        content = encode_content(validate_content([{"type": "json", "data": blocks}]))[0]
    del blocks  # the row holds the content once, as its JSON text
    return {
        "node_id": node_ids[entry.key],
        "node_seq": seq,
        "parent_id": node_ids[entry.parent] if entry.parent is not None else None,
        "agent_id": agent_ids[entry.agent],
        "run_id": None,
        "role": entry.role,
        "node_type": entry.node_type,
        "content_json": content,
        "metadata_json": codec.dumps_text({"imported_from": source}, what="node metadata"),
        "token_count": entry.token_count,
        "created_at": created,
    }


def _rename_refs(block: dict[str, Any], art_ids: dict[str, str]) -> dict[str, Any]:
    if block.get("type") == "artifact_ref" and block.get("artifact_id") in art_ids:
        return dict(block, artifact_id=art_ids[block["artifact_id"]])
    if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
        return dict(block, content=[_rename_refs(item, art_ids) for item in block["content"]])
    return block


def _load(
    spool: ContentSpool | None, entry: Entry
) -> tuple[list[dict[str, Any]], dict[str, Any], list[Artifact]]:
    """An entry's whole content: read back from ``spool`` if it waits there."""
    if spool is None:
        return entry.blocks, entry.source, entry.artifacts
    return spool.load(entry)


def _artifact(
    sid: str,
    entry: Entry,
    art: Artifact,
    agent_ids: dict[str, str],
    node_ids: dict[str, str],
    art_ids: dict[str, str],
    created: str,
) -> dict[str, Any]:
    """An artifact line's item: its row and its bytes."""
    aid = art_ids[art.key]
    row = {
        "artifact_id": aid,
        "session_id": sid,
        "agent_id": agent_ids[entry.agent],
        "run_id": None,
        "node_id": node_ids[entry.key],
        "tool_call_id": None,
        "path": f"{sid}/{aid}{extension(art.filename, art.mime_type)}",
        "filename": art.filename,
        "mime_type": art.mime_type,
        "size_bytes": len(art.data),
        "summary": art.summary,
        "metadata_json": codec.dumps_text({"imported_from": {"key": art.key}}),
        "created_at": created,
    }
    return {"row": row, "data_b64": base64.b64encode(art.data).decode()}


_Pending = tuple[float, int, Entry | Event, dict[str, Any] | None]
"""An event to make: its source position, its order among equals, what it is made of, and
for a failed tool result, the result block."""


def _pending_events(
    session: SourceSession, nodes: list[Entry], known: Known | None = None
) -> list[_Pending]:
    """The events of the session in row order, as what each is made of (no row yet).

    ``nodes`` are the entries whose nodes are written; with ``known``, a source event is
    left out when the store holds its transcript past its line (or it has no line).
    """
    pending: list[_Pending] = []
    for entry in nodes:
        pending.append((entry.position, len(pending), entry, None))
        if "kept_copy_by" in entry.source:
            continue  # the tool failed once: its original has the event
        for block in entry.blocks:
            if block.get("type") == "tool_result" and block.get("is_error"):
                pending.append((entry.position, len(pending), entry, block))
    for event in session.events:
        if known is not None and event.transcript in known.lines:
            line = event.line
            if line is None or line <= known.lines[event.transcript]:
                continue
        pending.append((event.position, len(pending), event, None))
    pending.sort(key=lambda item: (item[0], item[1]))
    return pending


def _event_row(
    seq: int,
    item: _Pending,
    session: SourceSession,
    node_ids: dict[str, str],
    agent_ids: dict[str, str],
    times: dict[int, str],
    spool: ContentSpool | None,
) -> dict[str, Any]:
    _, _, made_of, block = item
    if isinstance(made_of, Entry):
        base: dict[str, str | None] = {
            "agent_id": agent_ids[made_of.agent],
            "node_id": node_ids[made_of.key],
        }
        at = times[id(made_of)]
        if block is None:
            row = _event(base, "node_created", at)
        else:
            call = block.get("tool_call_id")
            payload = {"tool_call_id": call, "source_id": made_of.source.get("id")}
            row = _event(base, "tool_failed", at, "error", call, payload)
    else:
        event = made_of
        base = {
            "agent_id": agent_ids.get(event.agent) if event.agent is not None else None,
            "node_id": node_ids.get(event.entry or ""),
        }
        row = _event(
            base,
            event.event_type[:128],
            times[id(event)],
            event.level,
            event.tool_call_id,
            event.payload if spool is None else spool.payload(event),
        )
    return {"event_id": new_id("evt"), "seq": seq, "run_seq": None, **row}


def _event(
    base: dict[str, str | None],
    event_type: str,
    created: str,
    level: str = "info",
    tool_call_id: str | None = None,
    payload: Any = None,
) -> dict[str, Any]:
    return {
        "agent_id": base["agent_id"],
        "run_id": None,
        "level": level,
        "event_type": event_type,
        "node_id": base["node_id"],
        "tool_call_id": tool_call_id,
        "payload_json": codec.dumps_optional(payload, what="event payload"),
        "created_at": created,
    }


def _agent_row(
    sid: str,
    agent_id: str,
    parent: str | None,
    agent_type: str,
    fork_from: str | None,
    metadata: dict[str, Any],
    created: str,
) -> dict[str, Any]:
    return {
        "agent_id": agent_id,
        "session_id": sid,
        "parent_agent_id": parent,
        "agent_type": agent_type,
        "created_by_run_id": None,
        "fork_from_node_id": fork_from,
        "status": "idle" if agent_type == "main" else "completed",
        "result_json": None,
        "metadata_json": codec.dumps_text(metadata) if metadata else None,
        "created_at": created,
        "updated_at": created,
    }
