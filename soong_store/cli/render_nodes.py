"""What the CLI shows of a session's nodes: the ``tree`` and ``path`` text and documents.

Apart from :mod:`soong_store.cli.render` because these show content: importing them imports the
content blocks, which the commands that show no node (``sessions``, ``show``, ``timeline``) leave
unloaded. The tree's shape is built once from the nodes' stubs (:func:`build_tree`) and both
outputs are drawn from it, so they show the same tree; the nodes' text is given to them a page
at a time, so a view of a big session holds its shape and one page. Nothing here reads or writes
a store.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from soong_store.cli.render import clip
from soong_store.errors import NotFound
from soong_store.model import codec
from soong_store.model.content import (
    ContentBlock,
    JsonBlock,
    Leaf,
    Place,
    RedactedBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    fold,
)
from soong_store.model.global_records import agent_labels
from soong_store.model.records import AgentRecord, NodeRecord, SessionRecord
from soong_store.read.node_pages import NodeStub, is_compaction


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
    if isinstance(leaf, RedactedBlock):
        return f"[redacted: {leaf.reason}]"
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


@dataclass(slots=True)
class Tree:
    """The shape of a session's tree: its nodes' stubs (no content), children and active path.

    Built once from stubs (:func:`build_tree`); both the document (:func:`tree_head`,
    :func:`tree_item`) and the text (:func:`tree_walk`, :func:`tree_line`) are drawn from it,
    so both outputs show the same tree. The nodes' text is given page by page by the caller.
    """

    session_id: str
    active_node_id: str | None
    root_agent_id: str | None
    agents: list[dict[str, Any]]
    labels: dict[str, str]
    nodes: list[NodeStub]
    """By ``node_seq``, only the chosen agent's when one was asked for."""
    children: dict[str, list[NodeStub]]
    on_path: set[str]
    seqs: dict[str, int]
    """Every node's ``node_seq`` by id, the other agents' too (a parent is shown as ``#SEQ``)."""


def build_tree(
    session: SessionRecord,
    nodes: Sequence[NodeStub],
    agents: Sequence[AgentRecord],
    agent: str | None = None,
) -> Tree:
    """The tree of ``nodes`` (by ``node_seq``), the active path marked, one agent's if asked."""
    labels = agent_labels(agents, session.root_agent_id)
    seqs = {n.node_id: n.node_seq for n in nodes}
    if agent is not None:
        wanted = {a for a, label in labels.items() if agent in (a, label)}
        if not wanted:
            raise NotFound(f"no agent {agent!r} in session {session.session_id!r}")
        nodes = [n for n in nodes if n.agent_id in wanted]
    parent = {n.node_id: n.parent_id for n in nodes}
    children: dict[str, list[NodeStub]] = {n.node_id: [] for n in nodes}
    for n in nodes:
        if n.parent_id in children:
            children[n.parent_id].append(n)
    on_path: set[str] = set()
    current = session.active_node_id
    while current is not None and current in parent and current not in on_path:
        on_path.add(current)
        current = parent[current]
    described = [
        {
            "label": labels[a.agent_id],
            "agent_id": a.agent_id,
            "agent_type": str(a.agent_type),
            "status": str(a.status),
            "purpose": a.metadata.get("purpose") if isinstance(a.metadata, dict) else None,
            "fork_from_node_id": a.fork_from_node_id,
        }
        for a in agents
    ]
    return Tree(
        session.session_id,
        session.active_node_id,
        session.root_agent_id,
        described,
        labels,
        list(nodes),
        children,
        on_path,
        seqs,
    )


def tree_head(tree: Tree) -> dict[str, Any]:
    """The ``tree --json`` document without its ``nodes`` (written after it, one by one)."""
    return {
        "session_id": tree.session_id,
        "active_node_id": tree.active_node_id,
        "root_agent_id": tree.root_agent_id,
        "agents": tree.agents,
    }


def tree_text(node: NodeRecord) -> str:
    """The text the tree shows of a node (both outputs): its content as one line, clipped."""
    return clip(node_text(node), 200)


def tree_item(tree: Tree, n: NodeStub, text: str) -> dict[str, Any]:
    """One node of the ``tree --json`` document (``text``: :func:`tree_text` of the node)."""
    return {
        "node_id": n.node_id,
        "node_seq": n.node_seq,
        "parent_id": n.parent_id,
        "parent_seq": None if n.parent_id is None else tree.seqs.get(n.parent_id),
        "agent": tree.labels.get(n.agent_id, n.agent_id),
        "agent_id": n.agent_id,
        "run_id": n.run_id,
        "role": n.role,
        "node_type": n.node_type,
        "token_count": n.token_count,
        "text": text,
        "children": [c.node_id for c in tree.children[n.node_id]],
        "on_active_path": n.node_id in tree.on_path,
    }


def tree_document(
    session: SessionRecord,
    nodes: Sequence[NodeRecord],
    agents: Sequence[AgentRecord],
    agent: str | None = None,
) -> dict[str, Any]:
    """The whole tree document at once, of nodes already read (a small session's)."""
    texts = {n.node_id: tree_text(n) for n in nodes}
    tree = build_tree(session, [stub_of(n) for n in nodes], agents, agent)
    return {**tree_head(tree), "nodes": [tree_item(tree, n, texts[n.node_id]) for n in tree.nodes]}


def stub_of(node: NodeRecord) -> NodeStub:
    """The stub of a node record."""
    return NodeStub(
        node.node_id,
        node.node_seq,
        node.parent_id,
        node.agent_id,
        node.run_id,
        str(node.role),
        str(node.node_type),
        node.token_count,
    )


@dataclass(frozen=True, slots=True)
class TreeStep:
    """One line of the tree below its title: a node, or (``folded`` > 0) a folded branch."""

    node: NodeStub
    lead: str
    folded: int = 0


def tree_title(tree: Tree) -> list[str]:
    """The lines above the nodes: the count and legend, the agents, a missing active node."""
    fancy = _fancy()
    lines = [
        f"session {tree.session_id}: {len(tree.nodes)} nodes "
        f"(* active path, > active node, {'⑂' if fancy else '+'} branch point)"
    ]
    for a in tree.agents:
        extra = f", {a['purpose']}" if a["purpose"] else ""
        lines.append(f"  agent {a['label']}: {a['agent_id']} ({a['agent_type']}{extra})")
    if tree.active_node_id is None and tree.nodes:
        lines.append("  no active node: the next message starts a new root")
    return lines


def tree_walk(tree: Tree, depth: int | None = None) -> Iterator[TreeStep]:
    """The tree's lines in order: one per node, a chain at one indent, a branch once more.

    Walked with an explicit stack (no recursion), so a deep tree of thousands of nodes prints.
    Branches nested deeper than ``depth`` are folded to one line with their node count, except
    the one that leads to the active node.
    """
    fancy = _fancy()
    tee, elbow, pipe = ("├─ ", "└─ ", "│  ") if fancy else ("|- ", "`- ", "|  ")
    known = tree.children
    roots = [n for n in tree.nodes if n.parent_id not in known]
    sizes = _subtree_sizes(tree.nodes, known) if depth is not None else {}
    # An entry: the node, how much of the current indent is its parent's, the pieces its own
    # lead and indent add, its branch level, and whether it is folded. Indents are cut from the
    # one current indent (the DFS's path), so pending branches hold no indent strings of their own.
    stack: list[tuple[NodeStub, int, str, str, int, bool]] = []
    for index in range(len(roots) - 1, -1, -1):
        root, last = roots[index], index == len(roots) - 1
        under = (
            ""
            if root.parent_id is None
            else f"(under #{tree.seqs.get(root.parent_id, root.parent_id)}) "
        )
        lead, cont = ((elbow if last else tee) + under, "   " if last else pipe)
        stack.append(
            (root, 0, lead if len(roots) > 1 else under, cont if len(roots) > 1 else "", 0, False)
        )
    indent = ""
    while stack:
        node, kept, lead_piece, cont_piece, level, folded = stack.pop()
        base = indent[:kept]
        if folded:
            yield TreeStep(node, base + lead_piece, sizes[node.node_id])
            continue
        yield TreeStep(node, base + lead_piece)
        indent = base + cont_piece
        kids = known[node.node_id]
        if len(kids) == 1:
            stack.append((kids[0], len(indent), "", "", level, False))
            continue
        fold = depth is not None and level >= depth
        for index in range(len(kids) - 1, -1, -1):
            last = index == len(kids) - 1
            # The branch that holds the active node stays open, however deep.
            folded_here = fold and kids[index].node_id not in tree.on_path
            branch, below = (elbow, "   ") if last else (tee, pipe)
            stack.append((kids[index], len(indent), branch, below, level + 1, folded_here))


def tree_line(tree: Tree, step: TreeStep, text: str, width: int) -> str:
    """The line of one step (``text``: :func:`tree_text` of its node; unused when folded)."""
    node = step.node
    if step.folded:
        plural = "nodes" if step.folded > 1 else "node"
        return f"  {step.lead}… {step.folded} {plural} folded from #{node.node_seq}"
    fancy = _fancy()
    kids = len(tree.children[node.node_id])
    mark = ">" if node.node_id == tree.active_node_id else "*"
    mark = mark if node.node_id in tree.on_path else " "
    label = tree.labels.get(node.agent_id, node.agent_id)
    who = "" if node.agent_id == tree.root_agent_id else f"[{label}] "
    fork = f" {'⑂' if fancy else '+'}{kids}" if kids > 1 else ""
    head = f"{mark} {step.lead}#{node.node_seq} {node.role}/{node.node_type}{fork} {who}"
    return head + clip(text, max(width - len(head), 16))


def _subtree_sizes(nodes: list[NodeStub], known: dict[str, list[NodeStub]]) -> dict[str, int]:
    sizes = {n.node_id: 1 for n in nodes}
    for n in reversed(nodes):  # by node_seq, so every child before its parent
        if n.parent_id in known:
            sizes[n.parent_id] += sizes[n.node_id]
    return sizes


@dataclass(frozen=True, slots=True)
class PathView:
    """What ``path`` shows: the path's stubs, its last compaction's cut, the nodes sent.

    The nodes sent are the cut path's, its last ``limit`` when a limit is asked for.
    """

    session_id: str
    path: list[NodeStub]
    cut: int
    """How many nodes of the path come before its last compaction (not sent)."""
    shown: list[NodeStub]
    limit: int | None

    @property
    def hidden(self) -> int:
        """How many nodes of the cut path the limit hides."""
        return len(self.path) - self.cut - len(self.shown)

    @property
    def token_count(self) -> int:
        """The tokens of the nodes sent."""
        return sum(n.token_count or 0 for n in self.shown)


def path_view(sid: str, path: list[NodeStub], limit: int | None = None) -> PathView:
    """The view of ``path`` (root first): cut at its last compaction, then to ``limit`` nodes."""
    cut = 0
    for index in range(len(path) - 1, -1, -1):
        if is_compaction(path[index]):
            cut = index
            break
    kept = path[cut:]
    shown = kept if limit is None else kept[max(len(kept) - limit, 0) :]
    return PathView(sid, path, cut, shown, limit)


def path_head(view: PathView) -> dict[str, Any]:
    """The ``path --json`` document without its ``nodes`` (written after it, one by one)."""
    path, cut = view.path, view.cut
    return {
        "session_id": view.session_id,
        "node_id": path[-1].node_id if path else None,
        "path_length": len(path),
        "cut_before": path[cut].node_id if cut else None,
        "nodes_cut": cut,
        "limit": view.limit,
        "nodes_hidden": view.hidden,
        "token_count": view.token_count,
    }


def path_intro(view: PathView) -> list[str]:
    """The ``path`` text's first lines: what the compaction cuts and the limit hides."""
    lines = []
    if view.cut:
        lines.append(f"({view.cut} earlier nodes of the path are before the compaction: not sent)")
    if view.hidden:
        lines.append(
            f"({view.hidden} earlier nodes of the context not shown: --limit {view.limit})"
        )
    return lines


def path_node_lines(n: NodeRecord) -> list[str]:
    """One node of the ``path`` text: its heading, then its blocks indented."""
    tokens = f"  [{n.token_count} tokens]" if n.token_count is not None else ""
    lines = [f"#{n.node_seq} {n.role}/{n.node_type} {n.node_id}{tokens}"]
    for block in n.content:
        for line in block_text(block).splitlines() or [""]:
            lines.append(f"    {line}")
    return lines


def path_total(view: PathView) -> str:
    """The ``path`` text's last line: the nodes and tokens the model gets."""
    count = len(view.shown)
    shown = f"last {count} nodes" if view.hidden else f"{count} nodes"
    return f"context: {shown}, {view.token_count} tokens"
