"""The tool rules with a redacted node on the path: it may have made any call."""

from __future__ import annotations

from typing import Any

import orjson

from soong_store.model.content import RedactedBlock, TextBlock, ToolResultBlock
from soong_store.rules import tree


def _node(node_id: str, parent: str | None, role: str, content: list[Any]) -> dict[str, Any]:
    return {
        "node_id": node_id,
        "parent_id": parent,
        "role": role,
        "content_json": orjson.dumps(content).decode(),
    }


RESULT = {"type": "tool_result", "tool_call_id": "c1", "content": []}


def test_a_redacted_node_answers_every_result_below_it():
    redacted = [{"type": "redacted", "reason": "secret"}]
    nodes = [
        _node("a", None, "user", [{"type": "text", "text": "hi"}]),
        _node("b", "a", "assistant", redacted),
        _node("c", "b", "tool", [RESULT]),
    ]
    assert tree.tool_notes(nodes) == []
    assert tree.stored_tool_ids(nodes[1]["content_json"]).calls is tree.ANY_CALL


def test_without_the_redacted_node_the_result_is_noted():
    nodes = [
        _node("a", None, "user", [{"type": "text", "text": "hi"}]),
        _node("b", "a", "assistant", [{"type": "text", "text": "calling"}]),
        _node("c", "b", "tool", [RESULT]),
    ]
    assert len(tree.tool_notes(nodes)) == 1


def test_a_redacted_node_elsewhere_answers_nothing():
    nodes = [
        _node("a", None, "user", [{"type": "text", "text": "hi"}]),
        _node("x", "a", "assistant", [{"type": "redacted", "reason": "r"}]),
        _node("b", "a", "assistant", [{"type": "text", "text": "calling"}]),
        _node("c", "b", "tool", [RESULT]),
    ]
    assert len(tree.tool_notes(nodes)) == 1


def test_json_data_that_looks_redacted_is_not():
    content = [{"type": "json", "data": {"type": "redacted", "reason": "r"}}]
    assert tree.stored_tool_ids(orjson.dumps(content).decode()).calls == ()


def test_live_blocks_redacted():
    ids = tree.tool_ids([RedactedBlock(reason="r"), TextBlock(text="x")])
    assert ids.calls is tree.ANY_CALL
    result = ToolResultBlock(tool_call_id="c1", content=[])
    assert tree.unanswered(tree.tool_ids([result]), [tree.ANY_CALL]) == []
    assert tree.unanswered(tree.tool_ids([result]), [()]) == ["c1"]
