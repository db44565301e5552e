"""The tool rules of :mod:`soong_store.rules.tree`, without a database."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import pytest

from soong_store.errors import InvalidContent
from soong_store.model.content import TextBlock, ToolCallBlock, ToolResultBlock, content_to_json
from soong_store.rules import tree


def call(i: str) -> ToolCallBlock:
    return ToolCallBlock(tool_call_id=i, name="read", arguments={"a": 1})


def result(i: str) -> ToolResultBlock:
    return ToolResultBlock(tool_call_id=i, content=[TextBlock(text="ok")])


def never() -> Iterator[Collection[str]]:
    raise AssertionError("climbed although the node needs no call from above")


def never_read() -> Iterator[Collection[str]]:
    raise AssertionError("read although the node needs no call from above")
    yield ()  # a generator: it raises when read


def test_tool_ids_of_blocks_and_of_their_stored_text():
    blocks = [TextBlock(text='{"type":"tool_call","tool_call_id":"no"}'), call("c1"), result("c0")]
    assert tree.tool_ids(blocks) == (("c1",), ("c0",))
    assert tree.stored_tool_ids(content_to_json(blocks)) == (("c1",), ("c0",))
    assert tree.stored_tool_ids('[{"type":"text","text":"hi"}]') == ((), ())
    assert tree.stored_tool_ids("[not json") == ((), ())


def test_the_climb_stops_once_every_result_has_its_call():
    read: list[int] = []

    def above() -> Iterator[Collection[str]]:
        for depth, calls in enumerate([("c2",), (), ("c1",), ("c0",)]):
            read.append(depth)
            yield calls

    ids = tree.ToolIds((), ("c1", "c2"))
    assert tree.unanswered(ids, above()) == []
    assert read == [0, 1, 2]
    assert tree.unanswered(tree.ToolIds((), ("c9", "c1", "c9")), iter([("c1",)])) == ["c9"]
    assert tree.unanswered(tree.ToolIds(("c1",), ("c1",)), never_read()) == []


def test_a_live_append_is_refused_naming_the_call():
    tree.check_tool_blocks("n", "tool", tree.ToolIds((), ("c1",)), lambda: [("c1",)])
    tree.check_tool_blocks("n", "assistant", tree.ToolIds(("c1",), ()), never)
    with pytest.raises(InvalidContent, match="'c2', which no tool_call on its path made") as e:
        tree.check_tool_blocks("n", "tool", tree.ToolIds((), ("c1", "c2")), lambda: [("c1",)])
    assert (e.value.node_id, e.value.tool_call_id) == ("n", "c2")
    with pytest.raises(InvalidContent, match="user node with tool call 'c3'") as e:
        tree.check_tool_blocks("n", "user", tree.ToolIds(("c3",), ()), never)
    assert e.value.tool_call_id == "c3"


def node(i: int, parent: int | None, role: str, *blocks: Any) -> dict[str, Any]:
    return {
        "node_id": f"n{i}",
        "parent_id": None if parent is None else f"n{parent}",
        "role": role,
        "content_json": content_to_json(list(blocks)),
    }


def test_notes_of_stored_nodes():
    nodes = [
        node(1, None, "user", TextBlock(text="go")),
        node(2, 1, "assistant", call("c1")),
        node(3, 2, "tool", result("c1")),
        node(4, 1, "tool", result("c1")),  # another branch: c1 is not on its path
        node(5, 3, "tool", result("c_none")),  # made nowhere
        node(6, 5, "user", call("c6")),
        node(7, 8, "tool", result("c1")),  # a parent chain that loops ends
        node(8, 7, "tool", result("c1")),
    ]
    notes = tree.tool_notes(nodes)
    assert [note.split()[1] for note in notes] == ["n4", "n5", "n6", "n7", "n8"]
    assert "'c_none'" in notes[1] and "user node with tool call 'c6'" in notes[2]
