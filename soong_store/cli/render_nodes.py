"""What the CLI shows of a session's nodes: the ``tree`` and ``path`` text and documents.

Apart from :mod:`soong_store.cli.render` because these show content: importing them imports the
content blocks, which the commands that show no node (``sessions``, ``show``, ``timeline``) leave
unloaded. The tree is built once as data (:func:`tree_document`) and drawn from that data
(:func:`tree_lines`), so both outputs show the same tree. Nothing here reads or writes a store.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from soong_store.cli.render import agent_labels, clip
from soong_store.errors import NotFound
from soong_store.model import codec
from soong_store.model.content import (
    ContentBlock,
    JsonBlock,
    Leaf,
    Place,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    fold,
)
from soong_store.model.enums import NodeType
from soong_store.model.records import AgentRecord, ContextView, NodeRecord, SessionRecord


def _fancy() -> bool:
    return (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "") == "utf8"


def _leaf_text(_: Place, leaf: Leaf) -> str:
    if isinstance(leaf, TextBlock):
        return leaf.text
    if isinstance(leaf, ToolCallBlock):
        return f"→ [{leaf.tool_call_id}] {leaf.name}({codec.dumps_text(leaf.arguments)})"
    if isinstance(leaf, JsonBlock):
        if leaf.artifact_ref is not None:
            return f"[json in {leaf.artifact_ref}: {leaf.summary}]"
        return codec.dumps_text(leaf.data)
    return f"[attachment {leaf.artifact_id}{': ' + leaf.summary if leaf.summary else ''}]"


def _result_text(block: ToolResultBlock, items: list[str]) -> str:
    return f"← {'ERROR ' if block.is_error else ''}[{block.tool_call_id}] {' '.join(items)}"


def block_text(block: ContentBlock) -> str:
    """One content block as one line of text (the tree and timeline show these).

    A tool call and its result both show the call's id, ``→ [call_1] read(...)`` and
    ``← [call_1] ...``, so a result is matched to its call.
    """
    return fold([block], _leaf_text, _result_text)[0]


def node_text(node: NodeRecord) -> str:
    """The content of a node as one line."""
    return " | ".join(fold(node.content, _leaf_text, _result_text))


def tree_document(
    session: SessionRecord,
    nodes: Sequence[NodeRecord],
    agents: Sequence[AgentRecord],
    agent: str | None = None,
) -> dict[str, Any]:
    """The tree as JSON-ready data: agents, and nodes with their children and path flag."""
    labels = agent_labels(agents, session.root_agent_id)
    seqs = {n.node_id: n.node_seq for n in nodes}
    if agent is not None:
        wanted = {a for a, label in labels.items() if agent in (a, label)}
        if not wanted:
            raise NotFound(f"no agent {agent!r} in session {session.session_id!r}")
        nodes = [n for n in nodes if n.agent_id in wanted]
    parent = {n.node_id: n.parent_id for n in nodes}
    children: dict[str, list[str]] = {n.node_id: [] for n in nodes}
    for n in nodes:
        if n.parent_id in children:
            children[n.parent_id].append(n.node_id)
    on_path: set[str] = set()
    current = session.active_node_id
    while current is not None and current in parent and current not in on_path:
        on_path.add(current)
        current = parent[current]
    return {
        "session_id": session.session_id,
        "active_node_id": session.active_node_id,
        "root_agent_id": session.root_agent_id,
        "agents": [
            {
                "label": labels[a.agent_id],
                "agent_id": a.agent_id,
                "agent_type": str(a.agent_type),
                "status": str(a.status),
                "purpose": a.metadata.get("purpose") if isinstance(a.metadata, dict) else None,
                "fork_from_node_id": a.fork_from_node_id,
            }
            for a in agents
        ],
        "nodes": [
            {
                "node_id": n.node_id,
                "node_seq": n.node_seq,
                "parent_id": n.parent_id,
                "parent_seq": seqs.get(n.parent_id) if n.parent_id is not None else None,
                "agent": labels.get(n.agent_id, n.agent_id),
                "agent_id": n.agent_id,
                "run_id": n.run_id,
                "role": str(n.role),
                "node_type": str(n.node_type),
                "token_count": n.token_count,
                "text": clip(node_text(n), 200),
                "children": children[n.node_id],
                "on_active_path": n.node_id in on_path,
            }
            for n in nodes
        ],
    }


def tree_lines(doc: dict[str, Any], *, width: int, depth: int | None = None) -> list[str]:
    """Lines of the tree: one per node, a chain at one indent, each branch indented once more.

    Walked with an explicit stack (no recursion), so a deep tree of thousands of nodes prints.
    Branches nested deeper than ``depth`` are folded to one line with their node count, except
    the one that leads to the active node.
    """
    fancy = _fancy()
    tee, elbow, pipe = ("├─ ", "└─ ", "│  ") if fancy else ("|- ", "`- ", "|  ")
    by_id = {n["node_id"]: n for n in doc["nodes"]}
    roots = [n for n in doc["nodes"] if n["parent_id"] not in by_id]
    sizes = _subtree_sizes(doc["nodes"], by_id)
    lines = [
        f"session {doc['session_id']}: {len(by_id)} nodes "
        f"(* active path, > active node, {'⑂' if fancy else '+'} branch point)"
    ]
    for a in doc["agents"]:
        extra = f", {a['purpose']}" if a["purpose"] else ""
        lines.append(f"  agent {a['label']}: {a['agent_id']} ({a['agent_type']}{extra})")
    if doc["active_node_id"] is None and by_id:
        lines.append("  no active node: the next message starts a new root")
    stack: list[tuple[dict[str, Any], str, str, int, bool]] = []
    for index in range(len(roots) - 1, -1, -1):
        root, last = roots[index], index == len(roots) - 1
        under = "" if root["parent_id"] is None else f"(under #{root['parent_seq']}) "
        lead, cont = ((elbow if last else tee) + under, "   " if last else pipe)
        stack.append(
            (root, lead if len(roots) > 1 else under, cont if len(roots) > 1 else "", 0, False)
        )
    while stack:
        node, lead, cont, level, folded = stack.pop()
        if folded:
            size = sizes[node["node_id"]]
            plural = "nodes" if size > 1 else "node"
            lines.append(f"  {lead}… {size} {plural} folded from #{node['node_seq']}")
            continue
        kids = [by_id[c] for c in node["children"]]
        mark = ">" if node["node_id"] == doc["active_node_id"] else "*"
        mark = mark if node["on_active_path"] else " "
        who = "" if node["agent_id"] == doc["root_agent_id"] else f"[{node['agent']}] "
        fork = f" {'⑂' if fancy else '+'}{len(kids)}" if len(kids) > 1 else ""
        head = f"{mark} {lead}#{node['node_seq']} {node['role']}/{node['node_type']}{fork} {who}"
        lines.append(head + clip(node["text"], max(width - len(head), 16)))
        if len(kids) == 1:
            stack.append((kids[0], cont, cont, level, False))
            continue
        fold = depth is not None and level >= depth
        for index in range(len(kids) - 1, -1, -1):
            last = index == len(kids) - 1
            branch, below = cont + (elbow if last else tee), cont + ("   " if last else pipe)
            # The branch that holds the active node stays open, however deep.
            folded_here = fold and not kids[index]["on_active_path"]
            stack.append((kids[index], branch, below, level + 1, folded_here))
    return lines


def _subtree_sizes(nodes: list[dict[str, Any]], by_id: dict[str, Any]) -> dict[str, int]:
    sizes = {n["node_id"]: 1 for n in nodes}
    for n in sorted(nodes, key=lambda n: -int(n["node_seq"])):
        if n["parent_id"] in by_id:
            sizes[n["parent_id"]] += sizes[n["node_id"]]
    return sizes


def _path_cuts(path: Sequence[NodeRecord], context: ContextView) -> tuple[int, int]:
    """How many nodes of ``path`` its last compaction cuts, and how many more a limit hides."""
    kept = len(path)
    for index in range(len(path) - 1, -1, -1):
        if path[index].node_type == NodeType.COMPACTION:
            kept = len(path) - index
            break
    return len(path) - kept, kept - len(context.nodes)


def path_document(
    sid: str, path: Sequence[NodeRecord], context: ContextView, limit: int | None = None
) -> dict[str, Any]:
    """The ``path --json`` document: where the path ends, where it is cut, the nodes sent."""
    cut, hidden = _path_cuts(path, context)
    return {
        "session_id": sid,
        "node_id": path[-1].node_id if path else None,
        "path_length": len(path),
        "cut_before": path[cut].node_id if cut else None,
        "nodes_cut": cut,
        "limit": limit,
        "nodes_hidden": hidden,
        "token_count": context.token_count,
        "nodes": [n.model_dump(mode="json") for n in context.nodes],
    }


def path_lines(
    path: Sequence[NodeRecord], context: ContextView, limit: int | None = None
) -> list[str]:
    """The ``path`` text: each node the model gets, its blocks indented, and the totals."""
    cut, hidden = _path_cuts(path, context)
    lines = []
    if cut:
        lines.append(f"({cut} earlier nodes of the path are before the compaction: not sent)")
    if hidden:
        lines.append(f"({hidden} earlier nodes of the context not shown: --limit {limit})")
    for n in context.nodes:
        tokens = f"  [{n.token_count} tokens]" if n.token_count is not None else ""
        lines.append(f"#{n.node_seq} {n.role}/{n.node_type} {n.node_id}{tokens}")
        for block in n.content:
            for line in block_text(block).splitlines() or [""]:
                lines.append(f"    {line}")
    shown = f"last {len(context.nodes)} nodes" if hidden else f"{len(context.nodes)} nodes"
    lines.append(f"context: {shown}, {context.token_count} tokens")
    return lines
