"""The tree's walk: the lines of a deep, branching tree without holding an indent per branch."""

from __future__ import annotations

import tracemalloc

import pytest

from soong_store.cli import render_nodes
from soong_store.cli.render_nodes import Tree, tree_walk
from soong_store.read.node_pages import NodeStub


@pytest.fixture(autouse=True)
def plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """ASCII branch marks, whatever this terminal's encoding."""
    monkeypatch.setattr(render_nodes, "_fancy", lambda: False)


def branching(points: int) -> Tree:
    """A chain of ``points`` nodes, each parent with a second child.

    The chain goes one indent deeper at every node, with ``points`` branches pending while it
    is walked.
    """
    nodes: list[NodeStub] = []
    children: dict[str, list[NodeStub]] = {}
    parent: str | None = None
    for index in range(points):
        main = NodeStub(f"m{index}", 2 * index + 1, parent, "a", None, "user", "message", None)
        nodes.append(main)
        children[main.node_id] = []
        if parent is not None:
            side = NodeStub(f"s{index}", 2 * index + 2, parent, "a", None, "user", "message", None)
            nodes.append(side)
            children[side.node_id] = []
            children[parent] += [main, side]
        parent = main.node_id
    on_path = {n.node_id for n in nodes if n.node_id.startswith("m")}
    seqs = {n.node_id: n.node_seq for n in nodes}
    return Tree("sess", parent, "a", [], {"a": "main"}, nodes, children, on_path, seqs)


def test_every_node_is_walked_once_with_its_indent() -> None:
    tree = branching(5)
    steps = list(tree_walk(tree))
    assert sorted(s.node.node_id for s in steps) == sorted(n.node_id for n in tree.nodes)
    leads = {s.node.node_id: s.lead for s in steps}
    assert leads["m0"] == "" and leads["m1"] == "|- " and leads["s1"] == "`- "
    assert leads["m2"] == "|  |- " and leads["s2"] == "|  `- "
    assert len(leads["m4"]) == len(leads["s4"]) == 3 * 4


def test_a_deep_branching_walk_holds_one_indent_not_one_per_pending_branch() -> None:
    tree = branching(3000)
    tracemalloc.start()
    try:
        longest = 0
        for step in tree_walk(tree):
            longest = max(longest, len(step.lead))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert longest == 3 * 2999
    # Pending branches holding an indent each: ~3000 strings of up to 9,000 characters (~27 MB).
    assert peak < 2_000_000, f"{peak:,} bytes at the peak of the walk"
