"""Tree rules of an import, over the neutral model (no database): compactions, order, counts.

**Compactions.** ``context()`` is the active path cut at its last compaction node. A source
compaction that keeps recent entries (pi's first kept entry, for example) therefore has to be
followed on the path by what it keeps. :func:`arrange` *copies* the kept entries (from the first
kept one to the entry the compaction follows) under the compaction, chained in their order; the
entries that followed the compaction hang under the last copy, and the originals keep their
place. The compaction is never moved before the entries it keeps, though that would hold them
once: it comes after them in the source, and a source imported in parts as it grows (the kept
entries in one import, the compaction in the next) must give the tree a one-shot import gives,
with no node the store holds already placed anew. A kept entry the source compacted before is
kept as the copy that stands on the path (the compactions themselves are not copied). The
compaction's ``imported_from.kept`` says what it kept; each copy's ``kept_copy_by`` names the
compaction (its id, else its line).

**Order.** Nodes are numbered in source order, each parent before its children; a parent chain
that loops is cut (the node where the loop closes becomes a root, ``imported_from.cycle_cut``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from soong_store.importers._model import Entry, SourceSession


def arrange(session: SourceSession) -> list[Entry]:
    """The session's entries in node order, compactions placed before what they keep."""
    by_key = {e.key: e for e in session.entries}
    for entry in session.entries:
        if entry.parent is not None and entry.parent not in by_key:
            entry.parent = None
    for entry in list(session.entries):
        if entry.node_type == "compaction" and entry.keeps_from is not None:
            _place_compaction(session, entry, by_key)
    return _parents_first(session.entries, by_key)


def _place_compaction(session: SourceSession, comp: Entry, by_key: dict[str, Entry]) -> None:
    kept = by_key.get(comp.keeps_from or "")
    if comp.parent is None or kept is None or kept is comp:
        return
    copied = f"{kept.key}~"  # a copy of the kept entry made for an earlier compaction
    span: list[Entry] = []  # from the entry the compaction follows up to the first kept one
    node: Entry | None = by_key[comp.parent]
    seen: set[str] = set()
    while node is not None and node.key not in seen:
        seen.add(node.key)
        if node.node_type != "compaction":
            span.append(node)
        if node is kept or node.key.startswith(copied):
            break
        node = by_key.get(node.parent) if node.parent is not None else None
    if not span or (span[-1] is not kept and not span[-1].key.startswith(copied)):
        return  # the kept entry is not on the compaction's branch
    after = [entry for entry in session.entries if entry.parent == comp.key]
    last = _copy_kept(session, comp, span, by_key)
    for child in after:
        child.parent = last.key
    if session.leaf == comp.key:
        session.leaf = last.key
    first = kept.source.get("id")
    comp.source["kept"] = {"mode": "copied", "first_kept": first, "entries": len(span)}


def _copy_kept(
    session: SourceSession, comp: Entry, span: list[Entry], by_key: dict[str, Entry]
) -> Entry:
    """Copies of the kept entries chained under the compaction; the last copy."""
    parent = comp.key
    copies: list[Entry] = []
    by = comp.source.get("id") or comp.source.get("line")
    for original in reversed(span):
        source: dict[str, Any] = dict(original.source, kept_copy_by=by)
        copy = replace(original, key=f"{original.key}~{comp.key}", parent=parent, source=source)
        copy.artifacts = []  # the copy refers to the original's artifact files
        by_key[copy.key] = copy
        copies.append(copy)
        parent = copy.key
    at = session.entries.index(comp) + 1
    session.entries[at:at] = copies
    return copies[-1]


def _parents_first(entries: list[Entry], by_key: dict[str, Entry]) -> list[Entry]:
    placed: set[str] = set()
    order: list[Entry] = []
    for entry in entries:
        chain: list[Entry] = []
        on_chain: set[str] = set()
        node: Entry | None = entry
        while node is not None and node.key not in placed:
            if node.key in on_chain:  # the chain loops back: cut it at the last node walked
                chain[-1].source["cycle_cut"] = chain[-1].parent
                chain[-1].parent = None
                break
            chain.append(node)
            on_chain.add(node.key)
            node = by_key[node.parent] if node.parent is not None else None
        for item in reversed(chain):
            placed.add(item.key)
            order.append(item)
    return order


def counts(session: SourceSession, entries: list[Entry]) -> dict[str, int]:
    """What a session holds, as the import summary reports it.

    ``nodes`` counts every node; messages, tool calls and errors are the source's own (a
    compaction's copies of what it keeps are not counted again).
    """
    children: dict[str, int] = defaultdict(int)
    for entry in entries:
        if entry.parent is not None:
            children[entry.parent] += 1
    originals = [e for e in entries if "kept_copy_by" not in e.source]  # not a compaction's copy
    blocks = [block for entry in originals for block in entry.blocks]
    return {
        "nodes": len(entries),
        "messages": sum(e.node_type == "message" for e in originals),
        "roots": sum(e.parent is None for e in entries),
        "branch_points": sum(n > 1 for n in children.values()),
        "compactions": sum(e.node_type == "compaction" for e in entries),
        "sub_agents": sum(a.agent_type == "sub" for a in session.agents),
        "forks": sum(a.agent_type == "fork" for a in session.agents),
        "tool_calls": sum(b["type"] == "tool_call" for b in blocks),
        "tool_errors": sum(b["type"] == "tool_result" and bool(b.get("is_error")) for b in blocks),
        "artifacts": sum(len(e.artifacts) for e in entries),
    }


def depth_first(
    ids: list[str], parent: dict[str, str | None], kids: dict[str, list[str]]
) -> list[str]:
    """``ids`` in depth-first order from the roots, children in the order the source lists them.

    A source that lists children (ChatGPT, Open WebUI) reads most naturally that way; ids no
    walk reaches (a parent chain that loops) follow in their given order.
    """
    known = set(ids)
    by_parent: dict[str | None, list[str]] = defaultdict(list)
    for i in ids:
        by_parent[parent.get(i)].append(i)
    order: list[str] = []
    seen: set[str] = set()
    roots = [i for i in ids if parent.get(i) not in known]
    stack = list(reversed(roots))
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        order.append(current)
        listed = [k for k in kids.get(current, []) if k in known]
        listed += [i for i in by_parent[current] if i not in listed]
        stack.extend(reversed(listed))
    return order + [i for i in ids if i not in seen]
