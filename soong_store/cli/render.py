"""What the CLI shows: the text and ``--json`` documents of its read commands.

Each read command has a ``*_document`` (the JSON it prints) and ``*_lines`` (its text). Those of
``sessions``, ``show`` and ``timeline`` are here and show no content, so a listing imports no
content block; those of ``tree`` and ``path`` are in :mod:`soong_store.cli.render_nodes`.
Nothing here reads or writes a store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from soong_store.model import codec
from soong_store.model.global_records import agent_labels

if TYPE_CHECKING:
    from soong_store.model.global_records import (
        AgentRecord,
        ArtifactRecord,
        RunRecord,
        SessionRecord,
    )
    from soong_store.model.records import EventRecord


def clip(text: str, width: int) -> str:
    """``text`` on one line (whitespace runs folded), cut to ``width`` characters with ``…``."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _when(record: Any) -> str:
    return str(record.created_at.strftime("%Y-%m-%d %H:%M:%S"))


def _unknown(value: object) -> str:
    """``value`` as text, ``-`` where it is not known (``None``)."""
    return "-" if value is None else str(value)


def sessions_document(
    page: Sequence[SessionRecord], offset: int, limit: int, next_offset: int | None
) -> dict[str, Any]:
    """The ``sessions --json`` document: one page of sessions and where the next one starts."""
    return {
        "sessions": [s.model_dump(mode="json") for s in page],
        "offset": offset,
        "limit": limit,
        "next_offset": next_offset,
    }


def sessions_lines(page: Sequence[SessionRecord], next_offset: int | None) -> list[str]:
    """One line per session of a ``sessions`` page, and where the next page starts."""
    lines = []
    for s in page:
        title = s.metadata.get("title") if isinstance(s.metadata, dict) else None
        lines.append(
            f"{s.session_id}  {s.status:<8}  {s.updated_at:%Y-%m-%d %H:%M}  {title or s.cwd}"
        )
    if not page:
        lines.append("(no sessions)")
    if next_offset is not None:
        lines.append(f"… more: --offset {next_offset}")
    return lines


def usage_total(runs: Sequence[RunRecord]) -> dict[str, float]:
    """The sum of each numeric usage field over the runs (``input_tokens``, ``cost`` ...)."""
    total: dict[str, float] = {}
    for usage in (r.usage for r in runs):
        for key, value in (usage or {}).items() if isinstance(usage, dict) else ():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    return total


def show_document(
    session: SessionRecord,
    agents: Sequence[AgentRecord],
    runs: Sequence[RunRecord],
    artifacts: Sequence[ArtifactRecord],
    counts: dict[str, int],
) -> dict[str, Any]:
    """The ``show --json`` document: the records as stored, the row counts and the usage."""
    return {
        "session": session.model_dump(mode="json"),
        "agents": [a.model_dump(mode="json") for a in agents],
        "runs": [r.model_dump(mode="json") for r in runs],
        "artifacts": [a.model_dump(mode="json") for a in artifacts],
        "counts": counts,
        "usage": usage_total(runs),
    }


def show_lines(
    session: SessionRecord,
    agents: Sequence[AgentRecord],
    runs: Sequence[RunRecord],
    artifacts: Sequence[ArtifactRecord],
    counts: dict[str, int],
    node_seqs: Mapping[str, int],
) -> list[str]:
    """The ``show`` text: the session, then its agents, runs, artifacts and usage.

    ``node_seqs`` holds the ``node_seq`` of the nodes it names (the active node, where forks
    start): a node is named ``#SEQ`` as ``tree`` names it.
    """
    usage = usage_total(runs)
    labels = agent_labels(agents, session.root_agent_id)
    active = session.active_node_id
    lines = [f"session  {session.session_id} ({session.status})", f"cwd      {session.cwd}"]
    lines.append(f"created  {_when(session)}, updated {session.updated_at:%Y-%m-%d %H:%M:%S}")
    if active:
        shown = f"{_seq_of(active, node_seqs)} {active}"
    elif counts.get("nodes"):
        shown = "(none: the next message starts a new root)"
    else:
        shown = "(no node yet)"
    lines.append(f"active   {shown}")
    if session.parent_session_id:
        lines.append(f"forked   from {session.parent_session_id}")
    if session.metadata is not None:
        lines.append(f"metadata {codec.dumps_text(session.metadata)}")
    lines.append("counts   " + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
    lines.append(f"\nagents ({len(agents)})")
    for a in agents:
        purpose = a.metadata.get("purpose") if isinstance(a.metadata, dict) else None
        extra = f" purpose={purpose}" if purpose else ""
        if a.fork_from_node_id:
            extra += f" fork_from={_seq_of(a.fork_from_node_id, node_seqs)}"
        line = f"  {labels[a.agent_id]:<6} {a.agent_id}  {a.agent_type:<12} {a.status:<9}{extra}"
        lines.append(line.rstrip())
    lines.append(f"\nruns ({len(runs)})")
    for r in runs:
        spent = " ".join(f"{k}={v}" for k, v in (r.usage or {}).items()) if r.usage else ""
        lines.append(
            f"  {r.run_id}  {labels.get(r.agent_id, r.agent_id):<6} status={r.status:<9} "
            f"end_reason={r.end_reason or '-':<10} turns={_unknown(r.turn_count)} {spent}".rstrip()
        )
    if artifacts:
        lines.append(f"\nartifacts ({len(artifacts)})")
        for art in artifacts:
            about = art.filename or art.summary or ""
            lines.append(
                f"  {art.artifact_id}  {art.size_bytes or 0:>9} B  {art.mime_type or '-'}  {about}"
            )
    total = ", ".join(f"{k}={v:g}" for k, v in usage.items()) or "(none recorded)"
    lines.append("\nusage    " + total)
    return lines


TIMELINE_HEADER = f"{'seq':>5} {'run_seq':<7} {'time':<12} {'level':<7} event"


def _seq_of(node_id: str, node_seqs: Mapping[str, int]) -> str:
    """A node named ``#SEQ`` as ``tree`` names it (by its id if ``node_seqs`` lacks it)."""
    seq = node_seqs.get(node_id)
    return node_id if seq is None else f"#{seq}"


def _seqs_in(value: Any, node_seqs: Mapping[str, int]) -> Any:
    """``value`` (a payload) with each node id in it named ``#SEQ``."""
    if isinstance(value, str):
        return _seq_of(value, node_seqs)
    if isinstance(value, dict):
        return {key: _seqs_in(item, node_seqs) for key, item in value.items()}
    if isinstance(value, list):
        return [_seqs_in(item, node_seqs) for item in value]
    return value


def nodes_named(e: EventRecord) -> set[str]:
    """The nodes an event names: its ``node_id``, and node ids in its payload's values."""
    named = {e.node_id} if e.node_id else set()
    if isinstance(e.payload, dict):
        named.update(v for v in e.payload.values() if isinstance(v, str) and v.startswith("node_"))
    return named


def event_line(e: EventRecord, width: int, node_seqs: Mapping[str, int]) -> str:
    """One ``timeline`` line: seq, run seq, time, level, type, ids, and the payload clipped.

    Nodes, also in the payload (``node_switched``'s ``from`` and ``to``), are named ``#SEQ``.
    """
    node = _seq_of(e.node_id, node_seqs) if e.node_id else None
    ids = " ".join(
        f"{k}={v}" for k, v in (("node", node), ("run", e.run_id), ("tool", e.tool_call_id)) if v
    )
    run_seq = "" if e.run_seq is None else str(e.run_seq)
    when = e.created_at.strftime("%H:%M:%S.%f")[:-3]
    head = f"{e.seq:>5} {run_seq:<7} {when} {e.level:<7} {e.event_type} {ids}".rstrip()
    if e.payload is None:
        return head
    payload = codec.dumps_text(_seqs_in(e.payload, node_seqs))
    return f"{head} {clip(payload, max(width - len(head) - 1, 16))}"


class ListDocument:
    """A JSON document whose last key holds a long list, written an item at a time.

    What it writes equals ``codec.dumps_text({**head, key: items})``, the text of a document
    printed whole, without ever holding the list.
    """

    def __init__(self, write: Callable[[str], object], head: Mapping[str, Any], key: str) -> None:
        self._write, self._first = write, True
        opening = codec.dumps_text(dict(head), what="output")[:-1]
        self._write(f"{opening}{',' if head else ''}{codec.dumps_text(key)}:[")

    def add(self, item: Any) -> None:
        """Write the next item of the list."""
        self._write(("" if self._first else ",") + codec.dumps_text(item, what="output"))
        self._first = False

    def close(self) -> None:
        """End the list and the document (and the line)."""
        self._write("]}\n")
